"""A lowering made once for many sizes as JSON records, for the compiled-graph cache
(decision 0450).

Conditions on sizes and symbolic sizes are sympy expressions, written as ``sympy.srepr``
text (symbols with their assumptions; torch's own sympy functions, such as its ``Mod``,
named ``torch_Mod``: apart from sympy's) and read back from that syntax only, in a
namespace of those classes. An expression whose text does not read back as the same expression is
refused when written (:class:`~.graph_records.NotCacheable`): a stored condition is the
condition that was decided, never a near one. A record that does not decode is a
:class:`~.graph_records.BadRecord` (the entry is rebuilt).

A tensor's metadata with symbolic sizes (:class:`~torchstrata.core.SizeValue`) is its
dtype, device, and shape and strides as ints or expressions; read back, each expression
becomes a size of a new :class:`~torchstrata.core.SizeGuards` at the stored hints.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import SizeGuards, TensorMeta
from torchstrata.runtime.graph_records import BadRecord, NotCacheable
from torchstrata.runtime.symbolic_outputs import ViewLayouts


@functools.cache
def _namespace() -> dict[str, Any]:
    """What an ``srepr`` text may name: sympy's classes and torch's sympy functions."""
    import sympy  # type: ignore[import-untyped]
    import torch.utils._sympy.functions as torch_functions

    names = {name: getattr(sympy, name) for name in dir(sympy) if not name.startswith("_")}
    for name in dir(torch_functions):
        value = getattr(torch_functions, name)
        if isinstance(value, type) and issubclass(value, sympy.Basic):
            names[_TORCH_PREFIX + name] = value
    return names


#: torch's sympy classes are written with this prefix: some share a name with sympy's
#: (``Mod``), and a condition on one is not a condition on the other
_TORCH_PREFIX = "torch_"


@functools.cache
def _printer() -> Any:
    """``srepr``'s printer, naming torch's sympy classes apart from sympy's."""
    from sympy.printing.repr import ReprPrinter  # type: ignore[import-untyped]

    class Printer(ReprPrinter):
        def _print_Function(self, expr: Any) -> str:
            text: str = super()._print_Function(expr)
            return _TORCH_PREFIX + text if _of_torch(expr) else text

        def emptyPrinter(self, expr: Any) -> str:
            text: str = super().emptyPrinter(expr)
            return _TORCH_PREFIX + text if _of_torch(expr) else text

    return Printer()


def _of_torch(expr: Any) -> bool:
    return type(expr).__module__.startswith("torch.")


def expression_text(expr: Any) -> str:
    """``expr`` (a sympy expression or boolean) as text that :func:`read_expression`
    reads back as ``expr``; :class:`NotCacheable` where it would not."""
    text: str = _printer().doprint(expr)
    try:
        same = read_expression(text) == expr
    except BadRecord:
        same = False
    if not same:
        raise NotCacheable(f"the size expression {expr} does not read back from its text")
    return text


#: The syntax of an ``srepr`` text: calls of named classes on constants and calls.
_SREPR_NODES = (
    ast.Expression,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.keyword,
    ast.UnaryOp,
    ast.USub,
    ast.Tuple,
)


def read_expression(text: Any) -> Any:
    """The sympy expression :func:`expression_text` wrote as ``text``. Only the syntax
    ``srepr`` writes is read (calls of sympy's and torch's sympy classes on constants),
    so a record runs no other code."""
    if not isinstance(text, str):
        raise BadRecord(f"a size expression record must be text, not {type(text).__name__}")
    namespace = _namespace()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise BadRecord(f"a size expression does not parse: {error.msg}") from error
    for node in ast.walk(tree):
        if not isinstance(node, _SREPR_NODES) or (
            isinstance(node, ast.Name) and node.id not in namespace
        ):
            raise BadRecord(f"a size expression with {ast.dump(node)[:80]}")
    try:
        return eval(compile(tree, "<size expression>", "eval"), {"__builtins__": {}, **namespace})
    except Exception as error:
        raise BadRecord(f"a size expression does not build: {type(error).__name__}") from error


def _size(value: Any) -> Any:
    if type(value) is int:
        return value
    import sympy

    if isinstance(value, torch.SymInt):
        expr = value.node.expr
    elif isinstance(value, sympy.Expr):
        expr = value  # a size read back from a record
    else:
        expr = getattr(value, "expr", None)
    if expr is None:
        raise NotCacheable(f"a size {value!r} that is no int, SymInt, SizeValue or expression")
    return {"size": expression_text(expr)}


def _read_size(record: Any, guards: SizeGuards) -> Any:
    if type(record) is int:
        return record
    if not isinstance(record, Mapping) or set(record) != {"size"}:
        raise BadRecord(f"a size record {record!r} of an unknown form")
    return guards.of(read_expression(record["size"]))


def meta_record(meta: Any) -> dict[str, Any] | None:
    """A tensor's metadata (sizes ints or ``SizeValue``) as JSON types; None for a value
    that is no tensor."""
    if not isinstance(meta, TensorMeta):
        return None
    return {
        "shape": [_size(size) for size in meta.shape],
        "strides": None if meta.strides is None else [_size(size) for size in meta.strides],
        "dtype": str(meta.dtype).removeprefix("torch."),
        "device": str(meta.device),
    }


