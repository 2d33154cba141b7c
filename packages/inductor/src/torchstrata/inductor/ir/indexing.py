"""Index expressions: affine forms over loop variables, with floor-division and modulo atoms.

Every index that a kernel computes (which element of an input to load, where to store a
result) is an :class:`Index`: ``sum(coeff * atom) + const`` where an atom is a loop
variable, ``floor(index / d)`` or ``index % m``. Loop variables know their range, so
reshapes of contiguous dims simplify away (``(128*x0 + x1) // 128`` is ``x0``). All
values are non-negative, so C-style and floor division agree.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import attrs

from torchstrata.core import SizeValue, same_size, sizes_symbolic


@attrs.frozen(cache_hash=True)
class Var:
    """A loop variable ranging over ``[0, size)``."""

    name: str
    size: int


@attrs.frozen(cache_hash=True)
class FloorDiv:
    """``floor(base / divisor)`` for a non-negative base."""

    base: Index
    divisor: int


@attrs.frozen(cache_hash=True)
class Mod:
    """``base % modulus`` for a non-negative base."""

    base: Index
    modulus: int


Atom = Var | FloorDiv | Mod


def _atom_key(atom: Atom) -> str:
    return _atom_key_in(atom, sizes_symbolic())


@functools.lru_cache(maxsize=1 << 16)
def _atom_key_in(atom: Atom, symbolic: bool) -> str:
    # Cached: the scheduler builds the same indices for every fusion it tries, and the
    # repr of a nested atom is the costliest part of a sum.
    return repr(atom)


@attrs.frozen(cache_hash=True)
class Index:
    """``const + sum(coeff * atom)``, terms sorted so that equal indices compare equal."""

    terms: tuple[tuple[Atom, int], ...] = ()
    #: an int, or a symbolic size (``core.SizeValue``, decision 0381)
    const: int = 0

    # -- construction -----------------------------------------------------------------
    @staticmethod
    def constant(value: int | SizeValue) -> Index:
        """The constant index ``value``."""
        # a symbolic size is kept (decision 0381): typed as the int it stands for
        return Index((), value if type(value) is SizeValue else int(value))  # type: ignore[arg-type]

    @staticmethod
    def of(atom: Atom) -> Index:
        """The index ``atom``; a variable of size 1 is the constant 0. A variable of a
        symbolic size stays a variable, right at every size, 1 included (deciding
        ``size > 1`` would split a lowering at the sizes that make it 1, decision 0480)."""
        if isinstance(atom, Var) and type(atom.size) is not SizeValue and atom.size <= 1:
            return Index()
        return Index(((atom, 1),), 0)

    def __add__(self, other: Index | int) -> Index:
        if isinstance(other, int | SizeValue):
            return Index(self.terms, self.const + other)
        return _sum(self, other, sizes_symbolic())

    def _add(self, other: Index) -> Index:
        merged: dict[Atom, int] = dict(self.terms)
        for atom, coeff in other.terms:
            merged[atom] = merged.get(atom, 0) + coeff
        terms = tuple(
            sorted(((a, c) for a, c in merged.items() if c), key=lambda t: _atom_key(t[0]))
        )
        return Index(terms, self.const + other.const)

    def __mul__(self, factor: int) -> Index:
        if factor == 0:
            return Index()
        return Index(tuple((a, c * factor) for a, c in self.terms), self.const * factor)

    def floordiv(self, divisor: int) -> Index:
        """``floor(self / divisor)``, simplified using the ranges of the atoms."""
        if same_size(divisor, 1):  # by expression: a size 1 at this call divides (0406)
            return self
        return _floordiv(self, divisor, sizes_symbolic())

    def _floordiv(self, divisor: int) -> Index:
        quotient, rest = self._split(divisor)
        low, high = rest.bounds()
        if low >= 0 and high < divisor:
            return quotient
        factored = rest._factored(divisor)
        if factored is not None:  # rest = g*big + small, 0 <= small < g, g | divisor
            big, _, factor = factored
            return quotient + big.floordiv(divisor // factor)
        return quotient + Index.of(FloorDiv(rest, divisor))

    def mod(self, modulus: int) -> Index:
        """``self % modulus``, simplified using the ranges of the atoms."""
        if same_size(modulus, 1):
            return Index()
        return _mod(self, modulus, sizes_symbolic())

    def _mod(self, modulus: int) -> Index:
        _, rest = self._split(modulus)
        low, high = rest.bounds()
        if low >= 0 and high < modulus:
            return rest
        factored = rest._factored(modulus)
        if factored is not None:  # (g*big + small) % (g*k) == g*(big % k) + small
            big, small, factor = factored
            return big.mod(modulus // factor) * factor + small
        return Index.of(Mod(rest, modulus))

    def _split(self, factor: int) -> tuple[Index, Index]:
        """``(big, small)`` with ``self == factor*big + small``: ``small`` holds the terms
        whose coefficients ``factor`` does not divide and the constant's remainder."""
        big = Index.constant(self.const // factor)
        small = Index.constant(self.const % factor)
        for atom, coeff in self.terms:
            # by expression: a term a size divides at this call only stays small (0406)
            if same_size(coeff % factor, 0):
                big = big + Index(((atom, coeff // factor),), 0)
            else:
                small = small + Index(((atom, coeff),), 0)
        return big, small

    def _factored(self, divisor: int) -> tuple[Index, Index, int] | None:
        """``(big, small, g)`` with ``self == g*big + small``, ``1 < g < divisor``, ``g``
        dividing ``divisor`` and ``0 <= small < g``: the largest such ``g`` among the
        common factors of the terms' coefficients and ``divisor``, or None.

        Then ``self // divisor == big // (divisor/g)`` and ``self % divisor == g*(big %
        (divisor/g)) + small``: the parts of a reshape that a division cannot reach drop
        out (``(131072*x1 + 64*x2 + x3) // 262144`` is ``x1 // 2`` when ``64*x2 + x3 <
        131072``), instead of a division of the whole sum per element, which also keeps
        a C++ inner loop's loads contiguous."""
        if self.bounds()[0] < 0:
            return None
        factors = {_gcd(coeff, divisor) for _, coeff in self.terms}
        for factor in sorted(factors, reverse=True):
            if not 1 < factor < divisor:
                continue
            big, small = self._split(factor)
            low, high = small.bounds()
            if low >= 0 and high < factor:
                return big, small, factor
        return None

    # -- queries ----------------------------------------------------------------------
    def bounds(self) -> tuple[int, int]:
        """Inclusive lower and upper bounds of the value."""
        low = high = self.const
        for atom, coeff in self.terms:
            atom_low, atom_high = atom_bounds(atom)
            if coeff >= 0:
                low, high = low + coeff * atom_low, high + coeff * atom_high
            else:
                low, high = low + coeff * atom_high, high + coeff * atom_low
        return low, high

    def variables(self) -> frozenset[str]:
        """Names of the loop variables this index depends on."""
        names: set[str] = set()
        for atom, _ in self.terms:
            if isinstance(atom, Var):
                names.add(atom.name)
            else:
                names |= atom.base.variables()
        return frozenset(names)

    def render(
        self,
        var: Callable[[str], str],
        div: str = "//",
        number: Callable[[int], str] = str,
        divisor: Callable[[int, frozenset[str]], str] | None = None,
    ) -> str:
        """Source text: ``var(name)`` prints a variable, ``div`` is the division operator,
        ``number`` prints coefficients and constants, ``divisor(value, variables)`` divisors
        and moduli of an index over ``variables`` (literals when None)."""
        parts = []
        for atom, coeff in self.terms:
            text = render_atom(atom, var, div, number, divisor)
            parts.append(text if same_size(coeff, 1) else f"{number(coeff)}*{text}")
        # printing decides nothing: a symbolic constant prints even where 0 here (0406)
        if not same_size(self.const, 0) or not parts:
            parts.append(number(self.const))
        return " + ".join(parts)


def _gcd(a: int | SizeValue, b: int | SizeValue) -> int:
    """The greatest common divisor of two sizes; for a symbolic one (decision 0381), of
    the integer contents of the two expressions: an int that divides both at every
    size."""
    if type(a) is int and type(b) is int:
        return math.gcd(a, b)
    return math.gcd(_content(a), _content(b))


def _content(value: int | SizeValue) -> int:
    if type(value) is SizeValue:
        return abs(int(value.expr.as_content_primitive()[0]))
    return abs(int(value))


@functools.lru_cache(maxsize=1 << 16)
def _sum(left: Index, right: Index, symbolic: bool) -> Index:
    """``left + right``, memoised: the same sums recur for every fusion tried. Every
    memo here is keyed by ``symbolic`` too (``core.sizes_symbolic``, decision 0381)."""
    return left._add(right)


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _floordiv(index: Index, divisor: int, symbolic: bool) -> Index:
    """:meth:`Index.floordiv`, memoised: views and reshapes divide the same indices by the
    same strides for every fusion tried (the divisor's type is part of the key)."""
    return index._floordiv(divisor)


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _mod(index: Index, modulus: int, symbolic: bool) -> Index:
    """:meth:`Index.mod`, memoised (see :func:`_floordiv`)."""
    return index._mod(modulus)


def atom_bounds(atom: Atom) -> tuple[int, int]:
    """Inclusive bounds of one atom."""
    if isinstance(atom, Var):
        return 0, max(atom.size - 1, 0)
    low, high = atom.base.bounds()
    if isinstance(atom, FloorDiv):
        return low // atom.divisor, high // atom.divisor
    return (low, high) if low >= 0 and high < atom.modulus else (0, atom.modulus - 1)


def render_atom(
    atom: Atom,
    var: Callable[[str], str],
    div: str,
    number: Callable[[int], str] = str,
    divisor: Callable[[int, frozenset[str]], str] | None = None,
) -> str:
    """Source text of one atom (see :meth:`Index.render`)."""
    if isinstance(atom, Var):
        return var(atom.name)
    base = atom.base.render(var, div, number, divisor)
    value = atom.divisor if isinstance(atom, FloorDiv) else atom.modulus
    text = str(value) if divisor is None else divisor(value, atom.base.variables())
    return f"(({base}) {div} {text})" if isinstance(atom, FloorDiv) else f"(({base}) % {text})"


def fold_div_mod(index: Index) -> Index:
    """``index`` with ``k*d*(b // d) + k*(b % d)`` folded back into ``k*b`` (the identity
    ``b == d*(b // d) + b % d``), where an index was rebuilt from a quotient and a
    remainder (a row ``m`` seen as part ``m // C`` and row ``m % C`` of that part)."""
    coeffs = dict(index.terms)
    for atom, coeff in index.terms:
        if not isinstance(atom, Mod):
            continue
        quotient = FloorDiv(atom.base, atom.modulus)
        if coeffs.get(quotient) == coeff * atom.modulus:
            rest = Index.constant(index.const)
            for other, other_coeff in index.terms:
                if other not in (atom, quotient):
                    rest = rest + Index(((other, other_coeff),), 0)
            return fold_div_mod(rest + atom.base * coeff)
    return index


def linear_offset(index: Sequence[Index], strides: Sequence[int], offset: int = 0) -> Index:
    """``offset + sum(index[d] * strides[d])``: the element offset of a strided access."""
    return _linear_offset(tuple(index), tuple(strides), offset, sizes_symbolic())


@functools.lru_cache(maxsize=1 << 16)
def _linear_offset(
    index: tuple[Index, ...], strides: tuple[int, ...], offset: int, symbolic: bool
) -> Index:
    # Memoised: each candidate fusion rebuilds its members' loads at the same offsets.
    result = Index.constant(offset)
    for item, stride in zip(index, strides, strict=True):
        result = result + item * stride
    return result


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``shape`` (size-0 dims count as 1)."""
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def delinearize(linear: Index, shape: Sequence[int]) -> list[Index]:
    """The row-major multi-index of ``shape`` whose linear position is ``linear``."""
    strides = row_major_strides(shape)
    result = []
    for dim, (size, stride) in enumerate(zip(shape, strides, strict=True)):
        part = linear.floordiv(stride)
        result.append(part if dim == 0 else part.mod(size) if size > 1 else Index())
        if size <= 1:
            result[-1] = Index()
    return result
