"""The corpus programs: each a function of tensors one dimension of which takes many
sizes, and :data:`PROGRAMS`, how each is called (see :mod:`.harness`).

The first sixteen (``x`` of ``[n, 64]``, ``w`` of ``[64, 32]``) are decision 0200's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .harness import Program


def rows(n: int, cols: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` of ``[n, cols]`` and ``w`` of ``[cols, 32]``: the first sixteen's arguments."""
    return torch.randn(n, cols), torch.randn(cols, 32)


# ---------------------------------------------------------------- decision 0200's sixteen


def softmax_gelu(x, w):
    return torch.softmax(F.gelu(x @ w), -1) * 2


def pointwise(x, w):
    return torch.sigmoid(x) * x + w.sum()


def reduce_dynamic_dim(x, w):
    return x.sum(0) + w.mean()


def reduce_static_dim(x, w):
    return x.amax(1, keepdim=True) - x.mean(-1, keepdim=True)


def matmul(x, w):
    return x @ w


def softmax(x, w):
    return torch.softmax(x, dim=0) + torch.log_softmax(x, dim=1)


def layer_norm(x, w):
    return F.layer_norm(x, (x.shape[-1],))


def slice_half(x, w):
    n = x.shape[0]
    return x[: n // 2] * 2 + x[n - n // 2 :]


def slice_last(x, w):
    return x[1:] - x[:-1]


def narrow_from_size(x, w):
    return x.narrow(0, 1, x.size(0) - 2).relu()


def reshape_flat(x, w):
    return x.reshape(x.shape[0] * 2, -1).sum(1)


def view_split(x, w):
    return x.view(x.shape[0], 4, 16).transpose(0, 1).contiguous().sum(-1)


def cat_rows(x, w):
    return torch.cat([x, x * 2], dim=0).mean(0)


def cat_cols(x, w):
    return torch.cat([x, x.flip(0)], dim=1) + 1


def expand_mask(x, w):
    mask = torch.arange(x.shape[0]) < x.shape[0] // 3
    return torch.where(mask[:, None], x, -x)


def mean_by_size(x, w):
    return x.sum(0) / x.shape[0]


SIXTEEN = [
    softmax_gelu, pointwise, reduce_dynamic_dim, reduce_static_dim, matmul, softmax,
    layer_norm, slice_half, slice_last, narrow_from_size, reshape_flat, view_split, cat_rows,
    cat_cols, expand_mask, mean_by_size,
]  # fmt: skip

#: Those whose slices are 0 or 1 long at small sizes: the meta functions specialise such
#: a derived size (as torch.compile's do), so those sizes get a symbolic entry of their own.
SLICING = {slice_half, slice_last, narrow_from_size}


# ---------------------------------------------------------------- elementwise, dtypes


def tanh_gelu_chain(x):
    return F.gelu(x, approximate="tanh") * torch.tanh(x) + x.exp().clamp(max=10.0)


def integer_arithmetic(a):
    return (a * 3 + 1) % 7 - a // 2, a.sum(1), a.abs().max(1).values


def bool_masks(x):
    positive = x > 0
    mixed = (positive & ~(x > 1)) | (x < -1)
    return mixed, positive.sum(0), positive.any(1), torch.where(mixed, x, 0.0)


def int32_where_cumsum(a):
    return torch.where(a > 3, a, -a).clamp(-2, 5).to(torch.int64).cumsum(0)


# ---------------------------------------------------------------- norms, reductions


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def variance_over_rows(x):
    return x.var(0), x.std(1), torch.logsumexp(x, 0)


def cumulative_sums(x):
    return x.cumsum(0) - x.flip(0).cumsum(0), torch.cumprod(x.sign(), dim=1)


def topk_static_k(x):
    values, indices = torch.topk(x, 3, dim=1)
    return values * 2, indices, x.max(1).values


def sort_rows(x):
    values, indices = x.sort(dim=0)
    return values, indices, x.argmax(1)


# ---------------------------------------------------------------- matmul, attention


def linear_relu(x, weight, bias):
    return F.linear(x, weight, bias).relu()


def gram_over_rows(x):
    return x.T @ x / 4  # the contraction runs over the dynamic dimension


def batched_matmul(a, b):
    return torch.bmm(a, b).sum(0), torch.baddbmm(a @ b, a, b)


def causal_attention(q, k, v):
    t = q.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.arange(t)[None, :] > torch.arange(t)[:, None]
    return torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def kv_cache_append(cache, new):
    # a KV cache that grows by one row per step
    cache = torch.cat([cache, new], dim=0)
    scores = torch.softmax(cache @ new.T, dim=0)
    return cache, (scores * cache).sum(0)


def kv_cache_attention(k_cache, v_cache, q, k, v):
    keys = torch.cat([k_cache, k], dim=1)  # [heads, t + 1, d]
    values = torch.cat([v_cache, v], dim=1)
    weights = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(q.shape[-1]), -1)
    return weights @ values, keys, values


