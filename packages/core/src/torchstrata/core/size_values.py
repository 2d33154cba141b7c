"""Sizes that a stage reads without specialising on them (issue 33, decision 0381).

A :class:`SizeValue` is a size of a graph lowered once for many sizes: a sympy expression
over the entry's size symbols (``s0``...) and its value in the call being lowered (its
hint). It is deliberately not an ``int``: C code reads an ``int`` subclass without
calling any of its methods, so a decision made that way would go unseen (decision
0380). Every read of a :class:`SizeValue` goes through one of its methods:

- **Arithmetic** (``+ - * // %`` with ints or sizes) gives another :class:`SizeValue`.
- **Decisions** (``< <= > >= == !=`` against a number or another size, ``bool``)
  evaluate on the hints and record ``(condition, outcome)`` in the lowering's
  :class:`SizeGuards`: the lowering is valid for every size where each recorded
  condition has its recorded outcome. A condition that holds for every size (sympy
  decides it from the symbols being integers >= 2) records nothing.
- **Equality between sizes** goes by the expression first: two sizes of one lowering
  with the same expression are equal with no guard (memo keys, names matched by
  size); other pairs are decisions as above. Sizes of two lowerings are never equal,
  and after its lowering (:meth:`SizeGuards.close`) a size equals only itself. The hash
  is the expression's: a lookup of a size among ints misses and records nothing, so a
  site that looks sizes up among ints must be right at every size on a miss (the
  ported ones print the expression); that is not checked (decision 0381).
- **Printing** (``str``, ``repr``) gives the expression's source text where it is a sum of
  products of symbols and integers (``s0 + 1``, ``2*s0``): what a generated launcher
  or kernel that binds the symbols prints. Floor division, modulo, ``Max``/``Min``
  print with the printer of the language being generated (``core.size_printer``;
  ``repr`` always Python's), and are a refused read where none is active (0407).
- **Reading its value** (an equality with a number that holds, over one symbol:
  ``n == 17``; ``int``, ``__index__``, ``float``, ``format`` with a number
  spec, printing any other expression where no printer spells it) raises :class:`SizeRead` and marks the
  lowering refused (:attr:`SizeGuards.refused`), even where the caller catches the
  error. Chosen over an equality guard: a site that reads the value is a site not
  ported yet, and the runtime lowers that size as before (per size) instead of
  keeping a lowering that serves one size.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import numbers
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core.concretizer import Concretizer
from torchstrata.core.graph import Graph
from torchstrata.core.size_conditions import conditions_check as conditions_check
from torchstrata.core.size_floats import size_float
from torchstrata.core.size_forms import simplified_sizes
from torchstrata.core.size_source import UnprintableSize, active_printer, python_source
from torchstrata.core.symbolic_graphs import concretize_graph


@functools.cache
def _sympy() -> Any:
    """sympy, imported on first use: a CPU inference compile that never lowers a
    symbolic entry does not pay its import (0.2-0.7 s of a cold compile)."""
    import sympy  # type: ignore[import-untyped]

    return sympy


def sizes_symbolic() -> bool:
    """Whether a symbolic lowering is in progress (:meth:`SizeGuards.active`): a memo
    that outlives lowerings keys its entries by this too, so that a lowering on
    ``SizeValue`` sizes never meets the entries of one on ints, whose keys compare equal
    to its sizes only at one size (the comparison would record that size as a guard)."""
    return _ACTIVE.get() is not None


#: the guards of the symbolic lowering in progress (:meth:`SizeGuards.active`), else None
_ACTIVE: contextvars.ContextVar[SizeGuards | None] = contextvars.ContextVar(
    "torchstrata_size_guards", default=None
)


def active_symbols() -> tuple[SizeValue, ...]:
    """The sizes of the symbols of the symbolic lowering in progress, by name (empty
    outside one): generated code that prints sizes as expressions over them takes each
    as an argument its launcher passes."""
    guards = _ACTIVE.get()
    if guards is None:
        return ()
    return tuple(guards.symbol(name) for name in sorted(guards.hints))


class SizeRead(TypeError):
    """A stage read the value of a :class:`SizeValue` (a site not ported to symbolic
    sizes): the symbolic lowering is refused, the size lowers on its own."""


class SizeGuards:
    """The conditions one symbolic lowering relied on, and the reads that refuse it.

    :param hints: the sizes of the call being lowered (symbol name -> int).
    """

    def __init__(self, hints: Mapping[str, int]) -> None:
        self.hints = dict(hints)
        #: sympy booleans that held at :attr:`hints` and must hold at a size the
        #: lowering serves, in the order they were decided
        self.conditions: list[Any] = []
        self._seen: set[Any] = set()
        #: ``"file:line: what"`` of each value read (a non-empty list refuses the lowering)
        self.refused: list[str] = []
        #: set by :meth:`close` when the lowering is over
        self.closed = False
        #: ``(relation, left, right) -> outcome`` of each decision taken (recorded once)
        self.decided: dict[tuple[Any, Any, Any], bool] = {}
        self._symbols = {
            name: _sympy().Symbol(name, integer=True, positive=True) for name in self.hints
        }

    def symbol(self, name: str) -> SizeValue:
        """The size that the symbol ``name`` stands for."""
        return SizeValue(self._symbols[name], self.hints[name], self)

    def of(self, expr: Any) -> SizeValue | int:
        """A size for the sympy expression ``expr`` over this lowering's symbols (its
        symbols are renamed to ours by name); an int where it has no symbol."""
        free = getattr(expr, "free_symbols", ())
        if not free:
            return int(expr)
        expr = expr.xreplace({s: self._symbols[s.name] for s in free})
        # ``Mod(1, s0)`` is 1 at every size (each is at least 2): kept, it prints into
        # kernels and splits lowerings on conditions that say less (decision 0480)
        expr = simplified_sizes(expr, _always)
        if not expr.free_symbols:
            return int(expr)
        return SizeValue(expr, _evaluate(expr, self.hints), self)

    def record(self, condition: Any, outcome: bool) -> None:
        """Record that ``condition`` (a sympy relational over the symbols) had
        ``outcome`` here."""
        fact = _as_range(condition if outcome else _sympy().Not(condition))
        fact = _decided(fact)
        if fact is _sympy().true:
            return
        if fact is _sympy().false:  # cannot be: it held at the hints
            raise AssertionError(f"{condition} recorded as {outcome} but never holds")
        if (
            isinstance(fact, _sympy().Eq)
            and len(fact.free_symbols) == 1
            and _pins(fact, self.hints)
        ):
            # pins its symbol to a few values: a read of the size's value, refused as
            # ``int()`` is (a lowering for one size is the per-size path's, made slower);
            # recorded too: the failure is these sizes' own (``SizeVariants`` tries the
            # sizes that do not meet it again)
            self.conditions.append(fact)
            raise self.refuse(f"{fact} (a decision that holds at one size)")
        if fact not in self._seen:
            self._seen.add(fact)
            self.conditions.append(fact)

    def refuse(self, what: str) -> SizeRead:
        """Mark the lowering refused by a value read (``what``, with the reading
        line) and return the error to raise."""
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back  # the reading line: the first frame outside this module
        site = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        self.refused.append(f"{site}: {what}")
        return SizeRead(f"{site}: {what} (a size read as a number)")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Within the block, :func:`sizes_symbolic` is True and :func:`active_symbols`
        gives this lowering's symbols."""
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)

    def close(self) -> None:
        """End the lowering: from now on each of its sizes equals only itself. A memo
        that outlives the lowering (an ``lru_cache`` keyed by indices) then never gives
        another lowering, whose sizes are ints or sizes of its own, a result made from
        these sizes: an int key with the same hash compares unequal."""
        self.closed = True

    def holds(self, values: Mapping[str, int]) -> bool:
        """Whether every recorded condition holds for the sizes ``values``."""
        return violated(self.conditions, values) is None


