"""Tensor mutation as model code writes it: item assignment with ints, slices, None,
``...``, boolean masks and index tensors, broadcast values; in-place ops through views of
intermediates and of inputs (the corpus test compares the mutated arguments too)."""

import copy

import torch
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def cache_and_keys(n):
    return (torch.zeros(2, n, 8), torch.randn(2, 8), n // 2)


def scores(n):
    return (torch.randn(2, n, n),)


torch.manual_seed(5)


class RunningStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(8))
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        self.seen += 1
        return x - self.mean


class Masker(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        logits = self.proj(x).clone()
        logits[:, 0] = float("-inf")
        logits[logits.isnan()] = 0.0
        return logits.softmax(-1)


TEMPLATES = {"stats": RunningStats(), "masker": Masker()}


def module(name):
    def make(n):
        return (copy.deepcopy(TEMPLATES[name]), torch.randn(n, 8))

    return make


@case(one)
def assign_last_column(x):
    y = x.clone()
    y[:, -1] = 7.0
    return y


@case(one)
def relu_by_mask(x):
    y = x * 1
    y[y < 0] = 0
    return y


@case(cache_and_keys)
def kv_cache_write_at_position(cache, k, pos):
    cache[:, pos] = k
    return cache[:, : pos + 1].sum(1)


@case(scores)
def causal_mask_by_assignment(s):
    n = s.shape[-1]
    mask = torch.zeros(n, n)
    mask[torch.ones(n, n).triu(1).bool()] = float("-inf")
    return (s + mask).softmax(-1)


@case(one)
def rotate_half_into_clone(x):
    half = x.shape[-1] // 2
    out = x.clone()
    out[..., :half] = -x[..., half:]
    out[..., half:] = x[..., :half]
    return out


@case(one)
def fill_columns_in_a_loop(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[1]):
        out[:, i] = x[:, i] * i
    return out


@case(one)
def none_and_ellipsis_index(x):
    y = x.clone()
    y[None, 0, ..., 1:3] = 0.5
    y[..., -1] = y[..., 0]
    return y


@case(one)
def index_tensor_rows(x):
    y = x.clone()
    rows = torch.tensor([0, 2])
    y[rows] = x[1] * 2
    y[:, rows] = 1.0
    return y


@case(one)
def mask_with_broadcast_row(x):
    y = x.clone()
    y[x[:, 0] > 0] = x[0]
    return y


@case(one)
def mask_with_scalar_tensor(x):
    y = x.clone()
    y[y.abs() > 1] = y.mean()
    return y


@case(one)
def inplace_through_view_of_intermediate(x):
    y = x * 2
    first = y[0]
    first.add_(1)
    return y, first


@case(one)
def inplace_through_view_of_input(x):
    x[0].add_(1)
    x[1:, :2] *= 2
    return x.sum(0)


@case(one)
def base_updated_view_read_after(x):
    y = x + 0
    t = y.t()
    y.mul_(3)
    return t.sum(0)


@case(one)
def flat_view_scaled(x):
    y = x.clone()
    y.view(-1)[::2] = 0.0
    return y


@case(one)
def slice_assignment_statement(x):
    y = x.clone()
    y[1:3] = torch.arange(8.0)
    return y


@case(module("stats"))
def running_buffers_updated(module, x):
    return module(x)


@case(module("masker"))
def mask_logits_in_module(module, x):
    return module(x)


@case(cache_and_keys)
def cache_write_at_positions_tensor(cache, k, pos):
    positions = torch.tensor([0, pos])
    cache[0, positions] = k
    cache[1, positions, :4] = 0.0
    return cache.sum(1)
