"""Tensor indexing and slicing, masks, integer tensors, in-place updates."""

import torch
from _registry import registry

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def cube(n):
    return (torch.randn(n, 6, 5),)


def with_index(n):
    return (torch.randn(n, 8), torch.randint(0, n, (3,)))


@case(one)
def select_row(x):
    return x[0], x[-1], x[1, 2]


@case(one)
def slice_rows(x):
    return x[1:3], x[:, 2:], x[:-1, ::2]


@case(cube)
def ellipsis_index(x):
    return x[..., 0], x[0, ...], x[..., 1:3]


@case(cube)
def none_index(x):
    return x[None], x[:, None, 0], x[..., None]


@case(one)
def negative_step_free_slices(x):
    return x[::3], x[1::2, 1::3]


@case(one, expect="break")  # the result's shape depends on the data
def bool_mask_select(x):
    return x[x > 0]


@case(with_index)
def integer_tensor_index(x, idx):
    return x[idx], x[:, idx % 8]


@case(with_index)
def integer_tensor_with_slice(x, idx):
    return x[1:, idx % 8], x[..., idx % 8]


@case(one)
def masked_assignment(x):
    y = x * 2
    y[y < 0] = 0.0
    return y


@case(one)
def masked_fill_method(x):
    return x.masked_fill(x > 0.5, -1.0)


@case(one)
def index_select_gather(x):
    idx = torch.tensor([0, 2])
    return x.index_select(1, idx), x.gather(1, torch.zeros(x.shape[0], 1, dtype=torch.long))


@case(one)
def inplace_chain(x):
    y = x.clone()
    y.mul_(2).add_(1)
    y.clamp_(-1, 1)
    return y


@case(one)
def inplace_on_argument(x):
    x.mul_(2)
    return x + 1


@case(one)
def inplace_relu_functional(x):
    y = x + 0
    torch.nn.functional.relu(y, inplace=True)
    return y


@case(one)
def augmented_assignment(x):
    y = x.clone()
    y += 1
    y *= x
    y -= 0.5
    y /= 2
    return y


@case(one, expect="any")
def setitem_slice(x):
    y = x.clone()
    y[:, 0] = 5.0
    return y


@case(one)
def iterate_over_rows(x):
    total = 0
    for row in x[:3]:
        total = total + row.sum()
    return total


@case(one)
def unbind_and_stack(x):
    rows = x.unbind(0)
    return torch.stack(rows[::-1])


@case(one)
def shape_of_slices(x):
    y = x[:, 2:6]
    return y.shape, y.size(1), len(y)


@case(one)
def where_and_nonzero_free(x):
    return torch.where(x > 0, 1.0, -1.0), (x > 0).sum(dim=1)


@case(one)
def topk_and_argmax(x):
    values, indices = x.topk(2, dim=-1)
    return values, indices, x.argmax(-1)


@case(one)
def scatter_add(x):
    idx = torch.zeros(x.shape[0], 8, dtype=torch.long)
    return torch.zeros(1, 8).scatter_add(0, idx[:1].expand(x.shape[0], 8), x)


@case(one)
def tril_triu(x):
    return x[:, : x.shape[0]].tril(), x[:, : x.shape[0]].triu(1)


@case(one)
def flip_roll(x):
    return x.flip(0), x.roll(1, dims=1)


@case(one)
def expand_repeat(x):
    return x[:, :1].expand(-1, 4), x.repeat(2, 1)
