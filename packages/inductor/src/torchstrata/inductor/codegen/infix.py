"""Binary prims that C++ and Triton both spell as the same infix operator."""

from __future__ import annotations

#: ``prims.<name>(a, b)`` -> a format string over the two operand expressions.
INFIX_BINARY: dict[str, str] = {
    "add": "{} + {}",
    "sub": "{} - {}",
    "mul": "{} * {}",
    "bitwise_and": "{} & {}",
    "bitwise_or": "{} | {}",
    "bitwise_xor": "{} ^ {}",
    "eq": "{} == {}",
    "ne": "{} != {}",
    "lt": "{} < {}",
    "le": "{} <= {}",
    "gt": "{} > {}",
    "ge": "{} >= {}",
}
