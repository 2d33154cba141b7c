"""Programs that ``torch.compile(fn, backend="torchstrata")`` hands over with symbolic
sizes and that the Dynamo path lowered once per size where the runtime's own capture
lowered them once (issue 33, decisions 0490-0492): ``F.pad`` (Dynamo's graph calls the
builtin behind it) and a slice write whose bounds are sizes (``cache[:, t : 2 * t] = k``:
the symbolic trace specialised them); and a graph whose every symbol Dynamo specialised,
lowered once as a static graph (it was counted a size lowered on its own). Every call is
compared with eager."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.core import SymbolicSizes, parse, verify
from torchstrata.runtime.dynamo_record import recording

pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback", "size_counts_no_fallback")


def _run_all(fn, calls, **compile_kwargs):
    """Each call's arguments through ``torch.compile(fn, backend="torchstrata")``,
    compared with eager on copies (a program may write its inputs)."""
    compiled = torch.compile(fn, backend="torchstrata", **compile_kwargs)
    for args in calls:
        want = fn(*(a.clone() for a in args))
        with recording() as ran:
            got = compiled(*args)
        torch.testing.assert_close(got, want, msg=lambda m, a=args: f"{a[-1].shape}: {m}")
        assert ran and all(graph.is_compiled for graph in ran)
    return compiled


def pad_time(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 2, 0), value=-1.0) * 2


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_pad_through_dynamo_is_lowered_once(codegen):
    # Dynamo traces F.pad to torch._C._nn.pad; the import names it F.pad (was: per size)
    sizes = (4, 5, 7, 12, 3, 33, 9)
    _run_all(pad_time, [(torch.randn(2, 3, n),) for n in sizes], options={"codegen": codegen})
    stats = tsr.size_lowering_stats()
    # 4 is Dynamo's static graph; the six others share one lowering
    assert stats == {"symbolic": 1, "reused": 5}, stats


def kv_cache_slice_write(cache, k):
    t = k.shape[1]
    cache[:, t : 2 * t] = k
    return cache.sum(1), cache[:, : 2 * t].mean(1)


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_a_slice_write_bounded_by_sizes_through_dynamo_is_lowered_once(codegen):
    # the slice's bounds (s25, 2*s25) are rebound into the trace's ShapeEnv and the write
    # inferred on its fake tensors: no longer specialised to the first size (was: per size)
    sizes = (4, 5, 7, 12, 3, 33, 9, 20)
    calls = [(torch.randn(2, 80, 4), torch.randn(2, n, 4)) for n in sizes]
    _run_all(kv_cache_slice_write, calls, options={"codegen": codegen})
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0 and not any("fallback" in key for key in stats), stats
    assert sum(stats.values()) == len(sizes) - 1 and stats.get("reused", 0) >= 2, stats
    if codegen == "cpp":  # (Triton's kernels take a lowering per bucket of sizes)
        assert stats["symbolic"] <= 2, stats


def test_a_slice_write_graph_through_dynamo_prints_and_parses_back(tmp_path):
    # decision 0493: the setitem's index (slice(None), slice(s, 2*s)) has a text form, so
    # explain, the debug directory and the logs print the graph (was: TypeError)
    tsr.set_logs(debug_dir=tmp_path)
    try:
        calls = [(torch.randn(2, 80, 4), torch.randn(2, n, 4)) for n in (4, 5)]
        compiled = _run_all(kv_cache_slice_write, calls, options={"codegen": "cpp"})
    finally:
        tsr.set_logs()
    report = tsr.explain_dynamo(compiled, torch.randn(2, 80, 4), torch.randn(2, 7, 4))
    assert "operator.setitem" in str(report)
    (graph,) = report.graphs
    text = str(graph)
    (symbol,) = re.findall(r"symbol (\w+) = ", text)
    assert f"(slice(None, None, None), slice({symbol}, 2*{symbol}, None)), %l_k_)" in text
    parsed = parse(text, SymbolicSizes({}))
    assert str(parsed) == text
    verify(parsed)
    # the first call's (static) graph in the debug directory: its bounds are ints
    (dumped,) = tmp_path.glob("*/000-dynamo.txt")
    assert "slice(None, None, None), slice(4, 8, None)" in dumped.read_text()


def slice_last(x):
    return x[1:] - x[:-1]


def test_a_graph_whose_symbols_dynamo_specialised_is_a_static_graph():
    # at 2 rows x[1:] is 1 long: Dynamo guards the size (Eq(s, 2)) and hands a graph
    # whose SymInt values hold no symbol; it lowers once, as a static graph
    sizes = (4, 5, 7, 2, 9, 12)
    _run_all(slice_last, [(torch.randn(n, 8),) for n in sizes], options={"codegen": "cpp"})
    stats = tsr.size_lowering_stats()
    # 4 is Dynamo's first (static) graph, 2 its specialised one (was: per_size 1); the
    # four others share the symbolic graph's lowerings
    assert set(stats) == {"symbolic", "reused"} and stats["symbolic"] <= 2, stats
    assert stats["symbolic"] + stats["reused"] == 4, stats
