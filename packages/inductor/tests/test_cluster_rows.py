"""Rows walked by thread-block clusters (``triton_cluster``): source shape and sm_90 PTX
here; on a GPU, every cluster configuration against torch, called repeatedly, and a
cluster kernel launched without clusters giving NaN rather than a wrong number."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import random_inputs
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton.cluster import can_cluster
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.tuning import LONG_ROW_MIN, Config, candidate_configs

pytest.importorskip("triton")

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _source(kernel, size: int, group: int = 8) -> str:
    return generate_triton(
        kernel, interpret=False, persistent=False, group=group, even_row=True, cluster=size
    )


def _clusters(kernel) -> list[Config]:
    configs = candidate_configs(kernel, interpret=False, clusters=True)
    return [config for config in configs if config.cluster > 1]


def test_softmax_chunks_meet_once_and_rescale_their_sums(ind):
    kernel = ind.only_kernel(ind.softmax_rows(4, 65536))
    source = _source(kernel, 8)
    assert source.count("barrier.cluster.arrive.release") == 1  # max and sum share a barrier
    assert "atomic" not in source and "while" not in source  # no tickets, no polling
    # its own chunk only, counted from 0 (a loop from `cstart` loses the tiles' alignment),
    # computed from the row length argument in whole tiles (decision 0285)
    chunk = "(rnumel // (8 * RBLOCK) * RBLOCK)"
    assert f"for rstep in range(0, {chunk}, RBLOCK):\n        roffset = cstart + rstep" in source
    assert f"roffset = cstart + ({chunk} - 1) // RBLOCK * RBLOCK - rstep" in source  # reversed
    # the same source for rows of another length and count
    assert _source(ind.only_kernel(ind.softmax_rows(3, 131072)), 8) == source
    # chunk sums rescaled to the row max
    assert "tl.math.exp2((all_amax - rsafe_amax) * 1.4426950408889634)" in source
    assert source.count("float('nan')") == 2  # both statistics poisoned off-cluster


def test_layer_norm_meets_once_per_phase_and_stores_row_stats_once(ind):
    kernel = ind.only_kernel(ind.layer_norm_rows(4, 65536))
    source = _source(kernel, 4, group=0)
    assert source.count("barrier.cluster.arrive.release") == 2  # the mean, then the variance
    assert "wmean" not in source  # no Welford pairs: partial second moments are not merged
    assert "xmask & (chunk == 0)" in source  # rstd written by the row's first chunk


def test_what_clusters_take(ind):
    softmax = ind.only_kernel(ind.softmax_rows(4, 65536))
    assert can_cluster(softmax, 8, 8192) and can_cluster(softmax, 16, 4096)
    assert not can_cluster(softmax, 3, 8192)  # not a launchable cluster size
    assert not can_cluster(softmax, 8, 16384)  # 8 chunks of whole tiles overrun the row
    ragged = ind.only_kernel(ind.softmax_rows(4, 40000))
    assert not can_cluster(ragged, 4, 8192)
    with pytest.raises(ValueError, match="clusters of 3"):
        _source(softmax, 3)


def test_clusters_are_offered_only_for_long_rows_on_cluster_gpus(ind):
    long = ind.only_kernel(ind.softmax_rows(4, LONG_ROW_MIN))
    assert _clusters(long)
    assert all(c.xblock == 1 and c.group == 8 and not c.persistent for c in _clusters(long))
    assert not [c for c in candidate_configs(long, interpret=False) if c.cluster > 1]
    assert not _clusters(ind.only_kernel(ind.softmax_rows(4, LONG_ROW_MIN // 2)))
    assert all(c.grid(4) == (4 * c.cluster,) for c in _clusters(long))


def test_cluster_variants_compile_for_sm90_with_a_cluster_barrier(ind, tmp_path):
    from torchstrata.inductor.codegen.triton.ptx import kernel_ptx

    for graph in (
        ind.softmax_rows(8, 65536),
        ind.layer_norm_rows(8, 65536),
        ind.logsumexp_rows(8, 65536),
    ):
        kernel = ind.only_kernel(graph)
        for config in _clusters(kernel)[:2]:
            ptx = kernel_ptx(kernel, config, cache_dir=str(tmp_path))
            assert "barrier.cluster.arrive.release.aligned" in ptx, config
            assert "barrier.cluster.wait.acquire.aligned" in ptx, config
            assert "%cluster_nctarank" in ptx, config
            assert "ld.global.cg" in ptx, config  # partials read past L1


def _force(monkeypatch, config: Config) -> None:
    monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [config])


@gpu
@pytest.mark.gpu
def test_cluster_softmax_on_a_gpu(ind, monkeypatch):
    graph = ind.softmax_rows(37, 65536)
    configs = _clusters(ind.only_kernel(graph))
    assert configs
    for config in configs:
        _force(monkeypatch, config)
        compiled = ind.compile(graph, "cuda")
        assert f"ticket // {config.cluster}" in compiled.kernels[0].source
        x = random_inputs(graph, seed=0)[0]
        x[1, 7] = float("inf")
        x[2, :] = float("-inf")
        x[3, 11] = float("nan")
        x[4, 40000:] = 30.0  # the row's max in its last chunks only
        expected = torch.softmax(x.double(), -1)
        for _ in range(3):
            actual = compiled(x)[0]
            torch.testing.assert_close(
                actual.double(), expected, equal_nan=True, atol=1e-2, rtol=1e-2
            )


@gpu
@pytest.mark.gpu
def test_cluster_two_phase_and_statistic_only_kernels_on_a_gpu(ind, monkeypatch):
    for graph in (ind.layer_norm_rows(19, 65536), ind.logsumexp_rows(23, 262144)):
        for config in _clusters(ind.only_kernel(graph)):
            _force(monkeypatch, config)
            for seed in (0, 1):
                ind.check(graph, "cuda", seeds=(seed,), atol=1e-4, rtol=1e-4)


@gpu
@pytest.mark.gpu
def test_a_cluster_kernel_launched_without_clusters_gives_nan(ind, tmp_path):
    kernel = ind.only_kernel(ind.softmax_rows(8, 65536))
    module, _ = triton_backend.load_module(_source(kernel, 8), kernel.name, str(tmp_path), False)
    x = torch.randn(8, 65536, device="cuda").bfloat16()
    y = torch.zeros_like(x)
    partials = torch.empty(8 * 2 * 8, device="cuda")
    getattr(module, kernel.name)[(64,)](
        x, y, partials, 8, 65536, XBLOCK=1, RBLOCK=8192, num_warps=4
    )
    assert y.float().isnan().all()
