"""The prims as an enum: :class:`Prim`, one member per primitive, with its family.

Code that dispatches on prims (the inductor's lowering table, a backend's printer) keys
on :class:`Prim` rather than on name strings, so a test can check that every prim is
handled: a prim added to :mod:`torchstrata.core.prims` without a member here fails
``tests/test_prim_enum.py``, and a member without a handler fails the stages' tests.
"""

from __future__ import annotations

import enum

from torchstrata.core.ops import OpRef, prim
from torchstrata.core.prims import PrimDef, PrimFamily, get_prim


class Prim(enum.Enum):
    """A primitive op; ``Prim.EXP.value == "exp"``, ``Prim("exp") is Prim.EXP``."""

    ABS = "abs"
    NEG = "neg"
    EXP = "exp"
    EXP2 = "exp2"
    EXPM1 = "expm1"
    LOG = "log"
    LOG2 = "log2"
    LOG1P = "log1p"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    TANH = "tanh"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    TRUNC = "trunc"
    SIGN = "sign"
    ISNAN = "isnan"
    ISINF = "isinf"
    BITWISE_NOT = "bitwise_not"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    REMAINDER = "remainder"
    FMOD = "fmod"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    ATAN2 = "atan2"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    SUM = "sum"
    PROD = "prod"
    AMAX = "amax"
    AMIN = "amin"
    WHERE = "where"
    CONVERT_ELEMENT_TYPE = "convert_element_type"
    BROADCAST_IN_DIM = "broadcast_in_dim"
    RESHAPE = "reshape"
    PERMUTE = "permute"
    SLICE = "slice"
    AS_STRIDED = "as_strided"
    FULL = "full"
    IOTA = "iota"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    CUMSUM = "cumsum"
    CAT = "cat"
    GATHER = "gather"
    SCATTER = "scatter"
    SCATTER_ADD = "scatter_add"
    RAND = "rand"

    @classmethod
    def of(cls, name: str) -> Prim:
        """The member for ``exp`` or ``prims.exp``; :class:`LookupError` for no prim."""
        try:
            return cls(name.removeprefix("prims."))
        except ValueError:
            raise LookupError(f"no prim named {name!r}") from None

    @property
    def definition(self) -> PrimDef:
        """The prim's schema, meta function and reference implementation."""
        return get_prim(self.value)

    @property
    def family(self) -> PrimFamily:
        """The family backends implement it with."""
        return self.definition.family

    @property
    def op(self) -> OpRef:
        """The op reference ``prims.<name>`` graphs hold."""
        return prim(self.value)

    def __str__(self) -> str:
        return f"prims.{self.value}"


def prims_of(family: PrimFamily) -> frozenset[Prim]:
    """Every prim of ``family``."""
    return frozenset(member for member in Prim if member.family is family)
