"""Value expressions: what a kernel computes for one element, as a hashable tree.

Expressions are frozen and hash by structure, so equal subexpressions are the same
key and each backend emits them once (common-subexpression elimination for free).
``dtype`` is always the dtype of the value in the graph (``float16`` stays ``float16``);
backends pick the compute type (``float32`` for 16-bit floats).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import attrs
import torch

from torchstrata.core import exact_key, sizes_symbolic
from torchstrata.inductor.ir.indexing import Index


@attrs.frozen(cache_hash=True)
class Load:
    """Element ``index`` (an element offset from the buffer's first element) of a buffer."""

    buffer: str
    index: Index
    dtype: torch.dtype


@attrs.frozen(cache_hash=True)
class IndirectLoad:
    """Element ``index + stride * indirect`` of a buffer: a load at a data-dependent offset.

    ``indirect`` is an integer-valued expression (a gathered position along a dim of
    ``size`` elements and stride ``stride``); ``index`` is the offset of the rest of the
    coordinates. Backends never read outside ``0 <= indirect < size``: there the value is
    NaN on Triton, so a float ``dtype`` is required (``prims.gather`` lowers to this only
    for floats); the C++ backend also raises ``IndexError`` after the call (``cpp_checks.py``).
    """

    buffer: str
    index: Index
    indirect: Expr
    stride: int
    size: int
    dtype: torch.dtype


@attrs.frozen(cache_hash=True)
class Constant:
    """A scalar constant of ``dtype`` (constants are equal only when exactly the same)."""

    value: int | float | bool = attrs.field(eq=exact_key)
    dtype: torch.dtype


@attrs.frozen(cache_hash=True)
class IndexValue:
    """An index expression used as a value (``prims.iota``)."""

    index: Index
    dtype: torch.dtype


@attrs.frozen(cache_hash=True)
class Op:
    """An elementwise prim applied to ``args``; ``convert_element_type`` casts to ``dtype``."""

    name: str
    args: tuple[Expr, ...]
    dtype: torch.dtype


@attrs.frozen(cache_hash=True)
class ReduceRef:
    """The result of the reduction ``name`` for the current row of a fused kernel."""

    name: str
    dtype: torch.dtype


Expr = Load | IndirectLoad | Constant | IndexValue | Op | ReduceRef

#: Value dtypes both backends compute in float32 (16-bit floats are widened).
FLOAT32_COMPUTED = frozenset({torch.float32, torch.float16, torch.bfloat16})


def children(expr: Expr) -> tuple[Expr, ...]:
    """Direct operands of an expression (an indirect load's operand is its position)."""
    if isinstance(expr, Op):
        return expr.args
    if isinstance(expr, IndirectLoad):
        return (expr.indirect,)
    return ()


#: How many expressions' walks (and their variables, reductions and buffers) are kept:
#: the backends and the scheduler walk the same member expressions of a kernel again and
#: again (bounds, checks, divisions, columns), and expressions are immutable.
WALK_MEMO_SIZE = 8192


def walk(expr: Expr) -> Iterator[Expr]:
    """Every distinct subexpression, operands before users."""
    return iter(subexpressions(expr))


def subexpressions(expr: Expr) -> tuple[Expr, ...]:
    """:func:`walk` of ``expr`` as a tuple (kept for the latest expressions walked)."""
    return _subexpressions(expr, sizes_symbolic())


@functools.lru_cache(maxsize=WALK_MEMO_SIZE)
def _subexpressions(expr: Expr, symbolic: bool) -> tuple[Expr, ...]:
    return tuple(_walk(expr))


def _walk(expr: Expr) -> Iterator[Expr]:
    seen: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if node in seen:
            continue
        if expanded:
            seen.add(node)
            yield node
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children(node)) if child not in seen)


def variables(expr: Expr) -> frozenset[str]:
    """Loop variables an expression depends on."""
    return _variables(expr, sizes_symbolic())


@functools.lru_cache(maxsize=WALK_MEMO_SIZE)
def _variables(expr: Expr, symbolic: bool) -> frozenset[str]:
    names: set[str] = set()
    for node in walk(expr):
        if isinstance(node, Load | IndirectLoad | IndexValue):
            names |= node.index.variables()
    return frozenset(names)


def reductions_used(expr: Expr) -> frozenset[str]:
    """Names of the fused reductions an expression reads."""
    return _reductions_used(expr, sizes_symbolic())


@functools.lru_cache(maxsize=WALK_MEMO_SIZE)
def _reductions_used(expr: Expr, symbolic: bool) -> frozenset[str]:
    return frozenset(node.name for node in walk(expr) if isinstance(node, ReduceRef))


def buffers_loaded(expr: Expr) -> frozenset[str]:
    """Names of the buffers an expression loads from."""
    return _buffers_loaded(expr, sizes_symbolic())


@functools.lru_cache(maxsize=WALK_MEMO_SIZE)
def _buffers_loaded(expr: Expr, symbolic: bool) -> frozenset[str]:
    return frozenset(node.buffer for node in walk(expr) if isinstance(node, Load | IndirectLoad))


def map_indices(
    expr: Expr,
    index: Callable[[Index], Index],
    memo: dict[Expr, Expr],
    op: Callable[[Op], Expr] = lambda rebuilt: rebuilt,
) -> Expr:
    """``expr`` with every index rewritten by ``index``, each rebuilt ``Op`` passed through
    ``op`` (a folding step, say). ``memo`` holds expressions already rewritten (shared
    subexpressions are rewritten once) and may be seeded with replacements."""
    found = memo.get(expr)
    if found is not None:
        return found
    result: Expr = expr
    if isinstance(expr, Load):
        result = Load(expr.buffer, index(expr.index), expr.dtype)
    elif isinstance(expr, IndirectLoad):
        indirect = map_indices(expr.indirect, index, memo, op)
        result = attrs.evolve(expr, index=index(expr.index), indirect=indirect)
    elif isinstance(expr, IndexValue):
        result = IndexValue(index(expr.index), expr.dtype)
    elif isinstance(expr, Op):
        args = tuple(map_indices(arg, index, memo, op) for arg in expr.args)
        result = op(Op(expr.name, args, expr.dtype))
    memo[expr] = result
    return result


def map_ops(expr: Expr, op: Callable[[Op], Expr], memo: dict[Expr, Expr]) -> Expr:
    """``expr`` with each ``Op``, rebuilt bottom-up, passed through ``op`` (indices kept);
    ``memo`` as for :func:`map_indices`."""
    return map_indices(expr, _same_index, memo, op)


def _same_index(index: Index) -> Index:
    return index
