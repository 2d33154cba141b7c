"""``Prim``: one enum member per prim of the table, with its family."""

from __future__ import annotations

import pytest

from torchstrata.core import Prim, PrimFamily, all_prims, prim, prims_of


def test_every_prim_has_a_member_and_every_member_a_prim():
    assert {member.value for member in Prim} == {definition.name for definition in all_prims()}


def test_members_know_their_family_and_op():
    assert Prim.EXP.family is PrimFamily.UNARY
    assert Prim.of("prims.sum") is Prim.SUM and Prim.SUM.family is PrimFamily.REDUCTION
    assert Prim.GATHER.op == prim("gather") and str(Prim.GATHER) == "prims.gather"
    assert Prim.WHERE in prims_of(PrimFamily.TERNARY)
    assert set().union(*(prims_of(family) for family in PrimFamily)) == set(Prim)
    with pytest.raises(LookupError, match="no prim named 'rand_bits'"):
        Prim.of("rand_bits")
