"""Unique node names (``GraphBuilder._unique_name``): the smallest free ``<base>_<n>``, as a
search from 1 every time would give, whatever names were taken before."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import GraphBuilder, Level


def _reference(requests: list[str]) -> list[str]:
    taken: set[str] = set()
    out = []
    for base in requests:
        name = base
        if name in taken:
            counter = 1
            while f"{base}_{counter}" in taken:
                counter += 1
            name = f"{base}_{counter}"
        taken.add(name)
        out.append(name)
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["add", "add_1", "add_2", "add_1_1", "mm", "mm_3", "x"]), max_size=40)
)
def test_names_are_the_smallest_free_ones(requests):
    builder = GraphBuilder(Level.PRIMS)
    assert [builder._unique_name(base) for base in requests] == _reference(requests)
