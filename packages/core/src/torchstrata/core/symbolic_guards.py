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


class SizeCheck:
    """The guard of a symbolic entry: the inputs' dtypes, devices, static sizes and
    strides, each symbol at least 2, and the size relations the trace relied on.
    Results are remembered per layout of the inputs."""

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
        self._known: dict[Any, bool] = {}

    def __call__(self, *tensors: Any) -> bool:
        try:  # the device as is_cpu: symbolic entries are CPU-only (eligible())
            key = tuple(
                [
                    (
                        t.shape,
                        t.stride(),
                        t.dtype,
                        t.is_cpu,
                        t.requires_grad,
                        t.is_neg(),
                        t.is_conj(),
                    )
                    for t in tensors
                ]
            )
        except AttributeError:
            return False
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = self._check(tensors)
        return known

    def _check(self, tensors: Sequence[torch.Tensor]) -> bool:
        import sympy  # type: ignore[import-untyped]

        values = {name: tensors[p].shape[d] for name, (p, d) in self.slots.items()}
        if any(value < 2 for value in values.values()):
            return False
        for tensor, meta in zip(tensors, self.metas, strict=True):
            same = (tensor.dtype, tensor.device, tensor.requires_grad) == (
                meta.dtype,
                meta.device,
                meta.requires_grad,
            )
            if not same or tensor.is_neg() or tensor.is_conj():  # kernels read lazy bits raw
                return False
            if tuple(tensor.shape) != concretize(tuple(meta.shape), values):
                return False
            if tuple(tensor.stride()) != concretize(tuple(meta.strides), values):
                return False
        for expr in self.exprs:
            if any(s.name not in values for s in expr.free_symbols):
                return False  # a symbol of an input that has no tensor guard: never
            free = {s: sympy.Integer(values[s.name]) for s in expr.free_symbols}
            if not bool(expr.xreplace(free)):
                return False
        return True

    def description(self) -> str:
        """The checked conditions, each symbol named by the dimension it stands for."""
        symbols = ", ".join(f"{b.source}.size()[{b.dim}] >= 2" for b in self.sizes.bindings)
        relations = "; ".join(self.sizes.describe_guards())
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
