"""The prims graphs of lowerings made for many sizes in the text form (issue 33, decision
0494): ``explain_dynamo(...).prims_graphs``, the debug directory and the logs print them
(their sizes are ``core.SizeValue``: was ``TypeError: cannot print argument s53 of type
SizeValue``), the listings parse back to the same text, and printing them during the
lowering changes nothing it decides. Every call is compared with eager."""

from __future__ import annotations

import logging
import re

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.core import SizeValue, SymbolicSizes, parse, verify

pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback", "size_counts_no_fallback")


def pad_time(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 2, 0), value=-1.0) * 2


def half_window(x):
    # a floor division of a size (its own ``str`` would be a refused read) in a slice
    # bound, a view's sizes and non-contiguous strides
    h = x.shape[1] // 2
    return x[:, :h] * 2 + x[:, h : 2 * h].reshape(-1, h), torch.arange(h + 3) * x.sum()


def kv_cache_slice_write(cache, k):
    # its symbolic decomposition holds a SymFloat (the mean's count ``ToFloat(2*s25)``)
    t = k.shape[1]
    cache[:, t : 2 * t] = k
    return cache.sum(1), cache[:, : 2 * t].mean(1)


def _run(fn, calls):
    compiled = torch.compile(fn, backend="torchstrata", options={"codegen": "cpp"})
    for args in calls:
        args = args if isinstance(args, tuple) else (args,)
        want = fn(*(a.clone() for a in args))
        torch.testing.assert_close(compiled(*args), want)
    return compiled


def _sized_nodes(graph):
    return [
        node
        for node in graph.nodes
        if any(isinstance(value, SizeValue) for value in _flat(node.args))
    ]


def _flat(values):
    for value in values:
        if isinstance(value, list | tuple):
            yield from _flat(value)
        else:
            yield value


def _round_trips(text: str) -> None:
    parsed = parse(text, SymbolicSizes({}))
    assert str(parsed) == text
    verify(parsed)


@pytest.mark.parametrize(
    ("fn", "shape"), [(pad_time, lambda n: (2, 3, n)), (half_window, lambda n: (3, n))]
)
def test_explain_dynamo_prints_the_prims_graph_of_a_lowering_for_many_sizes(fn, shape):
    compiled = _run(fn, [torch.randn(*shape(n)) for n in (4, 6, 8)])
    report = tsr.explain_dynamo(compiled, torch.randn(*shape(10)))
    (graph,) = report.prims_graphs
    assert _sized_nodes(graph), "the lowering's graph holds no SizeValue argument"
    text = str(graph)
    (symbol,) = re.findall(r"symbol (\w+), hint (?:6|8|10)\n", text)
    assert symbol in text.split("= input")[0]
    _round_trips(text)
    assert "1 lowering(s) shared by many sizes" in str(report)


class _Graphs(logging.Handler):
    """The ``graphs`` log's listings of lowerings for many sizes."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "prims-for-many-sizes" in str(record.args):
            self.texts.append(record.getMessage())


def test_the_debug_directory_and_the_log_hold_the_lowering_for_many_sizes(tmp_path):
    tsr.set_logs("graphs", debug_dir=tmp_path)
    logged = _Graphs()
    logger = logging.getLogger("torchstrata.runtime.compile_trace.__graphs")
    logger.addHandler(logged)
    try:
        _run(half_window, [torch.randn(3, n) for n in (4, 6, 8, 10)])
    finally:
        logger.removeHandler(logged)
        tsr.set_logs()
    (message,) = logged.texts
    assert re.search(r"symbol s\d+, hint 6\n", message), message
    (listing,) = tmp_path.glob("*-a_lowering_for_many_sizes/*-prims-for-many-sizes.txt")
    text = listing.read_text().rstrip("\n")
    assert re.search(r"\[3, \(s\d+//2\)\]", text), text
    _round_trips(text)
    kernels = listing.parent / "kernels"
    assert any(kernels.glob("*.cpp")) and any(listing.parent.glob("*-codegen-launcher.py"))


class _Lowerings(logging.Handler):
    """The ``dynamic`` log's lines on each lowering: its sizes and the conditions it
    relied on (``sizes {'s27': 6}: lowered for every size where ...``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "lowered for every size" in record.getMessage():
            self.lines.append(record.getMessage())


def _decisions(fn, calls, logs, **where):
    """The counts of lowerings, how the sizes were lowered and each lowering's
    conditions."""
    torch.compiler.reset()
    tsr.reset_size_lowering_stats()
    tsr.set_logs(logs, **where)
    lowerings = _Lowerings()
    logger = logging.getLogger("torchstrata.runtime.size_variants.__dynamic")
    logger.addHandler(lowerings)
    try:
        compiled = _run(fn, calls)
    finally:
        logger.removeHandler(lowerings)
        tsr.set_logs()
    report = tsr.explain_dynamo(compiled, *calls[-1])
    return tsr.size_lowering_stats(), report.size_lowerings, lowerings.lines


CALLS = {
    pad_time: lambda n: (torch.randn(2, 3, n),),
    half_window: lambda n: (torch.randn(3, n),),
    kv_cache_slice_write: lambda n: (torch.randn(2, 80, 4), torch.randn(2, n, 4)),
}


@pytest.mark.parametrize("fn", list(CALLS))
def test_printing_a_lowering_changes_nothing_it_decides(fn, tmp_path):
    # the debug directory prints the symbolic decomposition (SymInt sizes: a stride
    # compared as a size would add a guard to its conditions) and the lowering's graph
    calls = [CALLS[fn](n) for n in (4, 6, 8, 11, 2, 16)]
    plain = _decisions(fn, calls, "dynamic")
    printed = _decisions(fn, calls, "dynamic,graphs", debug_dir=tmp_path)
    assert list(tmp_path.glob("*-a_lowering_for_many_sizes/*-prims-for-many-sizes.txt"))
    assert plain == printed
    assert plain[0].get("symbolic", 0) >= 1 and plain[2], plain
