"""Kernels whose reduced or inner dims are the symbolic ones take those sizes as arguments
(decisions 0250, 0285): a symbolic entry builds a column sum over ``B*T`` rows, a softmax
over a symbolic last dim, a row sum masked by ``arange(T) < lengths``, a horizontal Triton
kernel, a KV-cache append (cat bounds), a sum over the batch dim of ``[B, T, C]`` and an
unbiased variance over a symbolic last dim (``n - 1``, decision 0340) once
over sizes that change ``T``, and every size, odd ones included, equals eager.

Builds are counted as the kernel libraries (C++) and generated modules (Triton) of a fresh
artifact store. Sizes avoid what a size decides and keeps in the source: the C++ parallel
pragma (32768 elements or more), row-cache arrays (one per power of two of the row
length), Triton's masks where a block divides the rows or the row (powers of two).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import torchstrata.runtime as rt

#: Odd lengths of one power-of-two bucket (17-31): no source decides anything differently.
BUCKET = (17, 23, 19, 29, 31, 21)
#: Lengths checked against eager: tiny, odd, powers of two, past the parallel threshold.
MANY = (2, 3, 5, 7, 16, 17, 31, 64, 65, 127, 257, 700)


def column_sums(x, g):
    # a bias gradient and a norm weight's gradient: sums over the (B, T) rows
    return x.sum((0, 1)), (x * g).sum((0, 1))


def softmax_over_length(x, lengths):
    keep = torch.arange(x.shape[-1], device=x.device) < lengths[:, None]
    return torch.softmax(x * 2, -1), torch.where(keep, x, 0.0).sum(-1), torch.log_softmax(x, -1)


def cache_append(k_cache, v_cache, k, v):
    # a decode step's KV-cache append: the cat bounds are the cache length (decision 0285)
    return torch.cat([k_cache, k], 1), torch.cat([v_cache, v * 2], 1)


def sum_over_batch(x, g):
    # a column sum whose symbolic dim is a row dim: the reduced dim's stride is T*C (0285)
    return (x * g).sum(0)


def unbiased_variance(x, y):
    # ``n - 1`` of ``correction=1`` read from the row length (decision 0340)
    return torch.var(x, -1), torch.std(y * 2, -1)


def softmax_rows(x):
    # rows on both sides of the C++ parallel threshold (32768 / 64 = 512 rows; 0355)
    return torch.softmax(x * 2, -1), (x * x).sum(-1)


def small_pointwise(x, y):
    return x * 2 + 1, y.exp()


def _column_inputs(length: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(3, length, 25), torch.randn(3, length, 25)


def _softmax_inputs(length: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(7, length), torch.randint(0, length + 1, (7,))


def _rows_inputs(length: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(length, 64),)


def _variance_inputs(length: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(7, length), torch.randn(5, length)


def _pointwise_inputs(length: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(length, 9), torch.randn(3, length)


def _append_inputs(length: int) -> tuple[torch.Tensor, ...]:
    # a head width no cache length here reaches (a size equal to it has its own source)
    return torch.randn(2, length, 40), torch.randn(2, length, 40), *torch.randn(2, 2, 1, 40)


CASES = {
    "column_sums": (column_sums, _column_inputs),
    "softmax_over_length": (softmax_over_length, _softmax_inputs),
    "cache_append": (cache_append, _append_inputs),
    "sum_over_batch": (sum_over_batch, _column_inputs),
    "unbiased_variance": (unbiased_variance, _variance_inputs),
}


def _built(store: Path, codegen: str) -> list[str]:
    if codegen == "cpp":
        return sorted(path.name for path in store.rglob("*.so"))
    return sorted(p.name for p in store.rglob("*.py") if "triton" in p.parts)


def _check(fn, make, lengths, store: Path, codegen: str, once: bool, symbolic: bool = True) -> None:
    options = {"cache_dir": str(store), "symbolic_lowering": symbolic}
    compiled = rt.compile(fn, dynamic=True, codegen=codegen, options=options)
    built: list[str] = []
    for length in lengths:
        args = make(length)
        # an output adds up to ``terms`` values in another order than ATen (a column sum
        # over the rows, a row sum over the last dim): rounding grows like its square root
        terms = max(args[0].numel() // args[0].shape[-1], args[0].shape[-1])
        with torch.no_grad():
            got, want = compiled(*args), fn(*args)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * math.sqrt(terms))
        if not built:
            built = _built(store, codegen)
            assert built, "the first size built no kernel"
        elif once:
            assert _built(store, codegen) == built, f"a kernel was built again at {length}"
    assert len(compiled.cache) == 1  # one symbolic entry


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_kernels_over_a_symbolic_reduced_dim_are_built_once(tmp_path, case):
    fn, make = CASES[case]
    _check(fn, make, BUCKET, tmp_path, "cpp", once=True)


#: Sizes on both sides of what a C++ source decided before decisions 0355-0357: column sums
#: over ``3 * length`` rows of 25 (parallel and chunked from 437), softmax rows of 3 to 128
#: (the row cache's power-of-two buckets), rows of 64 (parallel from 512).
STRADDLING = {
    "column_sums": (5, 17, 33, 64, 100, 200, 300, 436, 437, 500, 700, 1000, 1500, 2000, 3001, 40),
    "softmax_over_length": (3, 5, 9, 17, 33, 40, 63, 65, 77, 100, 111, 120, 127, 128, 126, 7),
    "softmax_rows": (3, 17, 40, 100, 255, 256, 300, 511, 512, 513, 700, 1000, 1500, 2047, 3001, 9),
}


@pytest.mark.parametrize("case", sorted(STRADDLING))
def test_cpp_kernels_straddling_size_decisions_are_built_once(tmp_path, case):
    fn, make = (softmax_rows, _rows_inputs) if case == "softmax_rows" else CASES[case]
    # the per-size path's sources (a symbolic lowering's kernels take the symbols, and
    # more sides of its decisions lower per size: two sources)
    _check(fn, make, STRADDLING[case], tmp_path, "cpp", once=True, symbolic=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_kernels_over_a_symbolic_reduced_dim_match_eager(tmp_path, case):
    fn, make = CASES[case]
    _check(fn, make, MANY, tmp_path, "cpp", once=False)


@pytest.mark.triton
@pytest.mark.parametrize("case", [*sorted(CASES), "small_pointwise"])
def test_triton_modules_over_a_symbolic_reduced_dim_are_generated_once(tmp_path, case):
    pytest.importorskip("triton")
    fn, make = (small_pointwise, _pointwise_inputs) if case == "small_pointwise" else CASES[case]
    # under the interpreter a block is the next power of two of the row: any odd lengths;
    # the per-size path's sources (a symbolic lowering's take the symbols, one lowering
    # per bucket of the row length and past ``symbolic_lowerings`` lower per size: 0400)
    _check(fn, make, (17, 5, 33, 9, 23, 3), tmp_path, "triton", once=True, symbolic=False)


@pytest.mark.triton
@pytest.mark.parametrize("case", sorted(CASES))
def test_triton_kernels_over_a_symbolic_reduced_dim_match_eager(tmp_path, case):
    pytest.importorskip("triton")
    fn, make = CASES[case]
    _check(fn, make, MANY, tmp_path, "triton", once=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", [*sorted(CASES), "small_pointwise"])
def test_cuda_modules_over_a_symbolic_reduced_dim_are_generated_once(tmp_path, case):
    fn, make = (small_pointwise, _pointwise_inputs) if case == "small_pointwise" else CASES[case]

    def on_gpu(length: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.cuda() for t in make(length))

    # odd lengths whose rows and row lengths no block divides, no divisor hint (odd)
    _check(fn, on_gpu, (17, 23, 19, 29, 31, 21, 33, 45), tmp_path, "triton", once=True)
    _check(fn, on_gpu, MANY, tmp_path / "many", "triton", once=False)