def violated(conditions: Any, values: Mapping[str, int]) -> Any:
    """The first of ``conditions`` (sympy booleans) that ``values`` make false; None
    when each holds."""
    for condition in conditions:
        if not bool(_substituted(condition, values)):
            return condition
    return None


def _substituted(expr: Any, values: Mapping[str, int]) -> Any:
    return expr.xreplace({s: _sympy().Integer(values[s.name]) for s in expr.free_symbols})


def _evaluate(expr: Any, values: Mapping[str, int]) -> int:
    return int(_substituted(expr, values))


def _floor_division(a: Any, b: Any) -> Any:
    return simplified_sizes(_sympy().floor(a / b), _always)


def _modulo(a: Any, b: Any) -> Any:
    return simplified_sizes(_sympy().Mod(a, b), _always)


def _always(fact: Any) -> bool:
    """Whether ``fact`` holds at every size (:func:`_decided`)."""
    return _decided(fact) is _sympy().true


def _decided(fact: Any) -> Any:
    """``fact`` (a sympy relational) as decided for every size: ``sympy.true`` or
    ``sympy.false`` where the symbols' being sizes (integers >= 2, as every symbolic size
    is: decision 0200) decides it, else ``fact``. Memoised (facts repeat)."""
    decided = _DECIDED.get(fact)
    if decided is None:
        decided = _DECIDED[fact] = _decide_fact(fact)
    return decided


