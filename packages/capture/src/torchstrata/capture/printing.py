"""``print(...)`` in traced code: logged with the other side effects, printed after the graph.

Printing is a side effect on the world, not a computation: capture records the call in
the trace's side-effect log (:mod:`.side_effects`, decision 0060) instead of breaking the
graph, and the replay after the graph calls the real ``print`` with the values the trace
printed, in program order with the other writes (decision 0066).

The arguments are snapshots taken at the call: a tensor is the graph value it had then
(an in-place update later in the trace does not change what is printed), a list or dict
the items it held then. Constants print themselves; tensors print as eager prints them,
with the values the graph computed and the ``grad_fn`` eager would show (a compiled
graph's outputs come from the runtime's own autograd function, whose name is not eager's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.capture.grad_hooks import HOOK_OP
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    SequenceVar,
    TensorVar,
    Var,
    describe,
)
from torchstrata.core import MetaInferenceError, Node, OpKind, TensorMeta, map_nodes

#: ``print``'s keyword arguments capture replays (``file`` is read when the print runs).
_KEYWORDS = frozenset({"sep", "end", "file", "flush"})


def record_print(tracer: Tracer, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``print(*args, **kwargs)`` at capture time: log it, return ``None``.

    Raises :class:`Unsupported` (a graph break at the call) for keyword arguments that
    are not constants of the right type, or a ``file`` other than ``None``.
    """
    unknown = set(kwargs) - _KEYWORDS
    if unknown:
        raise Unsupported(f"print() got unexpected keyword arguments {sorted(unknown)}")
    options: dict[str, Any] = {}
    for name, var in kwargs.items():
        value = var.value if isinstance(var, ConstVar) else var
        if name == "file" and value is not None:
            raise Unsupported("print(file=...) to a stream other than sys.stdout")
        if name in ("sep", "end") and not (value is None or isinstance(value, str)):
            raise Unsupported(f"print({name}=...) with {describe(var)}")
        if name == "flush" and not isinstance(value, bool):
            raise Unsupported(f"print(flush=...) with {describe(var)}")
        if name != "file":
            options[name] = value
    values = SequenceVar([_snapshot(arg) for arg in args])
    tracer.side_effects.record_print(values, options, _grad_fn_names(values))
    return ConstVar(None)


def _snapshot(var: Var) -> Var:
    """``var`` as it is now: later updates in the trace must not change what is printed."""
    if isinstance(var, TensorVar) and var.source is None:
        return attrs.evolve(var, python_attributes={})  # the node it has now
    if isinstance(var, SequenceVar):
        return attrs.evolve(var, items=[_snapshot(item) for item in var.items], source=None)
    if isinstance(var, DictVar):
        entries = {key: _snapshot(item) for key, item in var.items.items()}
        return attrs.evolve(var, items=entries, source=None)
    return var


def _grad_fn_names(var: Var) -> list[tuple[TensorVar, str]]:
    """Each tensor printed (in lists, tuples and dicts too) that the graph computes with
    grad, with the ``grad_fn`` name eager gives it."""
    if isinstance(var, TensorVar):
        if var.source is None and var.meta.requires_grad:
            name = _eager_grad_fn(var.node)
            if name is not None:
                return [(var, name)]
        return []
    if isinstance(var, SequenceVar):
        return [pair for item in var.items for pair in _grad_fn_names(item)]
    if isinstance(var, DictVar):
        return [pair for item in var.items.values() for pair in _grad_fn_names(item)]
    return []


def _eager_grad_fn(node: Node) -> str | None:
    """The name of the ``grad_fn`` eager gives ``node``'s value: its torch op run on meta
    tensors with grad. None when that cannot be told (the real one is printed then)."""
    while node.op == HOOK_OP:  # a tensor hook leaves eager's grad_fn as it was
        node = node.args[0]
    if node.op is None or node.op.kind is not OpKind.TORCH:
        return None

    def to_meta(value: Node) -> Any:
        meta = value.meta
        if not isinstance(meta, TensorMeta):
            raise MetaInferenceError(f"%{value.name} is not one tensor")
        tensor = meta.to_meta_tensor()
        if meta.requires_grad:
            tensor = tensor.requires_grad_(True).clone()
        return tensor

    try:
        with torch.enable_grad():
            result = node.op.resolve()(
                *map_nodes(node.args, to_meta), **map_nodes(dict(node.kwargs), to_meta)
            )
    except Exception:  # noqa: BLE001 - any failure: print the real tensor's own
        return None
    grad_fn = getattr(result, "grad_fn", None)
    if grad_fn is None:
        return None
    name = type(grad_fn).__name__
    return grad_fn.name().rsplit("::", 1)[-1] if name == "CppFunction" else name  # as torch
