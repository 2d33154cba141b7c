"""``AtenRecorder``: a dispatch mode that records every ATen call into an ATen-level graph.

It sits above a :class:`~torch._subclasses.fake_tensor.FakeTensorMode`: each ATen call
is forwarded to the fake mode (which computes the output metadata) and appended to a
:class:`~torchstrata.core.GraphBuilder` at :attr:`~torchstrata.core.Level.ATEN`.
Tensors map to nodes by identity; everything else is kept as a constant.

In-place calls on intermediates are recorded functionally (``add_`` becomes ``add``)
and the mutated tensor is rebound to the new node. Other tensors sharing its storage
(views and bases) become *stale*: using one later raises ``NotImplementedError``,
since only full functionalization can express that. Mutating a graph input, or a view
of one, raises at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from torchstrata.autograd.functional import functional_counterpart, written_arguments
from torchstrata.core import GraphBuilder, Level, Node, TensorMeta, aten, aten_from_overload

_CONSTANT_TYPES = (
    int,
    float,
    bool,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.memory_format,
    torch.layout,
)

#: Ops that turn a constant tensor into a traced one; the constant's node stands for both.
_LIFT_OPS = frozenset({"aten::lift_fresh", "aten::lift_fresh_copy"})


class AotTraceError(RuntimeError):
    """Tracing a torch-level graph to ATen failed; the message names the node or op."""


class _Entry:
    """What the recorder knows about one live tensor."""

    __slots__ = ("node", "stale", "storage", "tensor")

    def __init__(self, tensor: torch.Tensor, node: Node) -> None:
        self.tensor = tensor  # kept alive so that its id() is not reused
        self.node = node
        self.storage = StorageWeakRef(tensor.untyped_storage())
        self.stale: str | None = None


class AtenRecorder(TorchDispatchMode):
    """Records ATen overload calls on tracked (fake) tensors into ``self.builder``."""

    def __init__(self) -> None:
        super().__init__()
        self.builder = GraphBuilder(Level.ATEN)
        self._entries: dict[int, _Entry] = {}
        self._input_storages: dict[StorageWeakRef, str] = {}

    # ------------------------------------------------------------ tensors <-> nodes

    def add_input(self, name: str, tensor: torch.Tensor) -> Node:
        """Make ``tensor`` (a fake tensor) a graph input called ``name``."""
        node = self.builder.input(name, TensorMeta.from_tensor(tensor))
        entry = _Entry(tensor, node)
        self._entries[id(tensor)] = entry
        self._input_storages[entry.storage] = node.name
        return node

    def node_of(self, tensor: torch.Tensor) -> Node:
        """The node that computes ``tensor``; constants become ``aten.scalar_tensor`` nodes."""
        entry = self._entries.get(id(tensor))
        if entry is None:
            return self._constant_tensor(tensor)
        if entry.stale is not None:
            raise NotImplementedError(
                f"%{entry.node.name} is read after {entry.stale} wrote to memory it shares "
                "(a view or base of it); this needs functionalization"
            )
        return entry.node

    def _bind(self, tensor: torch.Tensor, node: Node) -> None:
        self._entries[id(tensor)] = _Entry(tensor, node)

    def _constant_tensor(self, tensor: torch.Tensor) -> Node:
        if isinstance(tensor, torch._subclasses.fake_tensor.FakeTensor) or tensor.dim() != 0:
            raise NotImplementedError(
                f"tensor {tuple(tensor.shape)} {tensor.dtype} was not produced inside the "
                "traced graph; only 0-dim constant tensors can be embedded"
            )
        with _disable_current_modes():
            value = tensor.item()
        node = self.builder.call(
            aten("scalar_tensor.default"),
            value,
            dtype=tensor.dtype,
            device=tensor.device,
            meta=TensorMeta((), tensor.dtype, tensor.device),
            name="constant",
        )
        self._bind(tensor, node)
        return node

    def _to_argument(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.node_of(value)
        if isinstance(value, list):
            return [self._to_argument(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._to_argument(item) for item in value)
        if isinstance(value, dict):
            return {key: self._to_argument(item) for key, item in value.items()}
        if isinstance(value, _CONSTANT_TYPES):
            return value
        raise NotImplementedError(f"cannot record an argument of type {type(value).__name__}")

    # -------------------------------------------------------------------- dispatch

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func._overloadpacket._qualified_op_name in _LIFT_OPS:
            result = func(*args, **kwargs)
            self._bind(result, self.node_of(args[0]))
            return result
        if written_arguments(func):
            return self._record_inplace(func, args, kwargs)
        result = func(*args, **kwargs)
        if not _holds_tensor(result):
            return result  # sizes, devices...: static facts of the trace, not graph values
        self._record(func, args, kwargs, result)
        return result

    def _record(
        self,
        func: torch._ops.OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
    ) -> Node:
        op = aten_from_overload(func)
        if not op.name.startswith("aten."):
            raise NotImplementedError(f"{func.name()} is not an ATen op; it cannot be recorded")
        node_args = self._to_argument(args)
        node_kwargs: dict[str, Any] = self._to_argument(kwargs)
        if isinstance(result, torch.Tensor):
            node = self.builder.call(
                op, *node_args, meta=TensorMeta.from_tensor(result), **node_kwargs
            )
            self._bind(result, node)
            return node
        metas = tuple(
            TensorMeta.from_tensor(item) if isinstance(item, torch.Tensor) else None
            for item in result
        )
        node = self.builder.call(op, *node_args, meta=metas, **node_kwargs)
        for index, item in enumerate(result):
            if isinstance(item, torch.Tensor):
                self._bind(item, self.builder.getitem(node, index))
        return node

    def _record_inplace(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        functional = functional_counterpart(func)
        target = args[0]
        storage = StorageWeakRef(target.untyped_storage())
        if storage in self._input_storages:
            raise NotImplementedError(
                f"in-place op {func.name()} mutates graph input %{self._input_storages[storage]} "
                "(or a view of it); input mutation needs the functionalization issue"
            )
        new_value = functional(*args, **kwargs)
        node = self._record(functional, args, kwargs, new_value)
        if new_value.dtype != target.dtype:
            # In-place ops keep self's dtype where the functional op would promote.
            cast = torch.ops.aten._to_copy.default
            converted = cast(new_value, dtype=target.dtype)
            node = self._record(cast, (new_value,), {"dtype": target.dtype}, converted)
        result = func(*args, **kwargs)  # keep the fake tensor's own state in step
        for entry in self._entries.values():
            if entry.storage == storage and entry.tensor is not target:
                entry.stale = entry.stale or f"{func.name()} on %{node.name}"
        self._entries[id(target)] = _Entry(target, node)
        return result


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, tuple | list) and any(isinstance(item, torch.Tensor) for item in value)
