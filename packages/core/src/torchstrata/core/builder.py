"""Building graphs: :class:`GraphBuilder` and metadata inference for every op kind."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import torch

from torchstrata.core.direct_meta import direct_meta
from torchstrata.core.graph import Graph, Node, NodeMeta, iter_nodes, map_nodes
from torchstrata.core.meta import TensorMeta
from torchstrata.core.meta_memo import meta_key, static_meta_key
from torchstrata.core.ops import GETITEM, Level, OpKind, OpRef
from torchstrata.core.prims import get_prim
from torchstrata.core.symbolic import active_symbolic_sizes, fake_mode_for

#: A well-formed node name (an ASCII identifier); others are replaced when a graph is built.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class MetaInferenceError(RuntimeError):
    """An op could not be run on meta tensors to find its output metadata."""


def _device_of(args: Any, kwargs: Mapping[str, Any]) -> torch.device:
    device = kwargs.get("device")
    if device is not None:
        return torch.device(device)
    for node in iter_nodes((args, tuple(kwargs.values()))):
        if isinstance(node.meta, TensorMeta):
            return node.meta.device
    return torch.device("cpu")


def _to_meta_tensor(node: Node) -> Any:
    meta = node.meta
    if isinstance(meta, TensorMeta):
        tensor = meta.to_meta_tensor()
        if meta.requires_grad and (meta.dtype.is_floating_point or meta.dtype.is_complex):
            # A clone is a non-leaf, so in-place ops on it infer like on intermediates.
            tensor = tensor.requires_grad_(True).clone()
        return tensor
    if isinstance(meta, tuple):
        return tuple(item.to_meta_tensor() if item is not None else None for item in meta)
    raise MetaInferenceError(f"%{node.name} has no tensor metadata to run an op on")


def _from_meta_result(value: Any, device: torch.device) -> NodeMeta:
    if isinstance(value, torch.Tensor):
        meta = TensorMeta.from_tensor(value)
        return TensorMeta(meta.shape, meta.dtype, device, meta.strides, meta.requires_grad)
    if isinstance(value, tuple | list) and all(
        isinstance(v, torch.Tensor) or v is None for v in value
    ):
        return tuple(_from_meta_result(v, device) if v is not None else None for v in value)  # type: ignore[misc]
    return None


def _tensor_meta(node: Node) -> Any:
    return node.meta if isinstance(node.meta, TensorMeta) else node


def _meta_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    converted = dict(map_nodes(dict(kwargs), _to_meta_tensor))
    if "device" in converted:
        converted["device"] = "meta"
    return converted


def infer_meta(op: OpRef, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> NodeMeta:
    """The metadata of ``op(*args, **kwargs)`` where args may hold nodes.

    Prims use their meta function; common pointwise ops and layer norm are answered by
    :func:`~torchstrata.core.direct_meta.direct_meta` (no sympy import); other ATen and
    torch ops run on ``meta`` tensors and the result is moved back to the inputs' device.
    """
    if op.kind is OpKind.BUILTIN:
        source, index = args
        if not isinstance(source.meta, tuple):
            raise MetaInferenceError(f"getitem on %{source.name}, which is not a tuple of tensors")
        return source.meta[index]
    if op.kind is OpKind.PRIMS:
        to_meta = map_nodes(args, lambda node: node.meta)
        return get_prim(op.name).meta(*to_meta, **map_nodes(dict(kwargs), lambda node: node.meta))
    direct = direct_meta(op.name, map_nodes(args, _tensor_meta), map_nodes(kwargs, _tensor_meta))
    if direct is not None:
        return direct
    static = op.kind is OpKind.ATEN and active_symbolic_sizes() is None
    key = static_meta_key(op, args, kwargs) if static else None
    found = _STATIC_METAS.get(key) if key is not None else None
    if found is None:
        found = _infer_on_meta_tensors(op, args, kwargs)
        if key is not None and found is not None:
            if len(_STATIC_METAS) >= STATIC_METAS_KEPT:
                _STATIC_METAS.clear()
            _STATIC_METAS[key] = found
    return found


#: How many ATen calls' metadata inferred on static sizes are kept (decision 0321).
STATIC_METAS_KEPT = 4096
#: The metadata of ATen calls inferred on meta tensors at static sizes, by
#: :func:`~torchstrata.core.meta_memo.static_meta_key` (metadata are immutable). Every
#: layer of a model and every size of a symbolic entry asks for the same matmuls and
#: attention calls again; each costs torch's Python meta kernels a millisecond or more.
_STATIC_METAS: dict[Any, NodeMeta] = {}


def _infer_on_meta_tensors(op: OpRef, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> NodeMeta:
    device = _device_of(args, kwargs)
    try:
        with fake_mode_for((args, dict(kwargs))):  # symbolic sizes: fake tensors
            result = op.resolve()(*map_nodes(args, _to_meta_tensor), **_meta_kwargs(kwargs))
    except Exception as error:
        raise MetaInferenceError(
            f"cannot infer the output of {op.name} on meta tensors: {error}"
        ) from error
    return _from_meta_result(result, device)


class GraphBuilder:
    """Builds a :class:`Graph` node by node.

    >>> b = GraphBuilder(Level.PRIMS)
    >>> x = b.input("x", TensorMeta((4,), torch.float32))
    >>> y = b.call(prim("exp"), x)
    >>> graph = b.build([y])
    """

    def __init__(self, level: Level) -> None:
        self.level = level
        self._inputs: list[Node] = []
        self._nodes: list[Node] = []
        self._names: set[str] = set()
        #: Per base name, the counter its last numbered name took: the smallest free one
        #: never goes down (names are only added), so the next search starts there.
        self._counters: dict[str, int] = {}
        self._tags: frozenset[str] = frozenset()
        #: what :meth:`infer` inferred inside a symbolic scope, by :func:`meta_key`
        self._inferred: dict[Any, NodeMeta] = {}
        self._scope: Any = None

    def __len__(self) -> int:
        """The number of calls built so far (inputs not counted)."""
        return len(self._nodes)

    def _unique_name(self, base: str) -> str:
        base = base if NAME_PATTERN.fullmatch(base) else "v"
        if base not in self._names:
            self._names.add(base)
            return base
        counter = self._counters.get(base, 1)
        while f"{base}_{counter}" in self._names:
            counter += 1
        self._counters[base] = counter
        name = f"{base}_{counter}"
        self._names.add(name)
        return name

    def input(self, name: str, meta: TensorMeta) -> Node:
        """Add a graph input called ``name`` (made unique if taken)."""
        node = Node(self._unique_name(name), None, meta=meta)
        self._inputs.append(node)
        return node

    def call(
        self, op: OpRef, *args: Any, meta: NodeMeta = None, name: str | None = None, **kwargs: Any
    ) -> Node:
        """Append ``op(*args, **kwargs)``; its metadata is inferred unless given."""
        if meta is None:
            meta = self.infer(op, args, kwargs)
        name = self._unique_name(name or op.short_name)
        node = Node(name, op, tuple(args), dict(kwargs), meta, self._tags)
        self._nodes.append(node)
        return node

    def infer(self, op: OpRef, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> NodeMeta:
        """:func:`infer_meta` of ``op(*args, **kwargs)``; inside a symbolic scope, a call
        like one inferred before (same op, operand metadata and arguments,
        :mod:`~torchstrata.core.meta_memo`) takes that call's metadata."""
        scope = active_symbolic_sizes()
        if scope is None:
            return infer_meta(op, args, kwargs)
        if scope is not self._scope:  # keys name symbols of one ShapeEnv
            self._scope, self._inferred = scope, {}
        key = meta_key(op, args, kwargs)
        if key is None:
            return infer_meta(op, args, kwargs)
        meta = self._inferred.get(key)
        if meta is None:
            meta = self._inferred[key] = infer_meta(op, args, kwargs)
        return meta

    @contextlib.contextmanager
    def tagged(self, tags: frozenset[str] | set[str]) -> Iterator[None]:
        """Calls built inside the ``with`` block get ``tags`` besides those of the blocks
        around it (``Node.tags``)."""
        outer = self._tags
        self._tags = outer | frozenset(tags)
        try:
            yield
        finally:
            self._tags = outer

    def built_since(self, node: Node, count: int) -> bool:
        """Whether ``node`` is among the calls built after the first ``count`` and no
        later call reads it (so :meth:`relayout` may change it)."""
        position = self._position(node, count)
        return position is not None and not self._read_after(node, position)

    def relayout(self, node: Node, strides: tuple[int, ...]) -> Node:
        """``node`` (a call no later node reads yet) stored with ``strides`` instead:
        the decomposition gives a result its ATen node's layout, so that later metas
        (views of it, outputs) derive from the layout eager would make."""
        position = self._position(node, 0)
        if position is None or not isinstance(node.meta, TensorMeta):
            raise ValueError(f"relayout: %{node.name} is not a tensor call of this builder")
        if self._read_after(node, position):
            raise ValueError(f"relayout: %{node.name} is already read by later nodes")
        meta = attrs.evolve(node.meta, strides=tuple(strides))
        self._nodes[position] = attrs.evolve(node, meta=meta)
        return self._nodes[position]

    def _position(self, node: Node, count: int) -> int | None:
        """Where ``node`` is among the calls built after the first ``count`` (None: not)."""
        for position in range(len(self._nodes) - 1, count - 1, -1):
            if self._nodes[position] is node:
                return position
        return None

    def _read_after(self, node: Node, position: int) -> bool:
        return any(node in later.input_nodes() for later in self._nodes[position + 1 :])

    def getitem(self, source: Node, index: int) -> Node:
        """The ``index``-th tensor of a multi-output node."""
        return self.call(GETITEM, source, index, name=f"{source.name}_{index}")

    def build(self, outputs: list[Node] | tuple[Node, ...]) -> Graph:
        """Finish the graph with these outputs."""
        return Graph(self.level, tuple(self._inputs), tuple(self._nodes), tuple(outputs))
