"""``torch.compile(fn, backend="torchstrata")`` with Dynamo's dynamic shapes lowered once
for many sizes (issue 33, decision 0455): the graph Dynamo hands over with symbolic
sizes is lowered by the runtime's symbolic lowering (decision 0381) for every size that
meets its conditions, not once per size; where that lowering refuses, sizes lower on
their own as before and ``explain()`` and ``size_lowering_stats()`` say why. Every call
is compared with eager. Dynamo is the harness here (tests may call ``torch.compile``)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.runtime import dynamo_backend, dynamo_shared
from torchstrata.runtime.dynamo_record import recording

from .test_dynamic_symbolic_aot import _count_stage_calls

pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback", "size_counts_no_fallback")

#: Row counts: odd and even, 1 (Dynamo specialises it: a static graph of its own), large.
SIZES = (4, 5, 7, 1, 12, 3, 33, 9, 2, 64)


def reshape_by_size(x, w):
    rows, cols = x.size()
    return F.gelu(x).reshape(rows * cols).view(rows, cols) @ w + rows


def _run(fn, sizes, **compile_kwargs):
    """Every size through ``torch.compile(fn, backend="torchstrata")`` against eager;
    the distinct backend graphs that ran, in order of first use."""
    compiled = torch.compile(fn, backend="torchstrata", **compile_kwargs)
    w = torch.randn(8, 4)
    graphs: list = []
    for size in sizes:
        x = torch.randn(size, 8)
        with recording() as ran:
            torch.testing.assert_close(compiled(x, w), fn(x, w), msg=lambda m, s=size: f"{s}: {m}")
        assert len(ran) == 1 and ran[0].is_compiled, f"size {size} did not run compiled code"
        graphs.extend(graph for graph in ran if all(graph is not g for g in graphs))
    return compiled, graphs


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_one_lowering_serves_every_size(monkeypatch, codegen):
    calls = _count_stage_calls(monkeypatch, dynamo_backend._PIPELINE)
    compiled, graphs = _run(reshape_by_size, SIZES, options={"codegen": codegen})
    # Dynamo: a static graph for 4, one for 1 (specialised), one with symbolic sizes
    assert len(graphs) == 3
    symbolic = [size for size in SIZES if size not in (4, 1)]
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0, stats
    assert 1 <= stats["symbolic"] <= 2, stats
    assert stats["symbolic"] + stats.get("reused", 0) == len(symbolic), stats
    # two static graphs and the shared lowerings: nothing generated per size
    assert calls.count(("codegen", False)) == 2 + stats["symbolic"], calls
    report = tsr.explain(compiled, torch.randn(10, 8), torch.randn(8, 4))
    assert report.kernels and report.size_lowerings
    assert "served by" in report.size_lowerings[0] and "on their own" not in str(report)


def first_half(x, w):
    return torch.softmax(x.narrow(0, 0, x.shape[0] // 2) @ w, -1) + 1.0


def test_a_graph_whose_import_relies_on_size_conditions_lowers_once_too():
    # narrow's bounds and length (``s77//2 != 1``) are conditions of the imported graph:
    # kept and checked for each size, no longer a reason to lower every size on its own
    _, graphs = _run(first_half, (4, 5, 7, 12, 9, 33, 6, 64, 11))
    assert len(graphs) == 2
    stats = tsr.size_lowering_stats()
    assert set(stats) == {"symbolic", "reused"} and stats["symbolic"] <= 2, stats
    assert "served by" in graphs[1].size_lowering()


def test_dynamic_true_lowers_once_from_the_first_call():
    _, graphs = _run(reshape_by_size, (5, 6, 9, 17, 3, 33, 7, 10), dynamic=True)
    assert len(graphs) == 1
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 7}
    assert len(graphs[0]._run.per_size.runners) == 8  # each size's dispatch entry


def test_training_through_dynamo_lowers_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="torchstrata", options={"codegen": "cpp"})
    for rows in (4, 5, 9, 3, 17, 1, 6, 2, 12):
        x = torch.randn(rows, 8)
        xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        outs = [compiled(xs[0]), reference(xs[1])]
        for out in outs:
            out.square().mean().backward()
        torch.testing.assert_close(outs[0], outs[1])
        torch.testing.assert_close(xs[0].grad, xs[1].grad)
        for a, b in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)
            a.grad = b.grad = None
    # 4 and 1 have static graphs; the seven others share one forward and backward
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 6}


def test_a_refused_lowering_lowers_per_size_and_says_why(monkeypatch):
    def refusing(*args, **kwargs):
        def lower(values):
            raise NotImplementedError("refused for the test")

        return lower

    monkeypatch.setattr(dynamo_shared, "symbolic_lowerer", refusing)
    compiled, graphs = _run(reshape_by_size, (4, 5, 7, 12, 3))
    stats = tsr.size_lowering_stats()
    # the first refusal is the graph's: its later sizes lower on their own without asking
    assert stats == {"fallback: NotImplementedError: refused for the test": 1, "per_size": 4}
    assert len(graphs[1]._run.per_size.runners) == 4
    report = tsr.explain(compiled, torch.randn(10, 8), torch.randn(8, 4))
    (text,) = report.size_lowerings
    assert "0 size(s) served" in text and "5 lowered on their own" in text
    assert "refused for the test" in text and "refused for the test" in str(report)


def test_a_first_call_that_fails_lowers_that_size_on_its_own(monkeypatch):
    original = dynamo_shared.symbolic_lowerer

    def failing_at_seven(*args, **kwargs):
        lower = original(*args, **kwargs)

        def wrapped(values):
            made = lower(values)

            def run(*inputs):
                if inputs[0].shape[0] == 7:
                    raise RuntimeError("a launch failed at 7 rows")
                return made.runner(*inputs)

            return type(made)(run, made.serves, made.conditions)

        return wrapped

    monkeypatch.setattr(dynamo_shared, "symbolic_lowerer", failing_at_seven)
    with pytest.warns(tsr.TorchstrataFallbackWarning, match="7 rows"):
        _run(reshape_by_size, (4, 5, 7, 12, 7, 3))
    stats = tsr.size_lowering_stats()
    assert stats["per_size"] == 1 and stats["symbolic"] == 1, stats
    assert stats["fallback: first call: RuntimeError: a launch failed at 7 rows"] == 1, stats


def test_the_option_off_lowers_every_size_on_its_own():
    options = {"symbolic_lowering": False}
    compiled, _ = _run(reshape_by_size, (4, 5, 7, 12, 3), options=options)
    assert tsr.size_lowering_stats() == {"per_size": 4}
    report = tsr.explain(compiled, torch.randn(10, 8), torch.randn(8, 4))
    assert report.size_lowerings == ("graph 0: 5 size(s) lowered on their own: option off",)