_DECIDED: dict[Any, Any] = {}


#: relation -> (the sign tests that make it always true, always false), each a sympy
#: assumption of the difference ``lhs - rhs``
_SIGNS = {
    "<": ("is_negative", "is_nonnegative"),
    "<=": ("is_nonpositive", "is_positive"),
    ">": ("is_positive", "is_nonpositive"),
    ">=": ("is_nonnegative", "is_negative"),
    "==": ("is_zero", "is_nonzero"),
    "!=": ("is_nonzero", "is_zero"),
}


def _decide_fact(fact: Any) -> Any:
    if isinstance(fact, _sympy().logic.boolalg.BooleanAtom) or not isinstance(
        fact, _sympy().core.relational.Relational
    ):
        return fact
    tests = _SIGNS.get(fact.rel_op)
    if tests is None:
        return fact
    difference = (fact.lhs - fact.rhs).xreplace(
        {s: _SHIFTED[s.name] + 2 for s in fact.free_symbols if s.name in _names(fact)}
    )
    difference = _sympy().expand(difference)
    signs = _polynomial_signs(difference)
    for test, decided in zip(tests, (_sympy().true, _sympy().false), strict=True):
        holds = signs.get(test) if signs is not None else getattr(difference, test)
        if holds:
            return decided
    return fact


def _polynomial_signs(difference: Any) -> dict[str, bool] | None:
    """The sign tests of ``difference``, a polynomial in non-negative symbols, decided
    from its coefficients (all of one sign: its constant bounds it); None where it is
    not such a polynomial (sympy's assumptions decide then, slower)."""
    coefficients = difference.as_coefficients_dict()
    constant = int(coefficients.get(_sympy().Integer(1), 0))
    others = []
    for monomial, coefficient in coefficients.items():
        if monomial == 1:
            continue
        factors = monomial.args if monomial.is_Mul else (monomial,)
        if not all(
            f.is_Symbol or (f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and f.exp > 0)
            for f in factors
        ):
            return None
        others.append(coefficient)
    low = constant if all(c >= 0 for c in others) else None  # at least this
    high = constant if all(c <= 0 for c in others) else None  # at most this
    return {
        "is_positive": low is not None and low > 0,
        "is_nonnegative": low is not None and low >= 0,
        "is_negative": high is not None and high < 0,
        "is_nonpositive": high is not None and high <= 0,
        "is_zero": not others and constant == 0,
        "is_nonzero": (low is not None and low > 0) or (high is not None and high < 0),
    }


#: a shift that keeps a size's residue modulo each small modulus: 2**10 * 3**4 * 5**2 * 7 * 11 * 13
_FAR = 2_075_673_600


def _pins(fact: Any, hints: Mapping[str, int]) -> bool:
    """Whether ``fact``, an equality over one symbol that holds at ``hints``, holds at a
    few sizes only: it is no divisibility test and fails far from the hint (the hint plus
    :data:`_FAR`). ``Eq(s0, 17)`` and ``Eq(s0//2, 1)`` pin; ``Eq(Max(1, s0//3), s0//3)``
    (``s0 >= 3``: a contiguous stride) and ``Eq(3*(s0//3), s0)`` do not, and are recorded
    (decision 0406). A heuristic of cost only: any recorded condition is sound."""
    if _periodic(fact):
        return False
    (symbol,) = fact.free_symbols
    return not bool(_substituted(fact, {symbol.name: hints[symbol.name] + _FAR}))


