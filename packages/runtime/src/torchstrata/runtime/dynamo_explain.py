"""``explain()`` of what ``torch.compile`` returns with ``backend="torchstrata"``.

Dynamo decides which graphs a call runs only when the call runs (it traces lazily and
keeps its compiled graphs in its own caches), so the report comes from running the call
once while the backend's graphs record themselves
(:func:`torchstrata.runtime.dynamo_record.recording`): the graphs Dynamo handed to
torchstrata for this call (compiled now or earlier), the guards Dynamo had collected
for them, their kernels (the backward's too) and the ops left to eager.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch.fx

from torchstrata.core import current_options
from torchstrata.core.guard_text import describe_tensor_meta, short_repr
from torchstrata.core.meta import TensorMeta
from torchstrata.runtime.compile_trace import compile_trace
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


#: Dynamo guard kinds that compare a value with ``==`` / by identity / by type.
_EQUALS = ("CONSTANT_MATCH", "EQUALS_MATCH")
_IDENTITY = ("ID_MATCH", "MODULE_MATCH", "CLOSURE_MATCH", "BUILTIN_MATCH", "FUNCTION_MATCH")


def _frame_scope(compiled: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``{"L": locals, "G": globals}`` of the frame Dynamo traced for this call (the
    original forward or function bound to the arguments); empty if it cannot be bound."""
    if isinstance(compiled, torch.nn.Module):
        module = vars(compiled).get("_modules", {}).get("_orig_mod")
        forward = getattr(type(module), "forward", None)
        fn, args = forward, (module, *args)
    else:
        fn = getattr(compiled, "_torchdynamo_orig_callable", None)
    plain = inspect.unwrap(getattr(fn, "__func__", fn)) if fn is not None else None
    try:
        bound = inspect.signature(plain).bind(*args, **kwargs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}
    bound.apply_defaults()
    return {"L": dict(bound.arguments), "G": getattr(plain, "__globals__", {})}


def _with_value(guard: str, scope: dict[str, Any]) -> str:
    """A Dynamo guard (``KIND: source``) with the value its source has in this call."""
    kind, _, source = guard.partition(": ")
    if not scope or not source or kind not in (*_EQUALS, *_IDENTITY, "TENSOR_MATCH", "TYPE_MATCH"):
        return guard
    try:
        value = eval(source, {"__builtins__": {}}, scope)
    except Exception:  # noqa: BLE001 - a source only Dynamo's scope can read: no value
        return guard
    if kind == "TENSOR_MATCH" and isinstance(value, torch.Tensor):
        return f"{guard}: Tensor, {describe_tensor_meta(TensorMeta.from_tensor(value))}"
    if kind in _EQUALS:
        return f"{guard} == {short_repr(value)}"
    if kind == "TYPE_MATCH":
        return f"{guard}: type is {short_repr(type(value))}"
    if kind in _IDENTITY:
        return f"{guard} is {short_repr(value)}"
    return guard


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
        size_lowerings=tuple(
            f"graph {index}: {g.size_lowering()}"
            for index, g in enumerate(graphs)
            if g.size_lowering is not None
        ),
    )


def explain_dynamo(compiled: Callable[..., Any], *args: Any, **kwargs: Any) -> ExplainReport:
    """Report what ``torch.compile`` with ``backend="torchstrata"`` made of this call:
    ``graphs`` (each graph Dynamo handed over, at torch level), ``aten_graphs`` and
    ``prims_graphs``, ``kernels`` (forward and backward), ``eager_ops`` (every op of a
    graph that runs eagerly, with the reason in ``fallback``) and ``dynamo_guards``.

    Unlike :func:`torchstrata.runtime.explain`'s own captures, this RUNS the call once
    (Dynamo compiles lazily; its result is discarded), through Dynamo's cache as any
    call would. ``graph_breaks`` stay empty: Dynamo does not tell a backend where it
    broke the frame (Dynamo's own ``explain`` does). ``dynamo_guards`` carry the values
    their sources have in this call (``CONSTANT_MATCH: L['self'].p == 0.1``, a tensor's
    shape, strides, dtype...) where the call's arguments and the function's globals give
    them; ``pass_records`` and ``stage_seconds`` are as for ``explain()``.
    """
    with compile_trace("a Dynamo graph", current_options()) as trace, recording() as graphs:
        compiled(*args, **kwargs)
    report = dynamo_report(graphs)
    scope = _frame_scope(compiled, args, kwargs)
    return attrs.evolve(
        report,
        dynamo_guards=tuple(_with_value(guard, scope) for guard in report.dynamo_guards),
        stage_seconds=tuple(trace.stage_seconds),
    )
