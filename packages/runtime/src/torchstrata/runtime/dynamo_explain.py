"""``explain()`` of a ``torch.compile(..., backend="torchstrata")`` object.

Dynamo decides which graphs a call runs only when the call runs (it traces lazily and
keeps its compiled graphs in its own caches), so the report comes from running the call
once while the backend's graphs record themselves
(:func:`torchstrata.runtime.dynamo_record.recording`): the graphs Dynamo handed to
torchstrata for this call (compiled now or earlier), the guards Dynamo had collected
for them, their kernels (the backward's too) and the ops left to eager.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch.fx

from torchstrata.runtime.dynamo_record import BackendGraph, recording
from torchstrata.runtime.explain import ExplainReport, report_from_graphs


def is_dynamo_compiled(fn: Any) -> bool:
    """Whether ``fn`` is what ``torch.compile`` returned (a wrapped function, or an
    ``OptimizedModule``), told by the attributes Dynamo sets on it."""
    if getattr(fn, "_torchdynamo_orig_callable", None) is not None:
        return True
    return isinstance(fn, torch.nn.Module) and "dynamo_ctx" in vars(fn)


def _fx_ops(gm: torch.fx.GraphModule) -> list[str]:
    ops = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            target = node.target
            module = getattr(target, "__module__", None)
            name = getattr(target, "__name__", str(target))
            ops.append(f"{module}.{name}" if module else name)
        elif node.op == "call_method":
            ops.append(f"torch.Tensor.{node.target}")
    return ops


def _unique(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def dynamo_report(graphs: Sequence[BackendGraph]) -> ExplainReport:
    """The report for the graphs one call ran, in the order they first ran."""
    compiled = [g.artifacts for g in graphs if g.is_compiled and g.artifacts is not None]
    report = report_from_graphs(compiled)
    eager = [(index, g) for index, g in enumerate(graphs) if not g.is_compiled]
    reasons = [f"graph {index} runs eagerly: {g.eager_reason}" for index, g in eager]
    if not graphs:
        reasons.append(
            "no graph of the torchstrata backend ran for this call (Dynamo ran it "
            "eagerly, or it was compiled with another backend)"
        )
    return attrs.evolve(
        report,
        eager_ops=(*report.eager_ops, *(op for _, g in eager for op in _fx_ops(g.gm))),
        missing_stages=_unique([stage for a in compiled for stage in a.missing_stages]),
        fallback="; ".join(reasons),
        dynamo_guards=_unique([guard for g in graphs for guard in g.dynamo_guards]),
    )


def explain_dynamo(compiled: Callable[..., Any], *args: Any, **kwargs: Any) -> ExplainReport:
    """Report what ``torch.compile(..., backend="torchstrata")`` made of this call:
    ``graphs`` (each graph Dynamo handed over, at torch level), ``aten_graphs`` and
    ``prims_graphs``, ``kernels`` (forward and backward), ``eager_ops`` (every op of a
    graph that runs eagerly, with the reason in ``fallback``) and ``dynamo_guards``.

    Unlike :func:`torchstrata.runtime.explain`'s own captures, this RUNS the call once
    (Dynamo compiles lazily; its result is discarded), through Dynamo's cache as any
    call would. ``graph_breaks`` stay empty: Dynamo does not tell a backend where it
    broke the frame (``torch._dynamo.explain`` does).
    """
    with recording() as graphs:
        compiled(*args, **kwargs)
    return dynamo_report(graphs)