def length_mask_mean(x, lengths):
    mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
    return torch.where(mask, x, 0.0).sum(1) / lengths.clamp(min=1)


def alibi_bias(x):
    t = x.shape[-1]
    positions = torch.arange(t)
    distance = (positions[:, None] - positions[None, :]).abs()
    return x[:, None, :] - distance * 0.5, distance


def sinusoidal_positions(x):
    t, d = x.shape[0], x.shape[1]
    position = torch.arange(t, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(100.0) / d))
    angles = position * frequency
    return x + torch.cat([angles.sin(), angles.cos()], dim=1)


# ---------------------------------------------------------------- slicing, views, joins


def slice_time_half(x):
    t = x.shape[1]
    return x[:, : t // 2].sum(1) - x[:, t - t // 2 :].sum(1)


def slice_last_third(x):
    n = x.shape[-1] // 3
    return x[..., -n:] * 2  # n == 0: -0 is the start, the whole row


def strided_rows(x):
    return x[::2] + 1, x.flip(0)[1::3]


def flatten_leading(x):
    flat = x.flatten(0, 1)  # [n * 4, 3]
    return flat @ torch.ones(3, 2), x.reshape(-1, 12).sum(0), x.view(-1).sum()


def unflatten_permute(x):
    n = x.shape[0]
    return x.unflatten(1, (3, 4)).permute(0, 2, 1).reshape(n, 12)


def stack_rows(x):
    return torch.stack([x, x.flip(0), x * 2], dim=1).sum(-1)


def expand_broadcast(x, b):
    n = x.shape[0]
    return x.expand(n, 5, 8) + b, x[:, None, 0, :].expand(-1, 2, -1) * 3


def pad_time(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 2, 0), value=-1.0)


def split_static_dim(x):
    first, second = x.split([1, 2], dim=1)
    left, right = x.chunk(2, dim=2)
    return first * second.sum(1, keepdim=True), left - right


def repeat_and_roll(x):
    return x.repeat(2, 1), torch.roll(x, 1, 0), torch.tile(x, (1, 2))


# ---------------------------------------------------------------- indexing, embedding, conv


def gather_columns(x, index):
    return torch.gather(x, 1, index) + x[:, :1]


def index_select_reversed(x):
    n = x.shape[0]
    reversed_rows = torch.arange(n - 1, -1, -1)
    return x.index_select(0, reversed_rows) * 2, x[reversed_rows]


def index_add_rows(x, index):
    return torch.zeros(4, x.shape[1]).index_add(0, index, x)


def embedding_sum(ids, table):
    return F.embedding(ids, table).sum(1), F.one_hot(ids, 10).sum(1)


def conv1d_length(x, weight):
    return F.conv1d(x, weight, padding=1).relu(), F.conv1d(x, weight, stride=2, padding=1)


