"""Kernels take their row count as an argument (decision 0201): a symbolic entry lowered
for many sizes builds each kernel once, and every size, odd ones included, matches eager.

Builds are counted as the kernel libraries (C++) and modules (Triton) in a fresh
artifact store: each distinct kernel source is one entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt

#: Sizes of the dynamic dimension; every softmax kernel below stays under the C++
#: backend's parallel threshold (32768 elements), whose pragma is in the source.
SIZES = (16, 17, 5, 33, 2, 9)


def softmax_gelu(x, w):
    return torch.softmax(F.gelu(x @ w), -1) * 2


def norm_attention_scores(x, w):
    # rows (2, T) of a [2, T, 32] activation: layer norm, a projection, a softmax and a
    # residual, as in a transformer block; T is the symbolic dim
    h = F.layer_norm(x, (x.shape[-1],))
    return torch.softmax(h @ w, -1) + x.sum(-1, keepdim=True)


def flat_pointwise(x):
    # a 1-D pointwise kernel: its one loop is over the rows
    return (x.reshape(-1) * 2).relu() + 1


def _entries(store: Path, suffix: str) -> list[str]:
    return sorted(path.name for path in store.rglob(f"*{suffix}"))


def _check_builds_once(fn, inputs, store: Path, suffix: str, codegen: str) -> None:
    compiled = rt.compile(fn, dynamic=True, codegen=codegen, options={"cache_dir": str(store)})
    built: list[str] = []
    for args in inputs:
        with torch.no_grad():
            torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
        if not built:
            built = _entries(store, suffix)
            assert built, "the first size built no kernel"
        else:
            assert _entries(store, suffix) == built, f"a kernel was built again at {args[0].shape}"
    assert len(compiled.cache) == 1  # one symbolic entry, lowered per size


def test_cpp_kernels_are_built_once_over_row_counts(tmp_path):
    w = torch.randn(64, 32)
    inputs = [(torch.randn(n, 64), w) for n in SIZES]
    _check_builds_once(softmax_gelu, inputs, tmp_path, ".so", "cpp")


def test_cpp_kernels_over_batch_and_sequence_rows_are_built_once(tmp_path):
    w = torch.randn(32, 32)
    inputs = [(torch.randn(2, n, 32), w) for n in SIZES]
    _check_builds_once(norm_attention_scores, inputs, tmp_path, ".so", "cpp")


def test_a_one_dimensional_cpp_kernel_is_built_once_over_row_counts(tmp_path):
    inputs = [(torch.randn(n, 64),) for n in SIZES]
    _check_builds_once(flat_pointwise, inputs, tmp_path, ".so", "cpp")


def test_triton_kernels_are_generated_once_over_row_counts(tmp_path):
    pytest.importorskip("triton")
    w = torch.randn(16, 8)
    # not powers of two: a launch whose block divides the rows drops its masks, a
    # decision that is in the source (16 rows would be a second module)
    inputs = [(torch.randn(n, 16), w) for n in (17, 5, 33)]
    _check_builds_once(softmax_gelu, inputs, tmp_path, ".py", "triton")
