"""Ints computed in the trace from symbolic ints, handed back to Python (decision 0386).

A symbolic int (an int argument, an item of a container argument, a module attribute:
decisions 0330, 0365) is a ``SymInt`` in the trace, and so is what the trace computes
from it (``cfg["pos"] + 1``). Where such a value leaves the trace as a Python int (a
dict item or list item stored back, a value returned) it used to be specialised, an
equality guard that made every call a new entry. When its expression is arithmetic on
those symbols alone (``+``, ``*``, ``**`` by a constant, ``//``, ``%``), it is instead
computed at call time from the sources the symbols stand for, as eager computes it: the
call's own value, under the entry's guards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

#: sympy's ``FloorDiv`` and the modulo functions of torch's symbolic shapes, by name
#: (their module is torch-internal): written as Python's ``//`` and ``%``.
_BINARY = {"FloorDiv": "//", "PythonMod": "%", "Mod": "%"}


def int_expression(value: Any, symbols: Mapping[str, str]) -> str | None:
    """Python text computing the ``SymInt`` ``value`` from the texts of its symbols
    (``symbols``: a symbol's name -> the expression reading its int, ``(L['n'])``); None where
    ``value`` is not a ``SymInt`` or its expression has a symbol or function outside
    those (it is specialised then)."""
    if not isinstance(value, torch.SymInt):
        return None
    return _text(value.node.expr, symbols)


def _text(expr: Any, symbols: Mapping[str, str]) -> str | None:
    """(a sympy expression, read by its flags and function names: no sympy import)"""
    if expr.is_Integer:
        return f"({int(expr)})"
    if expr.is_Symbol:
        return symbols.get(expr.name)
    if expr.is_Pow:
        base, exponent = expr.args
        if not (exponent.is_Integer and int(exponent) >= 0):
            return None
        text = _text(base, symbols)
        return None if text is None else f"({text} ** {int(exponent)})"
    operator = " + " if expr.is_Add else " * " if expr.is_Mul else None
    if operator is None:
        operator = _BINARY.get(type(expr).__name__)
        if operator is None or len(expr.args) != 2:
            return None
        operator = f" {operator} "
    parts = [_text(arg, symbols) for arg in expr.args]
    if any(part is None for part in parts):
        return None
    return "(" + operator.join(parts) + ")"  # type: ignore[arg-type]
