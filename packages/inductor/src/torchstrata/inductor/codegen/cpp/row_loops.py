"""The loops over a C++ row kernel's rows: one counter, or nested loops per outer
variable where a split's divisor is a size argument, each under an optional pragma."""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.inductor.codegen.cat_bounds import cat_names
from torchstrata.inductor.codegen.cpp.exprs import loop_header
from torchstrata.inductor.codegen.size_names import divisor
from torchstrata.inductor.ir.indexing import Var
from torchstrata.inductor.ir.kernel import Kernel

#: The parameter holding the outermost loop's trip count (see ``generate.outer_rows``).
ROWS_PARAM = "rows"


def nested_rows(kernel: Kernel, outer_vars: Sequence[Var]) -> bool:
    """Are ``kernel``'s rows walked by nested loops rather than one counter split by
    division? Where a split's divisor is a size argument (a cat's extent, decision 0285):
    a division by a run-time value per row cost the KV-cache append 5% of a decode step
    (by a literal it is a multiplication)."""
    if len(outer_vars) < 2 or not cat_names(kernel):
        return False
    return any(divisor(v.size, frozenset()) != str(v.size) for v in outer_vars[1:])


def row_loops(outer_vars: Sequence[Var], body: list[str], nested: bool, pragma: str) -> list[str]:
    """The loop (or nested loops) over the rows around ``body``, under ``pragma``."""
    if nested:
        return nested_row_loops(outer_vars, body, pragma)
    lines = [pragma] if pragma else []
    bound = ROWS_PARAM if outer_vars else 1
    lines.append(f"for (int64_t xi = 0; xi < {bound}; ++xi) {{")
    lines += ["  " + line for line in body]
    lines.append("}")
    return lines


def parallel_simd(lines: list[str]) -> list[str]:
    """A 1-D kernel's ``lines`` with its loop over ``rows`` a ``parallel for simd``."""
    out = list(lines)
    for position, line in enumerate(out[1:], start=1):
        if line.lstrip().startswith("for (") and f" < {ROWS_PARAM}; " in line:
            previous = out[position - 1]
            assert previous.strip() == "#pragma omp simd", previous
            out[position - 1] = previous.replace(
                "#pragma omp simd", "#pragma omp parallel for simd"
            )
            return out
    raise AssertionError("a 1-D kernel's loop runs to rows")


def nested_row_loops(outer_vars: Sequence[Var], body: list[str], pragma: str) -> list[str]:
    """The rows as one loop per outer variable (``collapse``d where parallel), the
    outermost running to ``rows`` divided by the others' sizes."""
    inner = [divisor(v.size, frozenset()) for v in outer_vars[1:]]
    lines = [f"const int64_t {outer_vars[0].name}_count = {ROWS_PARAM} / ({' * '.join(inner)});"]
    if pragma:
        lines.append(f"{pragma} collapse({len(outer_vars)})")
    bounds = [f"{outer_vars[0].name}_count", *inner]
    for depth, (var, bound) in enumerate(zip(outer_vars, bounds, strict=True)):
        lines.append("  " * depth + loop_header(var, bound))
    depth = len(outer_vars)
    lines += ["  " * depth + line for line in body]
    lines += ["  " * d + "}" for d in reversed(range(depth))]
    return lines
