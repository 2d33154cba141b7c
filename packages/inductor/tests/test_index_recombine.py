"""Recombining an index's digits (decision 0521): a kernel's per-dim variables replaced by
their definitions over the flat index, then quotients and remainders folded back."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import SizeGuards
from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var, row_major_strides
from torchstrata.inductor.ir.recombine import (
    div_mod_count,
    recombine,
    row_major_digits,
    substitute,
)


def _value(index: Index, env: dict[str, int]) -> int:
    return eval(index.render(lambda name: f"env[{name!r}]"), {"env": env})


def _digits(shape: list[int], flat: str = "xi") -> tuple[list[Var], dict[str, Index]]:
    """The per-dim variables of ``shape`` and their definitions over the flat index, as
    the Triton generator derives them (``x0 = xi // s0``, ``x_d = (xi // s_d) % n_d``)."""
    variables = [Var(f"x{d}", size) for d, size in enumerate(shape)]
    position = Index.of(Var(flat, math.prod(shape)))
    mapping = {}
    for dim, (var, stride) in enumerate(zip(variables, row_major_strides(shape), strict=True)):
        value = position.floordiv(stride)
        mapping[var.name] = value.mod(var.size) if dim else value
    return variables, mapping


def _position_values(shape: list[int], flat: int) -> dict[str, int]:
    values = {"xi": flat}
    for dim, stride in enumerate(row_major_strides(shape)):
        value = flat // stride
        values[f"x{dim}"] = value % shape[dim] if dim else value
    return values


def test_a_contiguous_access_is_the_flat_index_and_a_suffix_one_remainder():
    # RoPE's q [2, 4, 256, 128] and its cos [256, 128]
    shape = [2, 4, 256, 128]
    x0, x1, x2, x3 = (Index.of(v) for v in _digits(shape)[0])
    mapping = _digits(shape)[1]
    flat = Index.of(Var("xi", math.prod(shape)))
    q = x0 * 131072 + x1 * 32768 + x2 * 128 + x3 + 64
    assert substitute(q, mapping) == flat + 64
    assert substitute(x2 * 128 + x3, mapping) == Index.of(Mod(flat, 32768))
    assert div_mod_count(substitute(x2 * 128 + x3, mapping)) == 1


def test_digits_of_a_digit_merge_with_the_quotient_above_them():
    # (x1, x2) of [2, 4, 256, 128] read at 256*x1 + x2: one remainder of xi // 128
    shape = [2, 4, 256, 128]
    _, mapping = _digits(shape)
    x1, x2 = Index.of(Var("x1", 4)), Index.of(Var("x2", 256))
    flat = Index.of(Var("xi", math.prod(shape)))
    assert substitute(x1 * 256 + x2, mapping) == flat.floordiv(128).mod(1024)


def test_a_remainder_of_a_remainder_and_a_quotient_of_a_quotient_fold():
    b = Index.of(Var("b", 1000))
    assert recombine(Index.of(Mod(Index.of(Mod(b, 96)), 32))) == b.mod(32)
    assert recombine(Index.of(FloorDiv(Index.of(FloorDiv(b, 4)), 5))) == b.floordiv(20)
    # a remainder 32 does not divide stays
    kept = Index.of(Mod(Index.of(Mod(b, 96)), 64))
    assert recombine(kept) == kept


def test_digits_with_other_coefficients_stay():
    # a strided slice reads 256*x1 + x2 of rows of 128: no digits merge
    shape = [4, 128]
    x1 = Index.of(Var("x0", 4))
    x2 = Index.of(Var("x1", 128))
    _, mapping = _digits(shape)
    flat = Index.of(Var("xi", 512))
    assert substitute(x1 * 256 + x2, mapping) == flat.floordiv(128) * 256 + flat.mod(128)


_SIZES = st.integers(1, 7)


@st.composite
def _accesses(draw: st.DrawFn) -> tuple[list[int], Index]:
    """A shape and an index over its variables: contiguous, a suffix (broadcast), a
    permutation, a slice (an offset, a wider row), with some atoms of a reshape."""
    shape = draw(st.lists(_SIZES, min_size=1, max_size=4))
    variables = [Index.of(v) for v in _digits(shape)[0]]
    kind = draw(st.sampled_from(["contiguous", "suffix", "permuted", "wide", "reshape"]))
    sizes = list(shape)
    order = list(range(len(shape)))
    if kind == "suffix":
        order = order[draw(st.integers(0, len(order) - 1)) :]
    elif kind == "permuted":
        order = draw(st.permutations(order))
    elif kind == "wide":
        last = draw(st.integers(0, len(sizes) - 1))
        sizes[last] += draw(st.integers(1, 5))
    strides = row_major_strides([sizes[d] for d in order])
    index = Index.constant(draw(st.integers(0, 9)))
    for dim, stride in zip(order, strides, strict=True):
        index = index + variables[dim] * stride
    if kind == "reshape":
        divisor = draw(st.integers(1, 12))
        index = index.floordiv(divisor) * draw(st.integers(1, 3)) + index.mod(divisor)
    return shape, index


@settings(max_examples=400, deadline=None)
@given(access=_accesses())
def test_the_flat_form_is_the_same_integer_at_every_position(access):
    shape, index = access
    variables, _ = _digits(shape)
    digits = row_major_digits(Var("xi", math.prod(shape)), shape)
    flat = substitute(index, {var.name: d for var, d in zip(variables, digits, strict=True)})
    assert flat.variables() <= {"xi"}
    for position in range(math.prod(shape)):
        values = _position_values(shape, position)
        assert _value(flat, values) == _value(index, values)


@settings(max_examples=300, deadline=None)
@given(
    base=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    divisors=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    coeff=st.integers(1, 4),
)
def test_recombined_atoms_keep_their_value(base, divisors, coeff):
    # nested quotients and remainders of one sum, and its digits in every pairing
    names = [Var(f"v{i}", size + 1) for i, size in enumerate(base)]
    b = Index.constant(1)
    for i, var in enumerate(names):
        b = b + Index.of(var) * (i + 1)
    d, m, a, e = divisors
    index = (
        b.floordiv(d).mod(m) * (coeff * d)
        + b.mod(d) * coeff
        + b.mod(a * m).mod(m)
        + b.mod(a).mod(m) * 2
        + b.floordiv(e).floordiv(d)
        + b.floordiv(d * m) * (d * m)
    )
    recombined = recombine(index)
    assert div_mod_count(recombined) <= div_mod_count(index)
    for values in _grid([v.size for v in names]):
        env = {var.name: value for var, value in zip(names, values, strict=True)}
        assert _value(recombined, env) == _value(index, env)


def _grid(sizes: list[int]) -> list[tuple[int, ...]]:
    points: list[tuple[int, ...]] = [()]
    for size in sizes:
        points = [(*point, value) for point in points for value in range(size)]
    return points


def test_symbolic_rows_of_a_contiguous_access_are_the_flat_index_deciding_nothing():
    guards = SizeGuards({"s0": 6})
    rows = guards.symbol("s0")
    with guards.active():
        shape = [rows, 4, 128]
        variables = [Var(f"x{d}", size) for d, size in enumerate(shape)]
        flat = Index.of(Var("xi", rows * 512))
        mapping = {
            "x0": flat.floordiv(512),
            "x1": flat.floordiv(128).mod(4),
            "x2": flat.mod(128),
        }
        x0, x1, x2 = (Index.of(v) for v in variables)
        contiguous = substitute(x0 * 512 + x1 * 128 + x2, mapping)
        suffix = substitute(x1 * 128 + x2, mapping)
    assert contiguous == flat
    assert suffix == Index.of(Mod(flat, 512))
    assert guards.conditions == [] and not guards.refused


def test_a_symbolic_coefficient_equal_at_one_size_only_is_not_merged():
    # s0*x1 + x2 with x2 < 128: the digits merge only where s0 is 128, which is not
    # decided (it would pin the lowering to that size)
    guards = SizeGuards({"s0": 128})
    width = guards.symbol("s0")
    with guards.active():
        flat = Index.of(Var("xi", 512))
        mapping = {"x1": flat.floordiv(128).mod(4), "x2": flat.mod(128)}
        index = Index.of(Var("x1", 4)) * width + Index.of(Var("x2", 128))
        result = substitute(index, mapping)
    assert result == mapping["x1"] * width + mapping["x2"]
    assert guards.conditions == [] and not guards.refused


def test_symbolic_digits_are_atoms_as_written_deciding_no_row_count():
    # rows of s0 // 3 (one row at s0 = 3..5, more beyond): simplifying by ranges compared
    # ``4*floor(s0/3) - 1`` with 4, a guard splitting the lowering (decision 0480)
    for hint in (4, 7):
        guards = SizeGuards({"s0": hint})
        rows = guards.symbol("s0") // 3
        with guards.active():
            flat = Var("xi", rows * 4)
            digits = row_major_digits(flat, [rows, 4])
            x0, x1 = Index.of(Var("x0", rows)), Index.of(Var("x1", 4))
            mapping = {"x0": digits[0], "x1": digits[1]}
            contiguous = substitute(x0 * 4 + x1, mapping)
            column = substitute(x1, mapping)
        assert contiguous == Index.of(flat)
        assert column == Index.of(Mod(Index.of(flat), 4))
        # the one condition row-major strides record (``max(rows, 1)``), as derive_lines
        assert [str(c) for c in guards.conditions] == ["floor(s0/3) >= 1"]
        assert not guards.refused
