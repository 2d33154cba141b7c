"""The text form of a symbolic lowering's sizes (issue 33, decision 0494).

The prims graph of a lowering made for many sizes holds
:class:`~torchstrata.core.size_values.SizeValue` sizes. Their ``str``/``repr`` are for
generated code: printing a floor division or a modulo there, with no printer active, is
a read of the size's value that refuses the lowering (decision 0407). A listing (explain,
logs, the debug directory) must not change what the lowering decides, so it prints a
size from its sympy expression (``value.expr``), calling no method of the size, and in
the syntax the text form already gives ``SymInt`` sizes (decision 0211): the expression
as the ShapeEnv would print it once the parser has read it back (``s53 + 3``,
``(s53//2)``, ``Mod(s53, 3)``, ``PythonMod(1 - s53, s53)``, ``Max(0, s53 - 3)``), so a
listing parses back to the same text. Strides are compared with the contiguous ones by
their text, deciding nothing.

This module imports nothing of ``size_values`` (which imports the graph): a size is
known by its class attribute ``is_size_value``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from torchstrata.core.meta import contiguous_strides
from torchstrata.core.size_source import rounded_quotient


def is_size_value(value: Any) -> bool:
    """Whether ``value`` is a symbolic lowering's size (a ``SizeValue``)."""
    return getattr(type(value), "is_size_value", False) is True


@functools.cache
def _functions() -> Any:
    import sympy  # type: ignore[import-untyped]
    from torch.utils._sympy import functions

    return sympy, functions


def _as_shape_env_expr(expr: Any) -> Any:
    """``expr`` with sympy's ``floor``/``ceiling`` of a quotient and ``Mod`` spelled as
    the ShapeEnv's ``FloorDiv`` and ``Mod``/``PythonMod`` (what ``//`` and ``%`` of
    ``SymInt`` sizes make): the printed text then reads back to the same expression."""
    sympy, functions = _functions()
    if not expr.args or expr.is_Symbol or expr.is_Number:
        return expr
    args = [_as_shape_env_expr(arg) for arg in expr.args]
    rounded = rounded_quotient(expr, tuple(args))
    if rounded is not None:
        numerator, denominator, ceiling = rounded
        if not ceiling:
            return functions.FloorDiv(numerator, denominator)
        return -functions.FloorDiv(-numerator, denominator)
    if isinstance(expr, sympy.Mod):
        # the ShapeEnv's ``%`` is ``Mod`` where it knows the operands' signs, else
        # ``PythonMod`` (Python's sign rule)
        if args[0].is_nonnegative and args[1].is_positive:
            return sympy.Mod(*args)
        return functions.PythonMod(*args)
    return expr.func(*args)


def size_expression_text(expr: Any) -> str:
    """The text form of a size expression (sympy, over ``s``-named symbols)."""
    if isinstance(expr, int):
        return str(expr)
    return str(_as_shape_env_expr(expr))


def size_value_text(value: Any) -> str:
    """The text form of one ``SizeValue``, read from its expression: no size read."""
    return size_expression_text(value.expr)


def _expr(size: Any) -> Any:
    return size.expr if is_size_value(size) else size


def holds_size_values(sizes: Sequence[Any]) -> bool:
    """Whether any of ``sizes`` is a ``SizeValue``."""
    return any(type(size) is not int and is_size_value(size) for size in sizes)


def _text(size: Any) -> str:
    if type(size) is int:
        return str(size)
    if is_size_value(size):
        return size_value_text(size)
    return str(size)  # a SymInt: its expression as its ShapeEnv prints it


def layout_texts(shape: Sequence[Any], strides: Sequence[Any]) -> tuple[str, str | None]:
    """``s53, 3`` for ``shape`` (ints, ``SymInt`` or ``SizeValue`` sizes) and the
    strides' text, or None where they are the contiguous ones. Compared as text, never
    as sizes: a ``SizeValue`` comparison records a condition of its lowering, a
    ``SymInt`` one a guard of its ShapeEnv (a symbolic decomposition's conditions), and a
    stride the ShapeEnv made (its ``Max``, ``FloorDiv``) matches one spelled with
    sympy's."""
    if holds_size_values(shape) or holds_size_values(strides):
        sympy, _ = _functions()
        exprs = [_expr(size) for size in shape]
        strides_of = contiguous_strides(exprs, lambda size: sympy.Max(size, 1))
        contiguous = [size_expression_text(stride) for stride in strides_of]
    else:
        contiguous = [_text(stride) for stride in contiguous_strides(shape)]
    stride_texts = [_text(stride) for stride in strides]
    shape_text = ", ".join(_text(size) for size in shape)
    if stride_texts == contiguous:
        return shape_text, None
    return shape_text, ", ".join(stride_texts)
