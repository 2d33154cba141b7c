"""The guard of a graph with symbolic sizes: one check of every symbolic input's sizes
and strides, each symbol at least 2, and the size relations the trace relied on
(decision 0200). Shared by the runtime's symbolic entries and capture's segments after a
graph break (decision 0206)."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core.concretizer import concretize
from torchstrata.core.int_arguments import readable_source
from torchstrata.core.meta import TensorMeta, TensorTraits
from torchstrata.core.results import TENSOR_TYPES, Guard, GuardKind
from torchstrata.core.symbolic import (
    SymbolicSizes,
    has_symbols,
    is_symbolic,
    size_hint,
    size_or_int,
)

#: layouts a :class:`SizeCheck` remembers its answer for (then it starts over)
_MAX_KNOWN = 4096


def layout_reads(value: str) -> tuple[str, ...]:
    """The reads of the layout key of one tensor, ``value`` being an expression for it
    (:func:`layout_items`), one expression each."""
    return (f"{value}.shape", f"{value}.stride()")


def layout_items(value: str) -> str:
    """The reads of the layout key of one tensor, ``value`` being an expression for it:
    its sizes and strides, as items of a tuple display (each followed by a comma). The
    rest that :meth:`SizeCheck.failure` checks (the exact type, dtype, device,
    ``requires_grad``, lazy bits) is the tensor's own guard, before it (its expected
    value a :class:`~torchstrata.core.TensorTraits`; :func:`size_guards`)."""
    return "".join(f"{read}, " for read in layout_reads(value))


class SizeCheck:
    """The guard of a symbolic entry: the inputs' exact tensor types, dtypes, devices,
    static sizes and strides, each symbol at least 2, and the size relations the trace
    relied on.

    Answers on sizes and strides are remembered per layout of the inputs in
    :attr:`known`, keyed by one flat tuple of their sizes and strides
    (:func:`layout_items`). The guard :func:`size_guards` makes builds that key and looks
    it up inline in the entry's generated check: a layout seen before costs its reads, a
    tuple and a dict lookup, with no Python call; a new one calls :meth:`decide`. The
    rest (exact types, dtypes, devices, ``requires_grad``, lazy bits) is checked by each
    tensor's own guard before it, as a static entry's tensor guard checks it, and again
    by :meth:`decide` (never remembered: the key does not hold it)."""

    def __init__(
        self,
        sources: Sequence[str],
        metas: Sequence[TensorMeta],
        sizes: SymbolicSizes,
        pinned: Mapping[str, TensorMeta] | None = None,
    ) -> None:
        self.metas = tuple(metas)
        self.sizes = sizes
        # symbol -> (tensor position, dim) it was made for: every symbol, also those the
        # ShapeEnv replaced by an equal one since (their guards still name them)
        self.slots: dict[str, tuple[int, int]] = {
            b.name: (list(sources).index(b.source), b.dim)
            for b in sizes.bindings
            if b.source in sources
        }
        # symbol -> its size, for a symbol of an input the trace made static: that
        # input's own exact tensor guard (``pinned``: source -> its static meta) checks
        # the size, so a relation naming it holds that value
        pinned_values = {
            b.name: size_hint(size)  # a SymInt the trace replaced by a constant: its value
            for b in sizes.bindings
            if b.source not in sources and pinned and b.source in pinned
            for size in (pinned[b.source].shape[b.dim],)
            if not is_symbolic(size)
        }
        #: the conditions the trace relied on, each pinned size replaced by its value;
        #: those that the exact tensor guards decide alone are left out
        self.exprs = _without_pinned(sizes.guard_exprs(), pinned_values)
        self.names = {
            b.name: readable_source(f"{b.source}.size()[{b.dim}]") for b in sizes.bindings
        }
        self.sources = tuple(sources)
        #: why the last call that failed it did ('' when it held)
        self.last_failure = ""
        #: layout key -> True when it passes, else why it fails
        self.known: dict[tuple[Any, ...], bool | str] = {}
        names = [f"t{i}" for i in range(len(self.metas))]
        self._key: Any = eval(f"lambda {', '.join(names)}: {self.key_expression(names)}")

    def key_expression(self, values: Sequence[str]) -> str:
        """The layout key as one tuple display over ``values`` (expressions for the
        tensors, in the order of :attr:`sources`): what the generated check hashes."""
        return "(" + "".join(f"{read}, " for read in self.key_reads(values)) + ")"

    def key_reads(self, values: Sequence[str]) -> list[str]:
        """The items of :meth:`key_expression`, one expression each."""
        if len(values) != len(self.metas):
            raise ValueError(f"{len(values)} tensors for a check of {len(self.metas)}")
        return [read for value in values for read in layout_reads(value)]

    def __call__(self, *tensors: Any) -> bool:
        """Whether ``tensors`` pass (the key computed here; see :meth:`decide`)."""
        return self.decide(*tensors)

    def decide(self, *tensors: Any) -> bool:
        """Whether ``tensors`` pass, for a layout the inline lookup did not find passing:
        a new layout is checked and remembered; a failing one sets :attr:`last_failure`."""
        try:
            traits = self._traits_failure(tensors)
            key = self._key(*tensors)
        except (AttributeError, TypeError):
            self.last_failure = "an input is not a tensor"
            return False
        if traits:  # not remembered: the key holds sizes and strides only
            self.last_failure = traits
            return False
        known = self.known.get(key)
        if known is None:
            if len(self.known) >= _MAX_KNOWN:  # a cache growing by one row per call
                self.known.clear()
            known = self.known[key] = self.failure(tensors) or True
        if known is True:
            return True
        self.last_failure = str(known)
        return False

    def failure(self, tensors: Sequence[torch.Tensor]) -> str:
        """Why ``tensors`` fail the check, each symbol named by its dimension (the
        condition and the sizes of this call); '' when they pass."""
        import sympy  # type: ignore[import-untyped]

        values = {name: tensors[p].shape[d] for name, (p, d) in self.slots.items()}
        for name, value in values.items():
            if value < 2:
                return f"{self.names[name]} is {value}: sizes 0 and 1 are specialised"
        traits = self._traits_failure(tensors)
        if traits:
            return traits
        for source, tensor, meta in zip(self.sources, tensors, self.metas, strict=True):
            shape = concretize(tuple(meta.shape), values)
            if tuple(tensor.shape) != shape:
                return self._shape_failure(source, tuple(tensor.shape), tuple(meta.shape), shape)
            strides = concretize(tuple(meta.strides), values)
            if tuple(tensor.stride()) != strides:
                return f"{source}.stride() is {list(tensor.stride())}, expected {list(strides)}"
        for expr in self.exprs:
            if any(s.name not in values for s in expr.free_symbols):
                return f"{self._named(expr)} reads a size of an input with no tensor guard"
            free = {s: sympy.Integer(values[s.name]) for s in expr.free_symbols}
            if not bool(expr.xreplace(free)):
                sizes = ", ".join(
                    f"{self.names[s.name]} = {values[s.name]}"
                    for s in sorted(expr.free_symbols, key=str)
                )
                return f"size relation {self._named(expr)} is false for {sizes}"
        return ""

    def _shape_failure(
        self,
        source: str,
        actual: tuple[int, ...],
        symbolic: tuple[Any, ...],
        expected: tuple[int, ...],
    ) -> str:
        """Why ``source``'s sizes ``actual`` are not ``expected`` (its meta's ``symbolic``
        sizes at this call's values): a symbolic size that differs is one the trace made
        equal to another input's (the ShapeEnv replaced one symbol by the other), so the
        relation is named with both sizes, not this input's expected sizes alone."""
        if len(actual) == len(symbolic):
            for dim, (size, meta_size, value) in enumerate(
                zip(actual, symbolic, expected, strict=True)
            ):
                if size != value and is_symbolic(meta_size):
                    this, other = readable_source(f"{source}.size()[{dim}]"), self._named(meta_size)
                    return (
                        f"size relation {this} == {other} is false for "
                        f"{this} = {size}, {other} = {value}"
                    )
        return f"{source}.size() is {list(actual)}, expected {list(expected)}"

    def _traits_failure(self, tensors: Sequence[torch.Tensor]) -> str:
        """Why ``tensors`` fail on what their own guards check (exact type, dtype,
        device, ``requires_grad``, lazy bits); '' when they pass."""
        for source, tensor, meta in zip(self.sources, tensors, self.metas, strict=True):
            if type(tensor) not in TENSOR_TYPES:  # a subclass would run the plain trace
                return f"{source} is a {type(tensor).__name__}, not a plain tensor"
            mismatch = TensorTraits.of(meta).mismatch(source, tensor)
            if mismatch:
                return mismatch
        return ""

    def _named(self, expr: Any) -> str:
        text = str(expr)
        for name in sorted(self.names, key=len, reverse=True):
            text = text.replace(name, self.names[name])
        return text

    def description(self) -> str:
        """The checked conditions, each symbol named by the dimension it stands for."""
        dims = dict.fromkeys(self.names.values())  # a retraced frame names a dim twice
        symbols = ", ".join(f"{dim} >= 2" for dim in dims)
        relations = "; ".join(dict.fromkeys(self.sizes.describe_guards()))
        return f"symbolic sizes: {symbols}" + (f"; relations: {relations}" if relations else "")


