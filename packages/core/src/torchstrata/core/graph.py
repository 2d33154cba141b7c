"""Nodes and graphs: the SSA IR shared by every stage.

A :class:`Graph` is immutable: passes build a new graph (see :mod:`.builder` and
:mod:`.transform`) rather than patching one in place. Nodes compare by identity.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs
import torch

from torchstrata.core.dtypes import dtype_short_name
from torchstrata.core.meta import TensorMeta, contiguous_strides
from torchstrata.core.ops import Level, OpRef
from torchstrata.core.size_value_text import (
    holds_size_values,
    is_size_value,
    layout_texts,
    size_value_text,
)
from torchstrata.core.symbolic_text import declaration, holds_no_symbols, symbols_of

#: What a node produces: one tensor, several (then read with ``builtin.getitem``), or
#: ``None`` for a value that is not a tensor.
NodeMeta = TensorMeta | tuple[TensorMeta | None, ...] | None

#: Constants allowed as node arguments besides other nodes.
Constant = (
    int
    | float
    | complex
    | bool
    | str
    | None
    | torch.dtype
    | torch.device
    | torch.memory_format
    | torch.layout
)


#: The tag of a node that the backward recomputes rather than the forward saving it: a
#: node of a region that ``torch.utils.checkpoint.checkpoint`` ran (capture tags them).
RECOMPUTE = "recompute"


def recompute_region(number: int) -> str:
    """The tag of the ``number``-th checkpointed region (``recompute_3``), which its
    nodes carry beside :data:`RECOMPUTE`: where one region ends and the next begins."""
    return f"{RECOMPUTE}_{number}"


def recompute_regions(node: Node) -> frozenset[str]:
    """The region tags of ``node`` (more than one in nested checkpoints)."""
    prefix = f"{RECOMPUTE}_"
    return frozenset(tag for tag in node.tags if tag.startswith(prefix))


@attrs.frozen(eq=False)
class Node:
    """One SSA value: ``name = op(*args, **kwargs)`` with its metadata.

    Graph inputs are nodes with ``op=None``. ``args`` hold other nodes, constants, and
    lists/tuples of those; ``kwargs`` likewise. ``tags`` are words that later stages read
    (:data:`RECOMPUTE`); they print after the call (``@recompute``) and change nothing
    about what the node computes.
    """

    name: str
    op: OpRef | None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    meta: NodeMeta = None
    tags: frozenset[str] = frozenset()
    #: :meth:`input_nodes`, found at its first call (a node's arguments never change;
    #: every pass asks every node for its inputs, often several times)
    _inputs: tuple[Node, ...] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def is_input(self) -> bool:
        """True for graph inputs (placeholders)."""
        return self.op is None

    @property
    def tensor_meta(self) -> TensorMeta:
        """The metadata of a single-tensor node (raises for other nodes)."""
        if not isinstance(self.meta, TensorMeta):
            raise TypeError(
                f"node %{self.name} does not produce a single tensor (meta={self.meta!r})"
            )
        return self.meta

    def input_nodes(self) -> list[Node]:
        """Nodes this node reads, in argument order, with repeats."""
        inputs = self._inputs
        if inputs is None:
            found: list[Node] = []
            _collect_nodes(self.args, found)
            if self.kwargs:
                _collect_nodes(self.kwargs.values(), found)
            inputs = tuple(found)
            object.__setattr__(self, "_inputs", inputs)
        return list(inputs)

    def __repr__(self) -> str:
        return f"Node(%{self.name} = {self.op})"


def iter_nodes(value: Any) -> Iterator[Node]:
    """Every :class:`Node` inside a (nested) argument structure, in order."""
    found: list[Node] = []
    _collect_nodes((value,), found)
    return iter(found)


#: The argument structures that hold other arguments (a dict: its values).
_NESTED = (list, tuple, dict)


def _collect_nodes(items: Iterable[Any], found: list[Node]) -> None:
    """Append the nodes inside ``items`` (nested lists, tuples, dicts' values) to ``found``.

    A loop over each level rather than a generator per value: every pass asks each
    node for its inputs, so this runs for every argument of every node, many times."""
    for item in items:
        if isinstance(item, Node):
            found.append(item)
        elif isinstance(item, _NESTED):
            _collect_nodes(item.values() if isinstance(item, dict) else item, found)


def map_nodes(value: Any, fn: Any) -> Any:
    """Rebuild a (nested) argument structure with each :class:`Node` replaced by
    ``fn(node)``; lists, tuples (their subclasses too) and dicts are rebuilt as plain ones."""
    if isinstance(value, Node):
        return fn(value)
    # constants (most items) are kept without a call
    if isinstance(value, list | tuple):
        items = [
            fn(item)
            if isinstance(item, Node)
            else map_nodes(item, fn)
            if isinstance(item, _NESTED)
            else item
            for item in value
        ]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {key: map_nodes(item, fn) for key, item in value.items()}
    return value


# a node's metadata and arguments are scanned for symbols where they are listed
holds_no_symbols(Node)


@attrs.frozen(eq=False)
class Graph:
    """A function in SSA form at one :class:`Level`.

    ``inputs`` are placeholder nodes, ``nodes`` the computation in topological order
    and ``outputs`` the nodes returned, in order. Build with
    :class:`torchstrata.core.GraphBuilder`.
    """

    level: Level
    inputs: tuple[Node, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Node, ...]

    def __str__(self) -> str:
        text = _STATIC_TEXTS.get(self)
        if text is None:
            text = format_graph(self)
        return text

    def all_nodes(self) -> tuple[Node, ...]:
        """Inputs, then computation nodes."""
        return self.inputs + self.nodes

    def users(self) -> dict[Node, list[Node]]:
        """For every node, the nodes that read it (outputs are not counted)."""
        result: dict[Node, list[Node]] = {node: [] for node in self.all_nodes()}
        for node in self.nodes:
            for arg in dict.fromkeys(node.input_nodes()):
                result[arg].append(node)
        return result

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        for candidate in self.all_nodes():
            if candidate.name == name:
                return candidate
        raise KeyError(f"no node %{name} in graph")

    def ops(self) -> list[OpRef]:
        """The op of every computation node, in order."""
        return [node.op for node in self.nodes if node.op is not None]

    @property
    def input_metas(self) -> tuple[TensorMeta, ...]:
        """The metadata of every input (inputs are always tensors)."""
        return tuple(node.tensor_meta for node in self.inputs)


# ------------------------------------------------------------------------ text form
# The parser lives in torchstrata.core.text; the grammar is documented there.


def format_meta(meta: NodeMeta) -> str:
    """``f32[4, 8]``, ``f32[4, 8]{1, 4} cuda:0 grad``, ``(f32[4], i64[4])`` or ``_``."""
    if meta is None:
        return "_"
    if isinstance(meta, tuple):
        return "(" + ", ".join(format_meta(item) for item in meta) + ")"
    try:
        return _static_meta_text(meta)
    except TypeError:  # a symbolic size hashes not (and prints as its ShapeEnv knows it now)
        return _symbolic_meta_text(meta)


def _meta_text(meta: TensorMeta) -> str:
    if holds_size_values(meta.shape) or holds_size_values(meta.strides):
        # a symbolic lowering's sizes (hashable: cached too; a lookup compares them only
        # on a hash collision) read by expression, deciding nothing (0494)
        return _symbolic_meta_text(meta)
    text = f"{dtype_short_name(meta.dtype)}[{', '.join(map(str, meta.shape))}]"
    if meta.strides != contiguous_strides(meta.shape):
        text += "{" + ", ".join(map(str, meta.strides)) + "}"
    return text + _meta_tail(meta)


def _symbolic_meta_text(meta: TensorMeta) -> str:
    # strides compared with the contiguous ones by text: ``!=`` of symbolic sizes would
    # record a guard (a SymInt's ShapeEnv) or a condition (a lowering's SizeValue: 0494)
    shape, strides = layout_texts(meta.shape, meta.strides)
    text = f"{dtype_short_name(meta.dtype)}[{shape}]"
    if strides is not None:
        text += "{" + strides + "}"
    return text + _meta_tail(meta)


def _meta_tail(meta: TensorMeta) -> str:
    text = ""
    if meta.device.type != "cpu":
        text += f" {meta.device}"
    if meta.requires_grad:
        text += " grad"
    return text


#: The text of the metadata printed lately, by value (equal metadata print the same):
#: graphs repeat a few shapes over hundreds of nodes, and the cache prints every graph.
_static_meta_text = functools.lru_cache(maxsize=4096)(_meta_text)


def format_value(value: Any) -> str:
    """The text form of one argument: ``%node``, a constant, a symbolic size (a ``SymInt``
    or a lowering's ``SizeValue``, printed without reading it), a ``slice(start, stop,
    step)`` (bounds ints, None or symbolic sizes), ``...``, or a list/tuple of those."""
    if isinstance(value, Node):
        return f"%{value.name}"
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, complex):
        return f"complex({format_value(value.real)}, {format_value(value.imag)})"
    if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
        return str(value)
    if isinstance(value, torch.device):
        return f"device({str(value)!r})"
    if isinstance(value, torch.SymInt | torch.SymFloat):  # a symbolic size (0200, 0211)
        return str(value)  # a SymFloat: a size as a float (a mean's ``ToFloat(2*s25)``)
    if is_size_value(value):  # a symbolic lowering's size, by its expression (0494)
        return size_value_text(value)
    if value is Ellipsis:  # a subscript's ``...`` (decision 0493)
        return "..."
    if isinstance(value, slice):  # a subscript's bounds, as ``repr`` writes them (0493)
        bounds = (value.start, value.stop, value.step)
        return f"slice({', '.join(format_value(bound) for bound in bounds)})"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(format_value(item) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    raise TypeError(f"cannot print argument {value!r} of type {type(value).__name__}")


def format_node(node: Node) -> str:
    """One line of the listing: ``%name: META = op(args, key=value)``, then the node's
    tags (``@recompute``)."""
    head = f"%{node.name}: {format_meta(node.meta)} = "
    if node.op is None:
        return head + "input"
    args = [format_value(arg) for arg in node.args]
    args += [f"{key}={format_value(value)}" for key, value in node.kwargs.items()]
    tags = "".join(f" @{tag}" for tag in sorted(node.tags))
    return head + f"{node.op.name}({', '.join(args)}){tags}"


#: The text of each graph printed so far that has no symbolic size: a graph is immutable,
#: and one without symbols prints the same every time (a symbol's expression and
#: declaration read its ShapeEnv, which may learn more, so those are printed afresh).
#: A static graph is printed several times by the compiled-graph cache (its key, the
#: records of the autograd result and of the lowering), once per size of a symbolic entry.
_STATIC_TEXTS: weakref.WeakKeyDictionary[Graph, str] = weakref.WeakKeyDictionary()


def format_graph(graph: Graph) -> str:
    """The whole listing; :func:`torchstrata.core.parse` reads it back."""
    lines = [f"graph {graph.level.value} {{"]
    values = [(node.meta, node.args, dict(node.kwargs)) for node in graph.all_nodes()]
    symbols = symbols_of(values)
    lines += [f"  {declaration(s, env)}" for s, env in symbols.items()]
    lines += [f"  {format_node(node)}" for node in graph.all_nodes()]
    lines.append("  return " + ", ".join(f"%{node.name}" for node in graph.outputs))
    lines.append("}")
    text = "\n".join(lines)
    if not symbols:
        _STATIC_TEXTS[graph] = text
    return text
