"""The guard of a graph with symbolic sizes: one check of every symbolic input's sizes
and strides, each symbol at least 2, and the size relations the trace relied on
(decision 0200). Shared by the runtime's symbolic entries and capture's segments after a
graph break (decision 0206)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core.meta import TensorMeta
from torchstrata.core.results import Guard, GuardKind
from torchstrata.core.symbolic import SymbolicSizes, concretize, has_symbols

#: layouts a :class:`SizeCheck` remembers its answer for (then it starts over)
_MAX_KNOWN = 4096


def _layout_key(metas: Sequence[TensorMeta]) -> Any:
    """A function of one tensor per meta giving one flat tuple of everything
    :meth:`SizeCheck.failure` reads (generated: a loop and a tuple per tensor cost as
    much again on a tiny call). The device of a tensor expected on the CPU as ``is_cpu``
    (every other device fails alike); of one expected elsewhere as the device itself, so
    that a tensor on ``cuda:1`` is never taken for the ``cuda:0`` one remembered."""
    names = [f"t{i}" for i in range(len(metas))]
    items = "".join(
        f"{t}.shape, {t}.stride(), {t}.dtype, "
        f"{t}.{'is_cpu' if meta.device.type == 'cpu' else 'device'}, {t}.requires_grad, "
        f"{t}.is_neg(), {t}.is_conj(), "
        for t, meta in zip(names, metas, strict=True)
    )
    return eval(f"lambda {', '.join(names)}: ({items})")


class SizeCheck:
    """The guard of a symbolic entry: the inputs' dtypes, devices, static sizes and
    strides, each symbol at least 2, and the size relations the trace relied on.
    Results are remembered per layout of the inputs (one generated flat key)."""

    def __init__(
        self, sources: Sequence[str], metas: Sequence[TensorMeta], sizes: SymbolicSizes
    ) -> None:
        self.metas = tuple(metas)
        self.sizes = sizes
        self.exprs = sizes.guard_exprs()
        # symbol -> (tensor position, dim) it was made for: every symbol, also those the
        # ShapeEnv replaced by an equal one since (their guards still name them)
        self.slots: dict[str, tuple[int, int]] = {
            b.name: (list(sources).index(b.source), b.dim)
            for b in sizes.bindings
            if b.source in sources
        }
        self.names = {b.name: f"{b.source}.size()[{b.dim}]" for b in sizes.bindings}
        self.sources = tuple(sources)
        #: why the last call that failed it did ('' when it held)
        self.last_failure = ""
        self._known: dict[Any, str] = {}
        self._key = _layout_key(self.metas)

    def __call__(self, *tensors: Any) -> bool:
        try:
            key = self._key(*tensors)
        except (AttributeError, TypeError):
            self.last_failure = "an input is not a tensor"
            return False
        failure = self._known.get(key)
        if failure is None:
            if len(self._known) >= _MAX_KNOWN:  # a cache growing by one row per call
                self._known.clear()
            failure = self._known[key] = self.failure(tensors)
        if failure:
            self.last_failure = failure
            return False
        return True

    def failure(self, tensors: Sequence[torch.Tensor]) -> str:
        """Why ``tensors`` fail the check, each symbol named by its dimension (the
        condition and the sizes of this call); '' when they pass."""
        import sympy  # type: ignore[import-untyped]

        values = {name: tensors[p].shape[d] for name, (p, d) in self.slots.items()}
        for name, value in values.items():
            if value < 2:
                return f"{self.names[name]} is {value}: sizes 0 and 1 are specialised"
        for source, tensor, meta in zip(self.sources, tensors, self.metas, strict=True):
            for what, got, want in (
                ("dtype", tensor.dtype, meta.dtype),
                ("device", tensor.device, meta.device),
                ("requires_grad", tensor.requires_grad, meta.requires_grad),
                ("is_neg()", tensor.is_neg(), False),  # kernels read lazy bits raw
                ("is_conj()", tensor.is_conj(), False),
            ):
                if got != want:
                    return f"{source}.{what} is {got}, expected {want}"
            shape = concretize(tuple(meta.shape), values)
            if tuple(tensor.shape) != shape:
                return f"{source}.size() is {list(tensor.shape)}, expected {list(shape)}"
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


def size_guards(guards: Sequence[Guard], sizes: SymbolicSizes) -> tuple[Guard, ...]:
    """``guards`` of a trace under ``sizes`` for a graph with symbolic sizes: a symbolic
    tensor guard checks only the type; one more guard runs :class:`SizeCheck` over every
    symbolic input."""
    kept: list[Guard] = []
    sources: list[str] = []
    metas: list[TensorMeta] = []
    for guard in guards:
        meta = guard.expected
        symbolic = isinstance(meta, TensorMeta) and (
            has_symbols(tuple(meta.shape)) or has_symbols(tuple(meta.strides))
        )
        if guard.kind is GuardKind.TENSOR_MATCH and symbolic:
            kept.append(Guard(GuardKind.TENSOR_MATCH, guard.source, None, guard.description))
            sources.append(guard.source)
            metas.append(meta)
        else:
            kept.append(guard)
    check = SizeCheck(sources, metas, sizes)
    name = f"__torchstrata_sizes_{id(check):x}__"
    cell = types.CellType(check)
    kept.append(
        Guard(
            GuardKind.CONSTANT_MATCH,
            f"{name}.cell_contents({', '.join(sources)})",
            True,
            check.description(),
            cells=((name, cell),),
        )
    )
    return tuple(kept)
