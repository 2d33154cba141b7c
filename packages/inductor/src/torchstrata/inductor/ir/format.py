"""A readable printout of the loop IR: :func:`format_kernel` shows one fused kernel.

The printout is for people (debugging a schedule without reading generated source);
no code parses it. Each distinct subexpression is printed once, as a numbered value
(``%3 = exp(%2)``), in the order a backend would compute it::

    kernel kernel0 rows [8] x reduce [64]
      args: buf_x f32, buf_softmax f32
      reduce softmax_amax = amax f32 of %0
        %0 = load buf_x[r0 + 64*x0] f32
      reduce softmax_sum = sum f32 of %2
        %1 = sub(%0, softmax_amax) f32
        %2 = exp(%1) f32
        %3 = div(%2, softmax_sum) f32
      store buf_softmax[r0 + 64*x0] f32 = %3
"""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.core import dtype_short_name
from torchstrata.inductor.ir.exprs import (
    Constant,
    Expr,
    IndexValue,
    IndirectLoad,
    Load,
    Op,
    ReduceRef,
    children,
)
from torchstrata.inductor.ir.indexing import Atom, FloorDiv, Index, Mod, Var
from torchstrata.inductor.ir.kernel import Kernel, ReductionSpec, Store


def format_index(index: Index) -> str:
    """``index`` as an affine expression, e.g. ``(r0 // 4) + 64*x0 + 3``."""
    parts = []
    for atom, coeff in index.terms:
        text = _format_atom(atom)
        parts.append(text if coeff == 1 else f"{coeff}*{text}")
    if index.const or not parts:
        parts.append(str(index.const))
    return " + ".join(parts)


def _format_atom(atom: Atom) -> str:
    if isinstance(atom, Var):
        return atom.name
    if isinstance(atom, FloorDiv):
        return f"({format_index(atom.base)} // {atom.divisor})"
    assert isinstance(atom, Mod)
    return f"({format_index(atom.base)} % {atom.modulus})"


class _Numbering:
    """Numbers each distinct expression once, operands first."""

    def __init__(self) -> None:
        self.names: dict[Expr, str] = {}
        self.lines: list[str] = []

    def name(self, expr: Expr, indent: str) -> str:
        """The number of ``expr``, printing it (and its operands) on first use."""
        if isinstance(expr, Constant):
            return repr(expr.value)
        if isinstance(expr, ReduceRef):
            return expr.name
        if expr in self.names:
            return self.names[expr]
        operands = [self.name(child, indent) for child in children(expr)]
        name = f"%{len(self.names)}"
        self.names[expr] = name
        dtype = dtype_short_name(expr.dtype)
        if isinstance(expr, Load):
            text = f"load {expr.buffer}[{format_index(expr.index)}]"
        elif isinstance(expr, IndirectLoad):
            text = (
                f"load {expr.buffer}[{format_index(expr.index)} + {expr.stride}*{operands[0]}]"
                f" (0 <= {operands[0]} < {expr.size})"
            )
        elif isinstance(expr, IndexValue):
            text = f"index {format_index(expr.index)}"
        else:
            assert isinstance(expr, Op)
            text = f"{expr.name}({', '.join(operands)})"
        self.lines.append(f"{indent}{name} = {text} {dtype}")
        return name


def _reductions(
    numbering: _Numbering, title: str, reductions: Sequence[ReductionSpec], indent: str
) -> list[str]:
    lines = []
    for spec in reductions:
        numbering.lines = []
        value = numbering.name(spec.body, indent + "  ")
        lines.append(
            f"{indent}{title} {spec.name} = {spec.kind} {dtype_short_name(spec.dtype)} of {value}"
        )
        lines += numbering.lines
    return lines


def _stores(numbering: _Numbering, title: str, stores: Sequence[Store], indent: str) -> list[str]:
    lines = []
    for store in stores:
        numbering.lines = []
        value = numbering.name(store.value, indent + "  ")
        lines += numbering.lines
        lines.append(
            f"{indent}{title} {store.buffer}[{format_index(store.index)}] "
            f"{dtype_short_name(store.dtype)} = {value}"
        )
    return lines


def format_kernel(kernel: Kernel) -> str:
    """A readable printout of ``kernel``: domain, arguments, reductions and stores."""
    reduce = f" x reduce {list(kernel.red_shape)}" if kernel.red_shape else ""
    lines = [f"kernel {kernel.name} rows {list(kernel.row_shape)}{reduce}"]
    args = ", ".join(f"{arg.name} {dtype_short_name(arg.dtype)}" for arg in kernel.args)
    lines.append(f"  args: {args}")
    if kernel.parts:
        lines.append(f"  horizontal: {', '.join(part.name for part in kernel.parts)}")
    numbering = _Numbering()
    lines += _reductions(numbering, "reduce", kernel.reductions, "  ")
    lines += _stores(numbering, "store row", kernel.row_stores, "  ")
    lines += _stores(numbering, "store", kernel.full_stores, "  ")
    if kernel.tail is not None:
        lines.append("  tail (last program):")
        lines += _reductions(numbering, "reduce rows", kernel.tail.reductions, "    ")
        lines += _stores(numbering, "store", kernel.tail.stores, "    ")
    if kernel.partials is not None:
        partials = kernel.partials
        lines.append(f"  partials ({partials.programs} programs of {partials.chunk} rows):")
        lines += _reductions(numbering, "reduce chunk", partials.reductions, "    ")
        lines += _stores(numbering, "store", partials.stores, "    ")
    return "\n".join(lines) + "\n"