def new_factories(x):
    n = x.shape[0]
    return x + torch.zeros(n, 3), x.new_ones(n, 2) * n, torch.full((n,), 2.0)


# ---------------------------------------------------------------- decisions on sizes


def branch_on_size(x):
    if x.shape[0] > 20:
        return x[: x.shape[0] // 2] * 2
    return x.sum(0)


def loop_over_columns(x):
    total = x[:, 0]
    for i in range(1, x.size(1)):  # a loop over a size: unrolled, so specialised
        total = total + x[:, i] * i
    return total


# ---------------------------------------------------------------- views and writes (0445)


def views_of_input(x):
    return x.transpose(0, 1), x.view(-1, 4), x[:, 2:]


def view_of_output(x):
    y = x * 2
    return y, y.t()


def in_place_update(p, g):
    p.add_(g * 2)  # an optimizer-like update of an input
    return p.sum(0)


def kv_cache_slice_write(cache, k):
    t = k.shape[1]
    cache[:, t : 2 * t] = k  # a cache written where the sizes say
    return cache.sum(1)


# ---------------------------------------------------------------- modules


def _module(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    return module.eval().requires_grad_(False)


LINEAR = _module(torch.nn.Linear(16, 8))
MLP_NORM = _module(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
)
EMBEDDING = _module(torch.nn.Embedding(10, 8))


class SelfAttention(torch.nn.Module):
    """``nn.MultiheadAttention`` over a sequence of any length, causal."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.arange(t)[None, :] > torch.arange(t)[:, None]
        return self.attention(x, x, x, attn_mask=mask, need_weights=False)[0]


# In eval mode nn.MultiheadAttention's fast-path checks read torch's dispatch-mode stack
# (capture reads and guards it like other global state).
SELF_ATTENTION = _module(SelfAttention()).eval()


# ---------------------------------------------------------------- how each is called

#: the KV cache programs are called at consecutive lengths, as a decode loop would
GROWING = (0, 1, 2, 3, 4, 5, 6, 7, 8)


def _heads(t: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(2, t, 8), torch.randn(2, t, 8), torch.randn(2, t, 8)


PROGRAMS = [
    *(
        Program(fn, rows, extra_entries=int(fn in SLICING))
        for fn in SIXTEEN
        if fn not in (narrow_from_size, reshape_flat)
    ),
    # reshape(0, -1) is ambiguous: eager raises at size 0
    Program(reshape_flat, rows, sizes=(1, 16, 17, 2, 5, 33, 3, 9)),
    # narrow(0, 1, n - 2) needs n >= 2 (eager raises below); 2 and 3 are their own entry
    Program(narrow_from_size, rows, sizes=(2, 16, 17, 3, 5, 33, 9, 40), extra_entries=1),
    Program(tanh_gelu_chain, lambda n: (torch.randn(n, 3, 5),)),
    Program(integer_arithmetic, lambda n: (torch.randint(-50, 50, (n, 4)),)),
    Program(bool_masks, lambda n: (torch.randn(n, 6) * 2,)),
    Program(int32_where_cumsum, lambda n: (torch.randint(-9, 9, (n, 5), dtype=torch.int32),)),
    Program(rms_norm, lambda n: (torch.randn(n, 16), torch.randn(16))),
    Program(variance_over_rows, lambda n: (torch.randn(n, 6),)),
    Program(cumulative_sums, lambda n: (torch.randn(n, 4),)),
    # topk(3) and max need 3 columns (eager raises below)
    Program(topk_static_k, lambda n: (torch.randn(4, n),), sizes=(3, 16, 17, 4, 5, 33, 9, 64)),
    # argmax over 0 rows raises in eager
    Program(sort_rows, lambda n: (torch.randn(n, 5),), sizes=(1, 16, 17, 2, 5, 33, 3, 9)),
    Program(linear_relu, lambda n: (torch.randn(n, 16), torch.randn(8, 16), torch.randn(8))),
    Program(gram_over_rows, lambda n: (torch.randn(n, 8),)),
    Program(batched_matmul, lambda n: (torch.randn(n, 3, 4), torch.randn(n, 4, 3))),
    Program(causal_attention, _heads),
    Program(sdpa_causal, _heads),
    Program(kv_cache_append, lambda n: (torch.randn(n, 16), torch.randn(1, 16)), sizes=GROWING),
    Program(
        kv_cache_attention,
        lambda n: (torch.randn(2, n, 8), torch.randn(2, n, 8), *_heads(1)),
        sizes=GROWING,
    ),
    Program(
        length_mask_mean,
        lambda n: (torch.randn(3, n), torch.randint(0, n + 1, (3,))),
    ),
    Program(alibi_bias, lambda n: (torch.randn(2, n),)),
    Program(sinusoidal_positions, lambda n: (torch.randn(n, 8),)),
    Program(slice_time_half, lambda n: (torch.randn(2, n, 3),)),
    # n = T // 3 is 1 for T in 3..5 and 0 (the whole row) below: an entry each
    Program(slice_last_third, lambda n: (torch.randn(3, n),), extra_entries=2),
    # at 2, x[::2] and x.flip(0)[1::3] are 1 long: their own entry
    Program(strided_rows, lambda n: (torch.randn(n, 3),), extra_entries=1),
    Program(flatten_leading, lambda n: (torch.randn(n, 4, 3),)),
    Program(unflatten_permute, lambda n: (torch.randn(n, 12),)),
    Program(stack_rows, lambda n: (torch.randn(n, 5),)),
    Program(expand_broadcast, lambda n: (torch.randn(n, 1, 8), torch.randn(5, 1))),
    Program(pad_time, lambda n: (torch.randn(2, 3, n),)),
    Program(split_static_dim, lambda n: (torch.randn(n, 3, 4),)),
    Program(repeat_and_roll, lambda n: (torch.randn(n, 3),)),
    Program(gather_columns, lambda n: (torch.randn(n, 8), torch.randint(0, 8, (n, 3)))),
    Program(index_select_reversed, lambda n: (torch.randn(n, 4),)),
    Program(index_add_rows, lambda n: (torch.randn(n, 3), torch.randint(0, 4, (n,)))),
    Program(embedding_sum, lambda n: (torch.randint(0, 10, (2, n)), torch.randn(10, 8))),
    # conv1d(padding=1, kernel 3) needs a length of at least 1 (eager raises at 0)
    Program(conv1d_length, lambda n: (torch.randn(2, 3, n), torch.randn(4, 3, 3)),
            sizes=(1, 16, 17, 2, 5, 33, 3, 9)),
    Program(new_factories, lambda n: (torch.randn(n, 3),)),
    # one symbolic entry for each side of `x.shape[0] > 20`
    Program(branch_on_size, lambda n: (torch.randn(n, 4),), extra_entries=1),
    # x[:, 0] needs a column; small sizes: every one is its own entry
    Program(loop_over_columns, lambda n: (torch.randn(5, n),), sizes=(1, 2, 3, 4, 2, 5, 3, 6),
            per_size=True),
    Program(views_of_input, lambda n: (torch.randn(n, 8),)),
    Program(view_of_output, lambda n: (torch.randn(n, 3),)),
    Program(in_place_update, lambda n: (torch.randn(n, 3), torch.randn(n, 3))),
    Program(kv_cache_slice_write, lambda n: (torch.randn(2, 80, 4), torch.randn(2, n, 4))),
    Program(LINEAR, lambda n: (torch.randn(n, 16),)),
    Program(MLP_NORM, lambda n: (torch.randn(n, 16),)),
    Program(EMBEDDING, lambda n: (torch.randint(0, 10, (n, 3)),)),
    Program(SELF_ATTENTION, lambda n: (torch.randn(2, n, 16),)),
]  # fmt: skip