def _as_range(fact: Any) -> Any:
    """``Eq(Max(c, e), c)`` (a contiguous stride ``Max(1, s0//3)`` compared with 1) as the
    range ``e <= c`` it means, ``Ne`` as ``e > c``: sizes up to a bound meet it, no pinned
    size (decision 0437); any other ``fact`` as it is."""
    sympy = _sympy()
    if not isinstance(fact, sympy.Eq | sympy.Ne):
        return fact
    for side, other in ((fact.lhs, fact.rhs), (fact.rhs, fact.lhs)):
        # sympy's Max or torch's (``torch.utils._sympy.functions.Max``)
        is_max = type(side).__name__ == "Max" and len(side.args) == 2
        if is_max and other.is_Integer and other in side.args:
            (rest,) = (arg for arg in side.args if arg != other)
            return sympy.Le(rest, other) if isinstance(fact, sympy.Eq) else sympy.Gt(rest, other)
    return fact


def _periodic(fact: Any) -> bool:
    """Whether ``fact``'s symbols occur only inside ``Mod`` by a constant: then it
    holds at every size of a residue class (``Eq(Mod(s0, 8), 0)``: a divisibility test,
    true at infinitely many sizes) and pins no size."""
    difference = fact.lhs - fact.rhs
    mods = [m for m in difference.atoms(_sympy().Mod) if not m.args[1].free_symbols]
    if not mods:
        return False
    return not difference.xreplace({m: _sympy().Integer(0) for m in mods}).free_symbols


def _names(fact: Any) -> set[str]:
    for symbol in fact.free_symbols:
        if symbol.name not in _SHIFTED:
            _SHIFTED[symbol.name] = _sympy().Symbol(
                f"_{symbol.name}", integer=True, nonnegative=True
            )
    return {s.name for s in fact.free_symbols}


#: symbol name -> a non-negative integer symbol t (the size is t + 2)
_SHIFTED: dict[str, Any] = {}


def _is_plain(expr: Any) -> bool:
    """Whether ``expr`` prints as the same integer arithmetic in Python and C: a sum of
    products of symbols, non-negative powers of them and integers."""
    if expr.is_Symbol or expr.is_Integer:
        return True
    if expr.is_Add or expr.is_Mul:
        return all(_is_plain(arg) for arg in expr.args)
    if expr.is_Pow:
        return expr.exp.is_Integer and expr.exp >= 0 and _is_plain(expr.base)
    return False


def _expr_and_hint(value: Any, guards: SizeGuards) -> tuple[Any, int] | None:
    if type(value) is SizeValue:
        if value.guards is not guards:
            raise guards.refuse("a size of another lowering")
        return value.expr, value.hint
    if type(value) is int or type(value) is bool:
        return _sympy().Integer(value), int(value)
    return None