def _without_pinned(exprs: Sequence[Any], values: Mapping[str, int]) -> tuple[Any, ...]:
    """``exprs`` with the symbols of ``values`` replaced by their values, less those that
    become true (what the exact guards of the inputs the trace made static imply)."""
    if not values:
        return tuple(exprs)
    import sympy

    kept = []
    for expr in exprs:
        pinned = {s: sympy.Integer(values[s.name]) for s in expr.free_symbols if s.name in values}
        expr = expr.xreplace(pinned) if pinned else expr
        if expr is not sympy.true:
            kept.append(expr)
    return tuple(kept)


def _plain_sizes(meta: TensorMeta) -> TensorMeta:
    """``meta`` with each size and stride a plain ``int`` (none of them is symbolic)."""
    if all(type(value) is int for value in (*meta.shape, *meta.strides)):
        return meta
    shape = tuple(size_or_int(size) for size in meta.shape)
    return attrs.evolve(meta, shape=shape, strides=tuple(map(size_or_int, meta.strides)))


def size_guards(guards: Sequence[Guard], sizes: SymbolicSizes) -> tuple[Guard, ...]:
    """``guards`` of a trace under ``sizes`` for a graph with symbolic sizes: a symbolic
    tensor guard checks all but its sizes and strides (a :class:`TensorTraits`); one more guard checks every symbolic input
    with a :class:`SizeCheck`: its layout key looked up in :attr:`SizeCheck.known`
    inline, :meth:`SizeCheck.decide` called for a layout not known to pass."""
    kept: list[Guard] = []
    sources: list[str] = []
    metas: list[TensorMeta] = []
    pinned: dict[str, TensorMeta] = {}
    read_cells: dict[str, types.CellType] = {}  # the cells the symbolic sources read
    for guard in guards:
        meta = guard.expected
        symbolic = isinstance(meta, TensorMeta) and (
            has_symbols(tuple(meta.shape)) or has_symbols(tuple(meta.strides))
        )
        if guard.kind is GuardKind.TENSOR_MATCH and symbolic:
            traits = TensorTraits.of(meta)
            kept.append(attrs.evolve(guard, expected=traits))
            sources.append(guard.source)
            read_cells.update(guard.cells)
            metas.append(meta)
        else:
            if guard.kind is GuardKind.TENSOR_MATCH and isinstance(meta, TensorMeta):
                # an input the trace made static: its sizes may be SymInts of known
                # value, which compare with a call's ints through sympy (the decode
                # step's guard: 65 us a call, not 4); as ints
                meta = _plain_sizes(meta)
                guard = attrs.evolve(guard, expected=meta)
                pinned[guard.source] = meta
            kept.append(guard)
    check = SizeCheck(sources, metas, sizes, pinned)
    name = f"__torchstrata_sizes_{id(check):x}__"
    lookup = f"__torchstrata_known_{id(check):x}__"
    # the key built and looked up inline; only a layout not known to pass calls decide()
    source = (
        f"{lookup}.cell_contents({check.key_expression(sources)}) is True"
        f" or {name}.cell_contents.decide({', '.join(sources)})"
    )
    cells = (
        (name, types.CellType(check)),
        (lookup, types.CellType(check.known.get)),
        *read_cells.items(),
    )
    kept.append(Guard(GuardKind.CONSTANT_MATCH, source, True, check.description(), cells=cells))
    return tuple(kept)
