"""Rows split across cooperating programs (``triton_split``): source shape, sm_90 PTX, and
on a GPU every split configuration against the reference, called repeatedly."""

from __future__ import annotations

import re

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim, random_inputs
from torchstrata.inductor import triton_backend
from torchstrata.inductor.kernel import Kernel
from torchstrata.inductor.lowering import lower_graph
from torchstrata.inductor.plan import plan_graph
from torchstrata.inductor.triton_printer import supports
from torchstrata.inductor.triton_split import can_split, generate_split_triton
from torchstrata.inductor.triton_tuning import Config, candidate_configs

pytest.importorskip("triton")

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _softmax(ind, rows: int, length: int, dtype: torch.dtype = torch.bfloat16):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), dtype))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    return b.build([b.call(prim("convert_element_type"), ind.softmax_last(b, xf), dtype)])


def _layer_norm(rows: int, n: int):
    """Mean, then the variance around it (two phases), the row's rstd stored too."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), float(n))
    centered = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (rows, n), (0,)))
    square = b.call(prim("mul"), centered, centered)
    var = b.call(prim("div"), b.call(prim("sum"), square, (1,)), float(n))
    rstd = b.call(prim("rsqrt"), b.call(prim("add"), var, 1e-5))
    out = b.call(prim("mul"), centered, b.call(prim("broadcast_in_dim"), rstd, (rows, n), (0,)))
    return b.build([out, rstd])


def _logsumexp(rows: int, n: int):
    """A row statistic only (cross-entropy's forward): no output along the row."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    peak = b.call(prim("amax"), x, (1,))
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), peak, (rows, n), (0,)))
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    return b.build([b.call(prim("add"), b.call(prim("log"), total), peak)])


def _kernel(graph) -> Kernel:
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    return kernel


def _splits(kernel: Kernel) -> list[Config]:
    configs = candidate_configs(kernel, interpret=False, split_rows=True)
    return [config for config in configs if config.split > 1]


def test_softmax_waits_once_per_row_and_layer_norm_once_per_phase(ind):
    softmax = _kernel(_softmax(ind, 4, 65536))
    (first, *_) = _splits(softmax)
    source = generate_split_triton(softmax, first.split, first.rblock)
    assert source.count("while seen <") == 1  # the max and its sum of exp share the wait
    assert "tl.exp(all_amax - rsafe_amax)" in source  # chunk sums rescaled to the row max
    # the output's exp(x - max) is the chunk's term rescaled: one exp per element
    assert source.count("tl.exp(") == 3 and "rescaled_amax / " in source
    # no fence per ticket or departure (only the arrival releases, the poll acquires)
    assert "sem='acq_rel'" not in source and source.count("sem='relaxed'") == 5
    norm = _kernel(_layer_norm(4, 40000))
    config = _splits(norm)[0]
    source = generate_split_triton(norm, config.split, config.rblock)
    assert source.count("while seen <") == 2
    # the row's statistic is stored by the row's first chunk only
    assert re.search(r"tl\.store\(buf_\w+ \+ \(x0 \+ xzero\), .*xmask & \(chunk == 0\)\)", source)


def test_split_rows_are_offered_for_long_rows_unless_turned_off(ind, monkeypatch):
    def offered(length: int) -> bool:
        kernel = _kernel(_softmax(ind, 4, length))
        return any(c.split > 1 for c in candidate_configs(kernel, interpret=False))

    monkeypatch.delenv("TORCHSTRATA_SPLIT_ROWS", raising=False)
    assert offered(65536) and not offered(32768)
    monkeypatch.setenv("TORCHSTRATA_SPLIT_ROWS", "1")
    assert offered(32768)
    kernel = _kernel(_softmax(ind, 4, 65536))
    assert not any(c.split > 1 for c in candidate_configs(kernel, interpret=True))
    monkeypatch.setenv("TORCHSTRATA_SPLIT_ROWS", "0")
    assert not offered(65536)


def test_only_long_float_rows_are_split(ind):
    assert not _splits(_kernel(_softmax(ind, 64, 8192)))
    assert _splits(_kernel(_softmax(ind, 64, 16384)))
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 65536), torch.int64))
    integer_sum = _kernel(b.build([b.call(prim("sum"), x, (1,))]))
    assert not can_split(integer_sum) and not _splits(integer_sum)
    with pytest.raises(ValueError, match="cannot be split"):
        generate_split_triton(integer_sum, 4, 16384)
    softmax = _kernel(_softmax(ind, 4, 65536))
    with pytest.raises(ValueError, match="do not cover"):
        generate_split_triton(softmax, 4, 8192)


def test_split_variants_compile_for_sm90_with_acquire_release(ind, tmp_path):
    from torchstrata.inductor.ptx import kernel_ptx

    for graph in (_softmax(ind, 8, 40000), _layer_norm(8, 40000), _logsumexp(8, 40000)):
        kernel = _kernel(graph)
        for config in _splits(kernel):
            ptx = kernel_ptx(kernel, config, cache_dir=str(tmp_path))
            # Triton 3.9 spells the arrival `red...release.add` and the poll an acquire load;
            # older releases may use `atom` (and acq_rel) for both.
            assert re.search(r"(red|atom)\.global\.gpu\.(release|acq_rel)\.add", ptx), config
            assert re.search(r"(ld|atom)\.global\.gpu\.(acquire|acq_rel)", ptx), config
            assert re.search(r"ld\.global\.cg", ptx), config  # partials read past L1


def _force(monkeypatch, config: Config) -> None:
    """Compile every kernel with ``config`` alone (the autotuner then has no choice)."""
    monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, _: [config])


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("length", [40000, 65536])
def test_split_softmax_on_a_gpu(ind, monkeypatch, length):
    from torchstrata.inductor import triton_launch

    direct = []
    launch = triton_launch.DirectLaunch._launch
    monkeypatch.setenv("TORCHSTRATA_DIRECT_LAUNCH", "1")
    monkeypatch.setattr(
        triton_launch.DirectLaunch,
        "_launch",
        lambda self, args: (direct.append(1), launch(self, args)),
    )
    graph = _softmax(ind, 37, length)
    for config in _splits(_kernel(graph)):
        _force(monkeypatch, config)
        compiled = ind.compile(graph, "cuda")
        assert f"ticket // {config.split}" in compiled.kernels[0].source
        x = random_inputs(graph, seed=0)[0]
        x[1, 7] = float("inf")
        x[2, :] = float("-inf")
        x[3, 11] = float("nan")
        expected = torch.softmax(x.double(), -1)
        for _ in range(3):  # the counters must return to zero after every launch
            actual = compiled(x)[0]
            torch.testing.assert_close(
                actual.double(), expected, equal_nan=True, atol=1e-2, rtol=1e-2
            )
    assert direct  # the later calls took the direct path, scratch buffers appended


@gpu
@pytest.mark.gpu
def test_split_two_phase_and_statistic_only_kernels_on_a_gpu(ind, monkeypatch):
    for graph in (_layer_norm(19, 40000), _logsumexp(23, 100003)):
        for config in _splits(_kernel(graph)):
            _force(monkeypatch, config)
            for seed in (0, 1, 2):
                ind.check(graph, "cuda", seeds=(seed,), atol=1e-4, rtol=1e-4)
