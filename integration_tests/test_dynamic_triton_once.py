"""Triton kernels of a symbolic entry lowered once for many sizes (issue 33, decision 0400).

Each graph is compiled with ``codegen="triton"`` on CPU tensors (Triton's interpreter, as
CI tests generated Triton; ``cuda`` variants under the ``gpu`` mark) and called at sizes
that include 1, odd sizes and powers of two. Every call is compared with eager, and
``size_lowering_stats()`` says that no size lowered on its own and that one symbolic
lowering served the sizes of each power-of-two bucket of the length its block sizes are
chosen from (a new bucket lowers again; decision 0400).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr

from .triton_devices import TRITON_DEVICES

#: lengths called in turn: 1, odd ones, powers of two, in and across buckets
LENGTHS = (5, 7, 6, 8, 1, 13, 16, 11, 9, 12)


pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")


def _buckets(lengths: Sequence[int]) -> int:
    """The power-of-two buckets of ``lengths`` (1 and 2 are each a bucket of their own:
    the runtime specialises 1, and 2 is a bucket's only size)."""
    return len({1 if n <= 1 else 1 << (n - 1).bit_length() for n in lengths})


def _run_all(
    fn: Callable[..., torch.Tensor],
    inputs: Callable[[int], tuple[torch.Tensor, ...]],
    lengths: Sequence[int] = LENGTHS,
    dynamic: bool | None = True,
    device: str = "cpu",
) -> dict[str, int]:
    """Call ``fn`` compiled (Triton, ``dynamic``) at each of ``lengths``, each result
    equal to eager's; return the counts of what lowered. ``dynamic=None``: the first
    size is compiled static (the width stays static: its float ``1/C`` is not ported).
    At most one symbolic lowering per bucket of ``lengths``; on a GPU one more, for the
    multiples of 16 among them (Triton's specialisation, a condition: decision 0400)."""
    torch.manual_seed(0)
    compiled = tsr.compile(fn, dynamic=dynamic, codegen="triton")
    for length in lengths:
        args = inputs(length)
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0, stats
    assert not [key for key in stats if key.startswith("fallback")], stats
    lengths = lengths if dynamic else lengths[2:]  # a static size, then the symbolic one
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(lengths), stats
    most = _buckets(lengths) + (device == "cuda")
    assert 1 <= stats["symbolic"] <= most < len(lengths), stats
    return stats


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def row_sum(x):
    return x.sum(-1) * 0.5


def broadcast_chain(x, column, row):
    return torch.relu(x * column + row).sigmoid() - 0.5


def rotated(x):
    # slices whose bounds are computed from the size (``1:n`` and a cat at ``n - 1``)
    return torch.cat([x[:, 1:], x[:, :1]], 1) * 2.0


def attention(x, w_q, w_k, w_v, w_out):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    return (weights @ v) @ w_out + x


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_softmax_over_varying_rows_lengths(device):
    _run_all(softmax, lambda n: (torch.randn(3, n, device=device),), device=device)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_layer_norm_over_varying_rows(device):
    # the normalised dim is fixed (a model's width), the rows vary
    weight, bias = torch.randn(24, device=device), torch.randn(24, device=device)
    _run_all(
        layer_norm,
        lambda n: (torch.randn(2, n, 24, device=device), weight, bias),
        dynamic=None,
        device=device,
    )


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_reduction_over_a_varying_length(device):
    _run_all(row_sum, lambda n: (torch.randn(4, n, device=device),), device=device)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_elementwise_chain_with_broadcasting(device):
    def inputs(n: int) -> tuple[torch.Tensor, ...]:
        return (
            torch.randn(n, 24, device=device),
            torch.randn(n, 1, device=device),
            torch.randn(24, device=device),
        )

    _run_all(broadcast_chain, inputs, device=device)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_slice_with_bounds_computed_from_sizes(device):
    lengths = [n for n in LENGTHS if n >= 2]  # a slice of 1: 0 elements, specialised
    _run_all(rotated, lambda n: (torch.randn(4, n, device=device),), lengths, device=device)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_attention_block_over_sequence_lengths(device):
    # a width no length equals (a scheduler decision ``T == 16`` is a size's own)
    w_q, w_k, w_v, w_out = torch.randn(4, 24, 24, device=device) / 4
    inputs = lambda n: (torch.randn(2, n, 24, device=device), w_q, w_k, w_v, w_out)  # noqa: E731
    _run_all(attention, inputs, device=device)


#: row lengths in eight power-of-two buckets (3 to 257): more than four lowerings
SPREAD = (3, 5, 9, 17, 33, 65, 129, 257, 6, 200)


@pytest.mark.triton
def test_rows_over_many_buckets_lower_once_per_bucket():
    # the default ``symbolic_lowerings`` serves a row length spanning 2..65536 (16
    # buckets; decision 0435): no size of eight buckets lowers on its own
    stats = _run_all(softmax, lambda n: (torch.randn(3, n),), lengths=SPREAD)
    assert stats["symbolic"] == 8, stats


@pytest.mark.triton
@pytest.mark.parametrize("cap", [1, 3])
def test_symbolic_lowerings_option_caps_an_entrys_lowerings(cap):
    options = {"symbolic_lowerings": cap}
    compiled = tsr.compile(softmax, dynamic=True, codegen="triton", options=options)
    for length in SPREAD:
        x = torch.randn(3, length)
        torch.testing.assert_close(compiled(x), softmax(x))
    stats = tsr.size_lowering_stats()
    # the sizes past the cap that no lowering serves lower on their own
    assert stats["symbolic"] == cap, stats
    assert stats["per_size"] == len(SPREAD) - cap - stats.get("reused", 0), stats
    assert stats.get("reused", 0) <= 2, stats


def halves(x):
    n = x.shape[-1]
    return x[:, : n // 2] * 2 + x[:, n - n // 2 :]


@pytest.mark.triton
def test_sizes_with_floor_division_print_in_the_kernel():
    # ``n // 2`` in an index coefficient and the launcher's sizes: Triton source (a
    # non-negative dividend: ``//`` floors as Python's) where it was a size read (0438)
    _run_all(halves, lambda n: (torch.randn(3, n),), lengths=(5, 7, 6, 8, 13, 16, 11, 9, 12))


def slice_write(cache, k):
    t = k.shape[1]
    cache[:, t : 2 * t] = k  # the offset's ShapeEnv form: Mod of sizes of any sign
    return cache.sum(1)


@pytest.mark.triton
def test_a_slice_write_at_a_size_offset_lowers_once():
    # the write's offset ``8*Mod(s0 - Mod(s0 + (40 - s0)*floor(..), s0 - 40), 40 - s0)``
    # prints in a form that truncating and flooring ``%`` agree on (0470): one lowering,
    # the cache written where eager writes it
    compiled = tsr.compile(slice_write, dynamic=True, codegen="triton")
    for length in (5, 7, 6, 13, 11, 9, 12, 3):
        cache, k = torch.randn(2, 80, 4), torch.randn(2, length, 4)
        expected_cache = cache.clone()
        expected = slice_write(expected_cache, k)
        torch.testing.assert_close(compiled(cache, k), expected)
        torch.testing.assert_close(cache, expected_cache)
    stats = tsr.size_lowering_stats()
    assert stats == {"symbolic": 1, "reused": 7}, stats


def halves_summed(x):
    t = x.shape[1]
    return x[:, : t // 2].sum(1) - x[:, t - t // 2 :].sum(1)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_halves_one_long_lower_in_their_bucket(device):
    # at 2 and 3 the halves are one long: the decomposition compared ``t // 2 > 1`` (the
    # size broke that condition and lowered on its own, 0408) and the index algebra made
    # a one-long loop a constant. Now both lengths lower symbolically, in the bucket of
    # the half-length 1 (decision 0480). Triton on a GPU launches its reduction without
    # the interpreter's per-bucket blocks: fewer lowerings there (two on the H100), and
    # maybe one more for an aligned size (0400)
    halves = (16, 17, 2, 3, 5, 33, 9, 8)
    inputs = lambda n: (torch.randn(2, n, 3, device=device),)  # noqa: E731
    stats = _run_all(halves_summed, inputs, lengths=halves, device=device)
    buckets = _buckets([n // 2 for n in halves])
    least = buckets if device == "cpu" else 1
    assert least <= stats["symbolic"] <= buckets + (device == "cuda"), stats


def last_third(x):
    return x[..., -(x.shape[-1] // 3) :] * 2


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_a_slice_one_column_wide_lowers_for_its_widths(device):
    # at 3 to 5 columns the slice is one column wide (a trace of its own: the slice's
    # meta specialises a size of 1); its kernel derived the column from the flat index
    # by ``stride != 1``, pinning ``Eq(s0//3, 1)`` (a size read). A symbolic stride now
    # divides at every size (decision 0480)
    compiled = tsr.compile(last_third, dynamic=True, codegen="triton")
    sizes = (16, 17, 5, 33, 4, 9, 3)
    for columns in sizes:
        x = torch.randn(3, columns, device=device)
        torch.testing.assert_close(compiled(x), last_third(x))
    _assert_lowered(tsr.size_lowering_stats(), len(sizes), 2, device)


def repeat_and_roll(x):
    return x.repeat(2, 1), torch.roll(x, 1, 0), torch.tile(x, (1, 2))


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_a_roll_lowers_for_many_lengths(device):
    # the roll's two loads of a ``where`` have offsets equal at 2 rows only: matching them
    # by value pinned ``Eq(s0 - 2, 0)`` (spelled in nested Mod/floor forms of ``1 % s0``,
    # which every size decides is 1), and the wrapped run's start compared ``2 < s0``.
    # Matched by expression, the shift simplified and the run allowed to be empty, one
    # lowering serves every length (decision 0480)
    compiled = tsr.compile(repeat_and_roll, dynamic=True, codegen="triton")
    sizes = (16, 17, 5, 33, 2, 9, 3)
    for rows in sizes:
        x = torch.randn(rows, 3, device=device)
        for got, want in zip(compiled(x), repeat_and_roll(x), strict=True):
            torch.testing.assert_close(got, want)
    _assert_lowered(tsr.size_lowering_stats(), len(sizes), 1, device)


def _assert_lowered(stats: dict[str, int], sizes: int, lowerings: int, device: str) -> None:
    """Each of ``sizes`` sizes ran a symbolic lowering, ``lowerings`` of them made (on a
    GPU, maybe one more: the multiples of 16, decision 0400), none per size."""
    assert set(stats) == {"symbolic", "reused"}, stats
    assert stats["symbolic"] + stats["reused"] == sizes, stats
    assert lowerings <= stats["symbolic"] <= lowerings + (device == "cuda"), stats