def same_size(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` (ints, or sizes of one lowering) are the same at every size,
    deciding nothing: ints by value, sizes by expression, an int and a size never (the int
    is the size's value at this call at most). For a site matching sizes where "not the
    same" is right at every size (a fusion not made, a walk order not taken): comparing by
    value would record the coincidence ``Eq(s0, 64)`` and pin the lowering (0406)."""
    if type(a) is SizeValue or type(b) is SizeValue:
        return type(a) is type(b) and a.guards is b.guards and a.expr == b.expr
    return bool(a == b)


def same_sizes(left: Sequence[Any], right: Sequence[Any]) -> bool:
    """:func:`same_size` of each pair of two shapes (of one length)."""
    return len(left) == len(right) and all(map(same_size, left, right))


#: set within :func:`compared_by_expression`
_BY_EXPRESSION: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "torchstrata_sizes_by_expression", default=False
)


@contextlib.contextmanager
def compared_by_expression() -> Iterator[None]:
    """Within the block, ``==`` of a size is :func:`same_size` (deciding nothing), also
    inside objects compared field by field: for a site asking whether two index trees
    are one tree, where "not the same" is right at every size. A size of a roll's offset
    equal to another at one size only (``Eq(s0 - 2, 0)``) would pin the lowering (0480)."""
    token = _BY_EXPRESSION.set(True)
    try:
        yield
    finally:
        _BY_EXPRESSION.reset(token)


class SizeValue:
    """One size of a symbolic lowering: ``expr`` (sympy, over the symbols of
    ``guards``) and ``hint`` (its value in the call being lowered). See the module
    docstring for what each operation does."""

    __slots__ = ("expr", "guards", "hint")

    #: what ``core.symbolic.size_or_int`` keeps as it is (no import of this module there)
    is_size_value = True

    def __init__(self, expr: Any, hint: int, guards: SizeGuards) -> None:
        self.expr = expr
        self.hint = hint
        self.guards = guards

    # arithmetic: sizes in, sizes out ------------------------------------------------
    def _arith(self, other: Any, expr_op: Any, int_op: Any, reflected: bool = False) -> Any:
        pair = _expr_and_hint(other, self.guards)
        if pair is None:
            return NotImplemented
        a, b = (pair, (self.expr, self.hint)) if reflected else ((self.expr, self.hint), pair)
        expr = expr_op(a[0], b[0])
        if not getattr(expr, "free_symbols", None):
            return int(expr)
        return SizeValue(expr, int_op(a[1], b[1]), self.guards)

    def __add__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a + b, lambda a, b: a + b)

    def __radd__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a + b, lambda a, b: a + b, True)

    def __sub__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a - b, lambda a, b: a - b)

    def __rsub__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a - b, lambda a, b: a - b, True)

    def __mul__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a * b, lambda a, b: a * b)

    def __rmul__(self, other: Any) -> Any:
        return self._arith(other, lambda a, b: a * b, lambda a, b: a * b, True)

    # a quotient or modulo that every size decides is its value (``1 % s0`` is 1: 0480)
    def __floordiv__(self, other: Any) -> Any:
        return self._arith(other, _floor_division, lambda a, b: a // b)

    def __rfloordiv__(self, other: Any) -> Any:
        return self._arith(other, _floor_division, lambda a, b: a // b, True)

    def __mod__(self, other: Any) -> Any:
        return self._arith(other, _modulo, lambda a, b: a % b)

    def __rmod__(self, other: Any) -> Any:
        return self._arith(other, _modulo, lambda a, b: a % b, True)

    def __neg__(self) -> Any:
        return SizeValue(-self.expr, -self.hint, self.guards)

    def __pos__(self) -> SizeValue:
        return self

    # decisions: evaluated on the hints, recorded as guards ------------------------
    def _decide(self, other: Any, relation: Any, outcome_of: Any) -> Any:
        pair = _expr_and_hint(other, self.guards)
        if pair is None:
            return NotImplemented
        key = (relation, self.expr, pair[0])
        outcome = self.guards.decided.get(key)
        if outcome is None:  # once per decision: building a sympy relation is costly
            outcome = self.guards.decided[key] = bool(outcome_of(self.hint, pair[1]))
            self.guards.record(relation(self.expr, pair[0], evaluate=False), outcome)
        return outcome

    def __lt__(self, other: Any) -> Any:
        return self._decide(other, _sympy().Lt, lambda a, b: a < b)

    def __le__(self, other: Any) -> Any:
        return self._decide(other, _sympy().Le, lambda a, b: a <= b)

    def __gt__(self, other: Any) -> Any:
        return self._decide(other, _sympy().Gt, lambda a, b: a > b)

    def __ge__(self, other: Any) -> Any:
        return self._decide(other, _sympy().Ge, lambda a, b: a >= b)

    def __eq__(self, other: object) -> Any:
        if self.guards.closed:
            return other is self
        if type(other) is SizeValue and other.guards is self.guards and other.expr == self.expr:
            return True  # the same size at every size: no guard
        if (type(other) is SizeValue and other.guards is not self.guards) or _BY_EXPRESSION.get():
            return False  # sizes of two lowerings, or another expression: not the same
        if isinstance(other, numbers.Number) and type(other) not in (int, bool):
            # a float, a numpy or torch scalar: Python would answer False unseen
            raise self.guards.refuse(f"{self.expr} == {other!r}")
        return self._decide(other, _sympy().Eq, lambda a, b: a == b)

    def __ne__(self, other: object) -> Any:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        # the expression's: sizes with one expression are one key. A lookup among ints
        # misses (no int has this hash), which records nothing: such a site must take
        # a path that is right at every size when it misses (decision 0381)
        return hash(self.expr)

    def __bool__(self) -> bool:
        return bool(self._decide(0, _sympy().Ne, lambda a, b: a != b))

    # reads of the value: refused ----------------------------------------------------
    def __index__(self) -> int:
        raise self.guards.refuse(f"int({self.expr})")

    def __int__(self) -> int:
        raise self.guards.refuse(f"int({self.expr})")

    def __float__(self) -> float:
        raise self.guards.refuse(f"float({self.expr})")

    def __format__(self, spec: str) -> str:
        if spec:
            raise self.guards.refuse(f"format({self.expr}, {spec!r})")
        return str(self)

    def __str__(self) -> str:
        if not _is_plain(self.expr):
            # floor division, modulo...: spelled per language, where a printer is active
            # (decision 0407); elsewhere a read of the value
            return self._printed(active_printer())
        text = _source_printer().doprint(self.expr)
        # in parentheses, but for one symbol: generated code prints a size as an operand
        # (a coefficient ``(s0 + 3)*x0``, not ``s0 + 3*x0``; a divisor ``xi / (2*s0)``)
        return text if self.expr.is_Symbol or self.expr.is_Pow else f"({text})"

    def __repr__(self) -> str:
        # as ``str``, and Python's source where that is no sum of products: a tuple of
        # sizes printed into a launcher is the source of their expressions (the launcher
        # binds the symbols), and memo keys made of an index's repr hold any size
        return str(self) if _is_plain(self.expr) else self._printed(python_source)

    def _printed(self, printer: Callable[[Any], str] | None) -> str:
        if printer is None:
            raise self.guards.refuse(f"printing {self.expr}")
        try:
            return printer(self.expr)
        except UnprintableSize:
            raise self.guards.refuse(f"printing {self.expr}") from None


@functools.cache
def _source_printer() -> Any:
    """A printer of a plain expression (:func:`_is_plain`) as source that Python and C
    read alike: a power as a product (``s0*s0``, not ``s0**2``). Made on first use, as
    sympy is imported (:func:`_sympy`)."""

    class SourcePrinter(_sympy().printing.str.StrPrinter):  # type: ignore[misc]
        def _print_Pow(self, expr: Any, rational: bool = False) -> str:
            if expr.exp.is_Integer and expr.exp >= 1:
                return "(" + "*".join([self.parenthesize(expr.base, 100)] * int(expr.exp)) + ")"
            return str(super()._print_Pow(expr, rational))

    return SourcePrinter()


class _Sized(Concretizer):
    """Each ``SymInt`` of a graph made the :class:`SizeValue` of ``guards``."""

    def __init__(self, guards: SizeGuards) -> None:
        super().__init__(guards.hints)
        self.guards = guards

    def scalar(self, value: Any) -> Any:
        expr = value.node.expr
        if isinstance(value, torch.SymFloat) and type(expr).__name__ == "ToFloat":
            # a size as a float (a mean's count ``ToFloat(s0)``): the size, which a float
            # constant holds exactly (below 2**53) and a kernel converts (decision 0409)
            expr = expr.args[0]
        elif isinstance(value, torch.SymFloat):
            # ``sqrt(ToFloat(s0))``: computed from the symbols by generated code (0500)
            return size_float(expr, self.guards)
        elif not isinstance(value, torch.SymInt):
            raise self.guards.refuse(f"a symbolic {type(value).__name__} in the graph")
        return self.guards.of(expr)


def sized_graph(graph: Graph, guards: SizeGuards) -> Graph:
    """``graph`` (symbolic sizes, ``SymInt``) with each size a :class:`SizeValue` of
    ``guards`` (their hints the call's sizes): the graph a symbolic lowering takes."""
    return concretize_graph(graph, guards.hints, _Sized(guards))
