"""Whether a C++ kernel's loop runs in parallel, decided when the kernel is called.

A loop runs as an OpenMP ``parallel for`` when its kernel covers at least
:data:`~torchstrata.inductor.codegen.cpp.exprs.PARALLEL_THRESHOLD` elements (decision 0293).
Where the loop's trip count is a size argument (``rows``), that depends on the size: a
source deciding it would be two sources over a range of sizes (decision 0201). The source
holds both loops instead, under ``if (<elements> >= threshold)`` (decision 0355): the same
text serves every size, and each side is the loop that a source deciding it would have
had. OpenMP's own ``if(...)`` clause was measured and not taken: a region of one thread
still enters the runtime (0.3-0.5 us a call, +10-70% on a kernel of a few rows).
"""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.inductor.codegen.cpp import exprs


def parallel_condition(count: str, work: str | int) -> str:
    """The C++ condition under which a loop of ``count`` items (a size argument's name) of
    ``work`` elements each (a literal or a size argument's name) runs in parallel: more
    than one item and at least ``PARALLEL_THRESHOLD`` elements in all."""
    threshold = exprs.PARALLEL_THRESHOLD
    if isinstance(work, int):
        if work >= threshold:
            return f"{count} > 1"
        if work == 1:
            return f"{count} >= {threshold}"
        return f"{count} * {work} >= {threshold}"
    return f"{count} > 1 && {count} * {work} >= {threshold}"


def branch(condition: str, then: Sequence[str], otherwise: Sequence[str]) -> list[str]:
    """``then`` where ``condition`` holds, else ``otherwise``: ``if (...) {...} else {...}``."""
    return [
        f"if ({condition}) {{",
        *("  " + line for line in then),
        "} else {",
        *("  " + line for line in otherwise),
        "}",
    ]
