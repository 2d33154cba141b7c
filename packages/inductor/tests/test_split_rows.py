"""Rows split across cooperating programs (``triton_split``): source shape, sm_90 PTX, and
on a GPU every split configuration against the reference, called repeatedly."""

from __future__ import annotations

import re

import pytest
import torch

from torchstrata.core import GraphBuilder, InductorOptions, Level, TensorMeta, prim, random_inputs
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.split import can_split, generate_split_triton
from torchstrata.inductor.codegen.triton.tuning import Config, candidate_configs
from torchstrata.inductor.ir.kernel import Kernel

pytest.importorskip("triton")

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _splits(kernel: Kernel) -> list[Config]:
    configs = candidate_configs(kernel, interpret=False, split_rows=True)
    return [config for config in configs if config.split > 1]


def test_softmax_waits_once_per_row_and_layer_norm_once_per_phase(ind):
    softmax = ind.only_kernel(ind.softmax_rows(4, 65536))
    (first, *_) = _splits(softmax)
    source = generate_split_triton(softmax, first.split, first.rblock)
    assert source.count("while seen <") == 1  # the max and its sum of exp share the wait
    # chunk sums rescaled to the row max
    assert "tl.math.exp2((all_amax - rsafe_amax) * 1.4426950408889634)" in source
    # the output's exp(x - max) is the chunk's term rescaled: one exp per element
    assert source.count("tl.exp(") == 2 and "rescaled_amax / " in source
    # no fence per ticket or departure (only the arrival releases, the poll acquires)
    assert "sem='acq_rel'" not in source and source.count("sem='relaxed'") == 5
    norm = ind.only_kernel(ind.layer_norm_rows(4, 40000))
    config = _splits(norm)[0]
    source = generate_split_triton(norm, config.split, config.rblock)
    assert source.count("while seen <") == 2
    # the row's statistic is stored by the row's first chunk only
    assert re.search(r"tl\.store\(buf_\w+ \+ \(x0 \+ xzero\), .*xmask & \(chunk == 0\)\)", source)


def test_a_split_kernel_is_one_source_over_rows_and_row_lengths(ind):
    """Its rows and row length are ``xnumel``/``rnumel`` (decision 0285): the ticket that
    resets the counters and the row's mask read them; lengths of one split configuration
    (8 chunks of 8192) and row counts share a source."""
    sources = set()
    for rows, length in ((4, 65436), (5, 65236), (3, 57345)):
        kernel = ind.only_kernel(ind.softmax_rows(rows, length))
        config = next(c for c in _splits(kernel) if (c.split, c.rblock) == (8, 8192))
        sources.add(generate_split_triton(kernel, config.split, config.rblock))
    assert len(sources) == 1
    source = sources.pop()
    assert "if ticket == xnumel * 8 - 1:" in source and "rmask = rindex < rnumel" in source


def test_split_rows_are_offered_for_long_rows_unless_turned_off(ind, monkeypatch):
    def offered(length: int, split_rows: bool | None = None) -> bool:
        kernel = ind.only_kernel(ind.softmax_rows(4, length))
        backend = TritonBackend(interpret=False, options=InductorOptions(split_rows=split_rows))
        _, configs, _ = backend.generate(kernel, clusters=False)
        return any(c.split > 1 for c in configs)

    assert offered(65536) and not offered(32768)
    assert offered(32768, split_rows=True)
    kernel = ind.only_kernel(ind.softmax_rows(4, 65536))
    assert not any(c.split > 1 for c in candidate_configs(kernel, interpret=True))
    assert not offered(65536, split_rows=False)


def test_only_long_float_rows_are_split(ind):
    assert not _splits(ind.only_kernel(ind.softmax_rows(64, 8192)))
    assert _splits(ind.only_kernel(ind.softmax_rows(64, 16384)))
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 65536), torch.int64))
    integer_sum = ind.only_kernel(b.build([b.call(prim("sum"), x, (1,))]))
    assert not can_split(integer_sum) and not _splits(integer_sum)
    with pytest.raises(ValueError, match="cannot be split"):
        generate_split_triton(integer_sum, 4, 16384)
    softmax = ind.only_kernel(ind.softmax_rows(4, 65536))
    with pytest.raises(ValueError, match="do not cover"):
        generate_split_triton(softmax, 4, 8192)


def test_split_variants_compile_for_sm90_with_acquire_release(ind, tmp_path):
    from torchstrata.inductor.codegen.triton.ptx import kernel_ptx

    for graph in (
        ind.softmax_rows(8, 40000),
        ind.layer_norm_rows(8, 40000),
        ind.logsumexp_rows(8, 40000),
    ):
        kernel = ind.only_kernel(graph)
        for config in _splits(kernel):
            ptx = kernel_ptx(kernel, config, cache_dir=str(tmp_path))
            # Triton 3.9 spells the arrival `red...release.add` and the poll an acquire load;
            # older releases may use `atom` (and acq_rel) for both.
            assert re.search(r"(red|atom)\.global\.gpu\.(release|acq_rel)\.add", ptx), config
            assert re.search(r"(ld|atom)\.global\.gpu\.(acquire|acq_rel)", ptx), config
            assert re.search(r"ld\.global\.cg", ptx), config  # partials read past L1


def _force(monkeypatch, config: Config) -> None:
    """Compile every kernel with ``config`` alone (the autotuner then has no choice)."""
    monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [config])


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("length", [40000, 65536])
def test_split_softmax_on_a_gpu(ind, monkeypatch, length):
    from torchstrata.inductor.launch import triton_launch

    direct = []
    launcher_of = triton_launch._launcher_of

    def counted(kernel):
        launch, head = launcher_of(kernel)
        return (lambda *values: (direct.append(1), launch(*values))), head

    monkeypatch.setattr(triton_launch, "_launcher_of", counted)
    graph = ind.softmax_rows(37, length)
    for config in _splits(ind.only_kernel(graph)):
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
    for graph in (ind.layer_norm_rows(19, 40000), ind.logsumexp_rows(23, 100003)):
        for config in _splits(ind.only_kernel(graph)):
            _force(monkeypatch, config)
            for seed in (0, 1, 2):
                ind.check(graph, "cuda", seeds=(seed,), atol=1e-4, rtol=1e-4)
