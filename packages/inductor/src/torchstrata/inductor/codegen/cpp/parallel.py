"""Whether a C++ kernel's loop runs in parallel, decided when the kernel is called.

A loop runs as an OpenMP ``parallel for`` when its kernel covers at least
:data:`~torchstrata.inductor.codegen.cpp.exprs.PARALLEL_THRESHOLD` elements (decision 0293).
Where the loop's trip count is a size argument (``rows``), that depends on the size: a
source deciding it would be two sources over a range of sizes (decision 0201). The source
holds both loops instead, under ``if (<elements> >= threshold)`` (decision 0355): the same
text serves every size, and each side is the loop that a source deciding it would have
had. A flat row loop is compiled once (decision 0359): it is a ``static`` function over a
range of rows (:func:`rows_function`), called over all rows, else from a parallel region
in which each thread takes one contiguous range, as ``schedule(static)`` splits them
(:func:`range_calls`). OpenMP's own ``if(...)`` clause was measured and not taken: a region of one thread
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


ROW_LO = "row_lo"
ROW_HI = "row_hi"

# The OpenMP runtime's thread queries (declared here: the prelude does not include omp.h).
OMP_DECLARATIONS = (
    'extern "C" int omp_get_num_threads();',
    'extern "C" int omp_get_thread_num();',
)


#: The name of a kernel's function over a range of rows: one name for every kernel (a
#: ``static`` function of the kernel's own translation unit), so that kernels equal but for
#: their names stay one source to build (the build's canonical text).
ROWS_FUNCTION = "ts_rows"


def rows_function(params: str, body: Sequence[str]) -> list[str]:
    """The ``static`` function of ``body`` (a loop from ``row_lo`` to ``row_hi``) taking the
    kernel's ``params`` and the range: ``noinline`` and ``noclone``, so that g++ compiles
    it once rather than once per call site (or per constant ``row_lo``)."""
    return [
        "static void __attribute__((noinline, noclone))",
        f"{ROWS_FUNCTION}({params}, const int64_t {ROW_LO}, const int64_t {ROW_HI}) {{",
        *("  " + line for line in body),
        "}",
    ]


def range_calls(args: Sequence[str], count: str, condition: str) -> list[str]:
    """Calls of the rows function over ``[0, count)``: split among the threads of a
    parallel region where ``condition`` holds (each thread one contiguous range, the
    first ``count % threads`` threads one row more: ``schedule(static)``'s split), else
    one call."""
    call = f"{ROWS_FUNCTION}({', '.join(args)}, "
    parallel = [
        "#pragma omp parallel",
        "{",
        "  const int64_t threads = omp_get_num_threads();",
        "  const int64_t thread = omp_get_thread_num();",
        f"  int64_t share = {count} / threads;",
        f"  int64_t extra = {count} % threads;",
        "  if (thread < extra) {",
        "    ++share;",
        "    extra = 0;",
        "  }",
        "  const int64_t lo = share * thread + extra;",
        f"  {call}lo, lo + share);",
        "}",
    ]
    return branch(condition, parallel, [f"{call}0, {count});"])
