"""The lines of a Triton source that its exact number of rows decides, and the source
without them: what a tuned launch configuration is keyed by."""

from __future__ import annotations

import math
import re

from torchstrata.core import SizeValue
from torchstrata.inductor.codegen.triton.printer import RED_PARAM, ROWS_PARAM


def divisor_hint(name: str, value: int | SizeValue) -> list[str]:
    """The line telling Triton that the size argument ``name`` (``value`` here) is a
    multiple of its largest power-of-two divisor below 16, as the literal did (Triton
    specialises an argument divisible by 16 itself); none for an odd value. The same value
    (every size this source is generated for is a multiple), spelled so that Triton's
    analysis sees the divisor (``tl.multiple_of`` of a scalar argument did not keep it).
    A symbolic size (decision 0400) tells what divides it at every size: the integer
    content of its expression (``24*s0``: 8), no condition recorded."""
    if type(value) is SizeValue:
        value = abs(int(value.expr.as_content_primitive()[0]))
    divisor = math.gcd(value, 16)
    if divisor in (1, 16):
        return []
    return [f"{name} = ({name} // {divisor}) * {divisor}"]


def length_divisor_hint(length: int | SizeValue) -> list[str]:
    """:func:`rows_divisor_hint` for a reduction's row length ``rnumel``: a row stride
    spelled as it (``rnumel*x0 + r0``) keeps the divisibility a literal stride told Triton
    (aligned vector loads of each row)."""
    return divisor_hint(RED_PARAM, length)


def rows_divisor_hint(rows: int | SizeValue) -> list[str]:
    """What a literal number of rows told Triton about the row mask: its largest power-of-two
    divisor below 16 (Triton specialises an argument divisible by 16 itself). Without it, a
    pointwise kernel over 1000 elements lost its 128-bit loads (sm_90 PTX: ``v4`` loads
    became scalar ones). Sources differ by that divisor only (five kinds of sizes)."""
    return divisor_hint(ROWS_PARAM, rows)


#: The lines whose text depends on the exact number of rows, not on the kernel: the
#: divisor hint and the masks of ``even_rows`` (as the masked form).
_ROW_COUNT_LINES = (
    (re.compile(rf"^ *{ROWS_PARAM} = \({ROWS_PARAM} // \d+\) \* \d+\n", re.M), ""),
    (re.compile(rf"^ *{RED_PARAM} = \({RED_PARAM} // \d+\) \* \d+\n", re.M), ""),
    (
        re.compile(r"xmask = tl\.full\(\[XBLOCK(, 1)?\], 1, tl\.int1\)"),
        f"xmask = xindex < {ROWS_PARAM}",
    ),
    (
        re.compile(r"rmask = tl\.full\(\[1, RBLOCK\], 1, tl\.int1\)"),
        f"rmask = rindex < {RED_PARAM}",
    ),
)


def rows_generic(source: str) -> str:
    """``source`` (from :func:`generate_triton`) without what its exact number of rows
    decided (:func:`rows_divisor_hint`, ``even_rows``, and a row length's ``even_row``
    masks): the same text for every row
    count of a kernel, what its tuned launch configuration is keyed by (with the rows'
    bucket, :func:`~torchstrata.inductor.codegen.triton.tuning.tuning_key`)."""
    for pattern, replacement in _ROW_COUNT_LINES:
        source = pattern.sub(replacement, source)
    return source
