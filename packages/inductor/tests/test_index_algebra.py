"""Index algebra: floor divisions and remainders of affine indices, simplified by ranges."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var


def _value(index: Index, env: dict[str, int]) -> int:
    return eval(index.render(lambda name: f"env[{name!r}]"), {"env": env})


def _atoms(index: Index) -> list[object]:
    found = []
    for atom, _ in index.terms:
        found.append(atom)
        if not isinstance(atom, Var):
            found += _atoms(atom.base)
    return found


def test_the_repeated_heads_of_a_cache_divide_by_the_head_count_only():
    # the GQA repeat of a KV cache: element (x1, x2, x3) of 4 heads x 2048 positions x 64
    # reads head x1 // 2 of the cache
    x1, x2, x3 = Var("x1", 4), Var("x2", 2048), Var("x3", 64)
    linear = Index.of(x1) * 131072 + Index.of(x2) * 64 + Index.of(x3)
    assert linear.floordiv(262144) == Index.of(x1).floordiv(2)
    assert linear.floordiv(262144) == Index.of(FloorDiv(Index.of(x1), 2))
    assert linear.mod(262144) == Index.of(Mod(Index.of(x1), 2)) * 131072 + Index.of(
        x2
    ) * 64 + Index.of(x3)


def test_a_remainder_that_can_reach_the_divisor_keeps_a_division():
    x1, x2 = Var("x1", 4), Var("x2", 3000)  # 64*x2 can exceed 131072: x1 does not split off
    linear = Index.of(x1) * 131072 + Index.of(x2) * 64
    # the common factor 64 still cancels: one division by 4096 of a smaller sum
    rest = Index.of(x1) * 2048 + Index.of(x2)
    assert linear.floordiv(262144) == Index.of(FloorDiv(rest, 4096))
    assert linear.mod(262144) == Index.of(Mod(rest, 4096)) * 64


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    coeffs=st.lists(st.integers(0, 64), min_size=3, max_size=3),
    const=st.integers(0, 50),
    divisor=st.integers(1, 96),
)
def test_division_and_remainder_agree_with_integers(sizes, coeffs, const, divisor):
    variables = [Var(f"x{i}", size) for i, size in enumerate(sizes)]
    index = Index.constant(const)
    for var, coeff in zip(variables, coeffs):
        index = index + Index.of(var) * coeff
    quotient, remainder = index.floordiv(divisor), index.mod(divisor)
    for values in itertools.product(*(range(v.size) for v in variables)):
        env = {v.name: value for v, value in zip(variables, values)}
        total = _value(index, env)
        assert _value(quotient, env) == total // divisor
        assert _value(remainder, env) == total % divisor