def read_meta(record: Any, guards: SizeGuards) -> TensorMeta | None:
    """The metadata :func:`meta_record` wrote, its symbolic sizes those of ``guards``."""
    if record is None:
        return None
    try:
        dtype = getattr(torch, record["dtype"])
        if not isinstance(dtype, torch.dtype):
            raise BadRecord(f"{record['dtype']!r} is no dtype")
        strides = record["strides"]
        return TensorMeta(
            tuple(_read_size(size, guards) for size in record["shape"]),
            dtype,
            torch.device(record["device"]),
            None if strides is None else tuple(_read_size(size, guards) for size in strides),
        )
    except (AttributeError, KeyError, TypeError, ValueError, RuntimeError) as error:
        if isinstance(error, BadRecord):
            raise
        raise BadRecord(f"a tensor metadata record does not decode: {error}") from error


def metas_record(metas: Sequence[Any]) -> list[dict[str, Any] | None]:
    """Each of ``metas`` as :func:`meta_record` writes it."""
    return [meta_record(meta) for meta in metas]


def read_metas(records: Any, guards: SizeGuards) -> tuple[TensorMeta | None, ...]:
    """The metadata :func:`metas_record` wrote."""
    if not isinstance(records, list):
        raise BadRecord("a list of tensor metadata records is no list")
    return tuple(read_meta(record, guards) for record in records)


def package_record(package: Mapping[str, Any] | None) -> dict[str, Any]:
    """A codegen package of a graph with symbolic sizes, as JSON types: the compiled
    graph's output layouts with a symbolic size are left out (None: the runners of a
    lowering for many sizes compute their layouts from the call's sizes).
    :class:`NotCacheable` where there is no package or it holds other than JSON types."""
    if package is None:
        raise NotCacheable("the codegen stage gave no package of the symbolic graph")
    layouts = [
        None if layout is None or _symbolic_layout(layout) else layout
        for layout in package.get("output_layouts", ())
    ]
    record = {**package, "output_layouts": layouts}
    try:
        json.dumps(record)
    except (TypeError, ValueError) as error:
        raise NotCacheable(f"the package is not plain data: {error}") from error
    return record


def _symbolic_layout(layout: Mapping[str, Any]) -> bool:
    sizes = [*layout.get("shape", ()), *(layout.get("strides") or ())]
    return any(type(size) is not int for size in sizes)


def _sizes_record(value: Any) -> Any:
    """Nested tuples of sizes (ints, ``SymInt``, ``SizeValue``) and None as JSON types."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return [_sizes_record(item) for item in value]
    return _size(value)


def _read_sizes(record: Any) -> Any:
    """What :func:`_sizes_record` wrote: tuples of ints and sympy expressions."""
    if record is None or type(record) is int:
        return record
    if isinstance(record, list):
        return tuple(_read_sizes(item) for item in record)
    if isinstance(record, Mapping) and set(record) == {"size"}:
        return read_expression(record["size"])
    raise BadRecord(f"a size record {record!r} of an unknown form")


def view_layouts_record(layouts: ViewLayouts) -> dict[str, Any]:
    """The symbolic layouts of a runner's output views and aliases as JSON types
    (decision 0505)."""
    owners = [
        [position, _sizes_record(shape), _sizes_record(strides), _dtype_name(dtype), str(device)]
        for position, shape, strides, dtype, device in layouts.owners
    ]
    return {
        "aliases": _sizes_record(layouts.aliases),
        "views": _sizes_record(layouts.views),
        "owners": owners,
    }


def read_view_layouts(record: Any) -> ViewLayouts:
    """The :class:`~.symbolic_outputs.ViewLayouts` :func:`view_layouts_record` wrote, its
    sizes sympy expressions."""
    if not isinstance(record, Mapping) or set(record) != {"aliases", "views", "owners"}:
        raise BadRecord("a view layouts record of an unknown form")
    owners = []
    for owner in record["owners"]:
        if not isinstance(owner, list) or len(owner) != 5 or type(owner[0]) is not int:
            raise BadRecord(f"an output owner record {owner!r} of an unknown form")
        position, shape, strides, dtype, device = owner
        sizes = _read_sizes(shape), _read_sizes(strides)
        if not all(isinstance(part, tuple) for part in sizes):
            raise BadRecord(f"an output owner record {owner!r} without a shape or strides")
        owners.append((position, *sizes, _read_dtype(dtype), torch.device(device)))
    aliases, views = _read_sizes(record["aliases"]), _read_sizes(record["views"])
    if not isinstance(aliases, tuple) or not isinstance(views, tuple):
        raise BadRecord("output aliases or views recorded as no list")
    viewed = {view[0] for view in views if isinstance(view, tuple) and view}
    if viewed != {owner[0] for owner in owners}:
        raise BadRecord("the outputs viewed are not the outputs whose layouts are stored")
    return ViewLayouts(aliases, views, tuple(owners))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _read_dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise BadRecord(f"{name!r} is no dtype")
    return dtype
