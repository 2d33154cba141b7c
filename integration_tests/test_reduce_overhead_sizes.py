"""``mode="reduce-overhead"`` with symbolic sizes (issue 33, decision 0456): the graph is
lowered once for many sizes, as in the default mode, and each distinct size records a
CUDA graph of its own over that lowering (``cuda_graphs.SizeGraphs``), saying so in a
log line. On the CPU the mode records nothing and changes nothing else. The recording
needs a GPU (tests marked ``gpu``); the bookkeeping around it runs on the CPU with a
recorder that stands in for ``CudaGraphed``. Every call is compared with eager."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.runtime import cuda_graphs, symbolic_lowering
from torchstrata.runtime.cuda_graphs import CudaGraphed, SizeGraphs

pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")

#: Row counts: odd and even, small and large (never 0 or 1).
ROWS = (5, 8, 17, 3, 64, 9)


def scaled_gelu(x, bias):
    return F.gelu(x * 2.0 + bias) - 1.0


class _Recorder:
    """Stands in for ``CudaGraphed``: counts each size's calls, runs the function."""

    def __init__(self, fn, name):
        self.fn, self.name, self.calls = fn, name, 0

    def __call__(self, *inputs):
        self.calls += 1
        return self.fn(*inputs)


def _every_size(compiled, rows, device="cpu", calls=1):
    """``calls`` calls at each of ``rows``, each with a new ``x`` (all kept alive: no two
    at one address, which a CUDA graph would take for a stable input)."""
    bias = torch.randn(64, device=device)
    results = []
    for n in rows:
        for _ in range(calls):
            x = torch.randn(n, 64, device=device)
            results.append((compiled(x, bias), x))
            torch.testing.assert_close(results[-1][0], scaled_gelu(x, bias))
    for got, x in results:  # no later call (a replay) overwrote an earlier result
        torch.testing.assert_close(got, scaled_gelu(x, bias))


@pytest.mark.parametrize("through", ["compile", "dynamo"])
def test_on_the_cpu_the_mode_lowers_once_and_records_nothing(caplog, through):
    if through == "dynamo":  # (torch.compile takes mode= or options=, not both)
        torch.compiler.reset()
        compiled = torch.compile(
            scaled_gelu, backend="torchstrata", mode="reduce-overhead", dynamic=True
        )
    else:
        compiled = tsr.compile(scaled_gelu, dynamic=True, mode="reduce-overhead", codegen="cpp")
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        _every_size(compiled, ROWS, calls=2)
    stats = tsr.size_lowering_stats()
    # no size lowered on its own: 1 lowering, or 2 where the C++ rows loop decides on
    # fewer than 8 rows (a condition of the lowering)
    assert set(stats) == {"symbolic", "reused"} and stats["symbolic"] <= 2, stats
    assert stats["symbolic"] + stats["reused"] == len(ROWS), stats
    assert "CUDA graph" not in caplog.text


def test_each_size_records_over_the_one_lowering(monkeypatch):
    # the CPU lowering wrapped as a CUDA forward is: one recorder per distinct size
    made: list[SizeGraphs] = []

    def graphed(fn, prims_graph, device, mode):
        assert mode == "reduce-overhead" and device.type == "cpu"
        made.append(SizeGraphs(fn, record=_Recorder))
        return made[-1]

    monkeypatch.setattr(symbolic_lowering, "graphed_per_size", graphed)
    compiled = tsr.compile(scaled_gelu, dynamic=True, mode="reduce-overhead", codegen="cpp")
    _every_size(compiled, (*ROWS, 5, 17, 5), calls=2)
    stats = tsr.size_lowering_stats()
    assert set(stats) == {"symbolic", "reused"} and stats["symbolic"] == len(made) <= 2, stats
    # each lowering records the sizes it served, each distinct size once
    calls = {key[0][0]: rec.calls for graphs in made for key, rec in graphs.graphs.items()}
    assert calls == {5: 6, 8: 2, 17: 4, 3: 2, 64: 2, 9: 2}


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

#: Row counts on the GPU: odd, none a multiple of 16 (Triton's specialisation of an
#: argument is a condition of the lowering), all in one power-of-two bucket (a new bucket
#: lowers again, decision 0400): one Triton lowering serves them all.
GPU_ROWS = (17, 19, 29, 21, 31, 25)


def _counting_recordings(monkeypatch) -> list[tuple[int, ...]]:
    recorded: list[tuple[int, ...]] = []
    original = CudaGraphed._record

    def counting(self, inputs, addresses):
        recorded.append(tuple(inputs[0].shape))
        return original(self, inputs, addresses)

    monkeypatch.setattr(CudaGraphed, "_record", counting)
    return recorded


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("through", ["compile", "dynamo"])
def test_one_lowering_one_cuda_graph_per_size(monkeypatch, caplog, through):
    recorded = _counting_recordings(monkeypatch)
    if through == "dynamo":
        torch.compiler.reset()
        compiled = torch.compile(
            scaled_gelu, backend="torchstrata", mode="reduce-overhead", dynamic=True
        )
    else:
        compiled = tsr.compile(scaled_gelu, dynamic=True, mode="reduce-overhead")
    warmed = cuda_graphs.WARMUP_CALLS + 2  # the warm-up calls, the recording, a replay
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        _every_size(compiled, GPU_ROWS, device="cuda", calls=warmed)
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": len(GPU_ROWS) - 1}
    assert sorted(shape[0] for shape in recorded) == sorted(GPU_ROWS)  # one graph per size
    assert caplog.text.count("record a CUDA graph of their own") == len(GPU_ROWS)


@pytest.mark.gpu
@cuda
def test_each_sizes_input_buffers_serve_it_when_sizes_alternate(monkeypatch):
    made: list[SizeGraphs] = []
    original = symbolic_lowering.graphed_per_size

    def keeping(*args):
        graphed = original(*args)
        made.append(graphed)
        return graphed

    monkeypatch.setattr(symbolic_lowering, "graphed_per_size", keeping)
    compiled = tsr.compile(scaled_gelu, dynamic=True, mode="reduce-overhead")
    calls = 2 * (cuda_graphs.WARMUP_CALLS + 2)  # each size recorded, then replayed
    with torch.no_grad():  # 17, 29, 31, 17, 29...: the sizes alternate at every call
        _every_size(compiled, GPU_ROWS[::2] * calls, device="cuda")
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 2}
    sizes = {
        key: g for each in made if isinstance(each, SizeGraphs) for key, g in each.graphs.items()
    }
    assert len(sizes) == 3
    for key, graphed in sizes.items():
        assert graphed.graph is not None and graphed.recordings == 1  # recorded once, replayed
        (buffer_index, buffer), *_ = graphed.copied  # x is copied into its size's buffer
        assert buffer_index == 0 and tuple(buffer.shape) == tuple(key[0])
