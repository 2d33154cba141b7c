"""Checks in C++ kernels: detected by the kernel, raised by its caller.

Two kinds: out-of-range gathers (below) and integer divisions by zero
(:class:`~torchstrata.inductor.codegen.cpp.division.DivisionCheck`, see
:mod:`~torchstrata.inductor.codegen.cpp.division`). Both keep a flag that the kernel's loops OR
into, and the kernel returns the number of the first check whose flag is set.

Eager ``torch.gather`` (and ``x[index]``, ``index_select``, ``cross_entropy``) raises for
an index outside ``[0, size)``. A kernel's :class:`~torchstrata.inductor.ir.exprs.IndirectLoad`
keeps its branch-free, vectorisable load (position 0 instead, NaN selected; see
:mod:`~torchstrata.inductor.codegen.cpp.exprs`) and also ORs "this index was out of range" into a
flag per gathered source (a buffer and the size of its gathered dim, a
:class:`GatherCheck`). Every ``omp`` loop whose body updates a flag gets a
``reduction(|:...)`` clause for it, so SIMD lanes and threads keep their own copies:
nothing in the loops branches, and they stay vectorised. In a loop that does little
besides gathering (an elementwise ``[2048, 4096]`` float32 gather, or its row sums, on
one core) the flag costs 4-7%; keeping the largest index as unsigned instead (a ``max``
reduction, which would name a bad index directly) cost 10-17%.

After its loops, a kernel whose flag is set evaluates the index expressions of that
check's loads again, in the order of its domain (rows, then reduced dims; row-major for
a gather over the last dim), and stores the first out-of-range index in its extra
``int64_t*`` argument (slot 0; slot 1 set to 1). Only this failing path pays for that
scan. An index computed from a reduction of the kernel is not scanned (slot 1 stays 0).
The kernel returns the 1-based number of the check that failed (0: all passed), and
:class:`CheckedKernel` raises :class:`IndexError` (a gather's) or
``RuntimeError("ZeroDivisionError")``. The division check comes first: after a zero
divisor the values computed from its quotient are arbitrary, and an index computed from
them may be out of range too, where eager raised for the division.

A kernel without indirect loads or integer divisions by values has none of this: its
source is exactly as before. The backend passes :func:`kernel_checks` of the kernel to
``cpp_build.build_kernel``, which wraps the loaded function; the source lists them in
comments (:data:`MARKER`, :data:`~torchstrata.inductor.codegen.cpp.division.MARKER`) for a reader.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
from collections.abc import Callable, Sequence

import attrs

from torchstrata.inductor.codegen.cpp.division import MARKER as DIVISION_MARKER
from torchstrata.inductor.codegen.cpp.division import DivisionCheck, division_checks
from torchstrata.inductor.codegen.emitter import ExprEmitter, ExprPrinter
from torchstrata.inductor.codegen.size_names import number as size_number
from torchstrata.inductor.ir.exprs import IndirectLoad, reductions_used, variables, walk
from torchstrata.inductor.ir.kernel import Kernel, red_vars, row_vars

#: Starts the source comment listing a kernel's checks (``<buffer> <size>`` pairs), for a reader.
MARKER = "// torchstrata gather checks:"
#: The kernel's extra last parameter: two int64 slots (the bad index, whether it is known).
ERROR_PARAM = "ts_gather_error"
_SLOTS = ctypes.c_int64 * 2
_PRAGMA = re.compile(r"^\s*#pragma omp (parallel|simd)\b")


@attrs.frozen(order=True)
class GatherCheck:
    """Indices gathered along a dim of ``size`` elements of ``buffer`` must be in
    ``[0, size)``; one check covers every indirect load of that buffer and size."""

    buffer: str
    size: int

    @property
    def flag(self) -> str:
        """The C++ variable (``uint64_t``) that is nonzero once an index was out of range;
        named by a symbolic size's digest (its source is no identifier)."""
        if type(self.size) is int:
            return f"oob_{self.buffer}_{self.size}"
        digest = hashlib.sha256(repr(self.size).encode()).hexdigest()[:12]
        return f"oob_{self.buffer}_s{digest}"

    def error(self, index: int | None, kernel: str) -> IndexError:
        """The error for ``index`` (None: not known), see :func:`gather_error`."""
        return gather_error(self, index, kernel)


#: A check a C++ kernel makes: its flag names a ``uint64_t``; its error is raised.
KernelCheck = GatherCheck | DivisionCheck


def index_in_range(position: str, size: int) -> str:
    """C++ for ``0 <= position < size``: one unsigned compare (a symbolic size is an
    ``int64_t`` expression of the kernel's symbol arguments, converted)."""
    if type(size) is not int:
        return f"(static_cast<uint64_t>({position}) < static_cast<uint64_t>({size}))"
    return f"(static_cast<uint64_t>({position}) < {size}ULL)"


def _indirect_loads(kernel: Kernel) -> list[IndirectLoad]:
    roots = [spec.body for spec in kernel.reductions]
    roots += [store.value for store in (*kernel.row_stores, *kernel.full_stores)]
    loads = [expr for root in roots for expr in walk(root) if isinstance(expr, IndirectLoad)]
    return list(dict.fromkeys(loads))


def gather_checks(kernel: Kernel) -> tuple[GatherCheck, ...]:
    """The checks of ``kernel``'s indirect loads, sorted (none for a kernel without)."""
    return tuple(sorted({GatherCheck(load.buffer, load.size) for load in _indirect_loads(kernel)}))


def kernel_checks(kernel: Kernel) -> tuple[KernelCheck, ...]:
    """Every check of ``kernel``: its divisors' (see the module), then its gathers'
    (sorted); the kernel returns the 1-based number of the first that failed."""
    return (*division_checks(kernel), *gather_checks(kernel))


def check_update(load: IndirectLoad, position: str) -> str:
    """The statement recording whether ``position`` (the name of ``load``'s gathered
    index) is out of range: branch-free, so a SIMD loop stays vectorised."""
    flag = GatherCheck(load.buffer, load.size).flag
    return f"{flag} |= static_cast<uint64_t>(!{index_in_range(position, load.size)});"


def checked_function(
    head: str,
    body: Sequence[str],
    kernel: Kernel,
    printer: Callable[[], ExprPrinter],
    sizes: Sequence[str] = (),
) -> list[str]:
    """The lines of ``kernel``'s function, which makes its checks (see the module).

    ``head`` is its ``extern "C" void <name>(<params>``, without the closing parenthesis;
    ``body`` its statements (unindented), whose ``omp`` loops get the reduction clauses of
    the flags they update. ``printer`` makes the expression printer for the scans of the
    failing path; ``sizes`` are the function's size parameters, which the scans' loops run
    to where they are those loops' trip counts (decision 0310).
    """
    assert head.startswith('extern "C" void '), head
    checks = kernel_checks(kernel)
    signature = head.replace(" void ", " int64_t ", 1)
    signature += f", int64_t* __restrict__ {ERROR_PARAM}) {{"
    statements = [f"uint64_t {check.flag} = 0;" for check in checks]
    statements += _with_reductions(body, checks)
    loads = _indirect_loads(kernel)
    for number, check in enumerate(checks, start=1):
        scans = [
            line
            for load in loads
            if GatherCheck(load.buffer, load.size) == check
            for line in _first_bad_index(load, kernel, printer(), number, sizes)
        ]  # none for the division check: no position is reported
        statements += [f"if ({check.flag}) {{", *("  " + line for line in scans)]
        statements += [f"  return {number};", "}"]
    statements.append("return 0;")
    gathers = [check for check in checks if isinstance(check, GatherCheck)]
    comments = [f"{MARKER} {' '.join(f'{c.buffer} {c.size}' for c in gathers)}"] if gathers else []
    if len(gathers) < len(checks):
        comments.append(DIVISION_MARKER)
    return [*comments, signature, *("  " + line for line in statements), "}"]


def flag_arguments(kernel: Kernel) -> list[str]:
    """The arguments by which a kernel's function over a range of rows
    (:func:`~torchstrata.inductor.codegen.cpp.parallel.rows_function`) reports the flags
    it sets: their addresses (a parallel region's private copies, OR-ed by its reduction
    clause). Empty for a kernel without checks."""
    return [f"&{check.flag}" for check in kernel_checks(kernel)]


def checked_rows_function(kernel: Kernel, body: Sequence[str]) -> tuple[list[str], list[str]]:
    """The extra parameters (a pointer per flag) and the statements of ``kernel``'s function
    over a range of rows ``body``: its own flags, set by its loops (their ``omp`` pragmas
    with reduction clauses) and OR-ed into the caller's at the end. Checked kernels compile
    their row loop once too (decision 0390)."""
    checks = kernel_checks(kernel)
    params = [f"uint64_t* __restrict__ {check.flag}_out" for check in checks]
    statements = [f"uint64_t {check.flag} = 0;" for check in checks]
    statements += _with_reductions(body, checks)
    statements += [f"*{check.flag}_out |= {check.flag};" for check in checks]
    return params, statements


def _with_reductions(body: Sequence[str], checks: Sequence[KernelCheck]) -> list[str]:
    """``body`` with a reduction clause on each ``omp`` loop pragma whose loop updates
    flags (a loop that does not keeps its pragma as it was)."""
    lines = list(body)
    for number, line in enumerate(lines):
        if _PRAGMA.match(line):
            loop = "\n".join(_loop_lines(lines, number + 1))
            used = [check.flag for check in checks if re.search(rf"\b{check.flag}\b", loop)]
            if used:
                lines[number] = f"{line} reduction(|:{', '.join(used)})"
    return lines


def _loop_lines(lines: Sequence[str], start: int) -> list[str]:
    """The lines of the loop statement starting at ``lines[start]`` (to its closing brace)."""
    depth = 0
    for end in range(start, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        if depth <= 0:
            return list(lines[start : end + 1])
    return list(lines[start:])


def _scan_bounds(kernel: Kernel, sizes: Sequence[str]) -> dict[str, str]:
    """The scans' loop bounds that are size parameters: the one outer row variable runs to
    ``rows`` (the outer loop's trip count, ``generate.outer_rows``), and any variable whose
    size :func:`~torchstrata.inductor.codegen.size_names.number` names (``red_len``) to
    that name; a scan with literal bounds would be a source per size (a gather over a
    cross-entropy's rows). A column sum's one reduced variable runs to ``red_rows``
    (``columns.LENGTH_PARAM``), its reduced length."""
    rows = row_vars(kernel.row_shape)
    reduced = red_vars(kernel.red_shape)
    outer = rows if kernel.red_shape or len(rows) == 1 else rows[:-1]
    bounds = {v.name: size_number(v.size) for v in (*rows, *reduced)}
    if "rows" in sizes and len(outer) == 1:
        bounds[outer[0].name] = "rows"
    if "red_rows" in sizes and len(reduced) == 1:
        bounds[reduced[0].name] = "red_rows"
    return bounds


def _first_bad_index(
    load: IndirectLoad,
    kernel: Kernel,
    printer: ExprPrinter,
    number: int,
    sizes: Sequence[str] = (),
) -> list[str]:
    """Scalar loops over the variables of ``load``'s index expression (in the kernel's
    order: rows, then reduced dims) that store the first out-of-range index and return
    ``number``; none when the index reads a reduction of the kernel (only known inside
    its loops). The loops run to :func:`_scan_bounds`."""
    if reductions_used(load.indirect):
        return []
    used = variables(load.indirect)
    loop_vars = [
        v for v in (*row_vars(kernel.row_shape), *red_vars(kernel.red_shape)) if v.name in used
    ]
    emitter = ExprEmitter(printer, frozenset(v.name for v in loop_vars), prefix="scan")
    emitter.open_inner()
    position = emitter.emit(load.indirect)
    found = [
        f"if (!{index_in_range(position, load.size)}) {{",
        f"  {ERROR_PARAM}[0] = static_cast<int64_t>({position}); {ERROR_PARAM}[1] = 1;",
        f"  return {number};",
        "}",
    ]
    lines = emitter.close_inner() + found
    bounds = _scan_bounds(kernel, sizes)
    for var in reversed(loop_vars):
        bound = bounds[var.name]
        header = f"for (int64_t {var.name} = 0; {var.name} < {bound}; ++{var.name}) {{"
        lines = [header, *("  " + line for line in lines), "}"]
    return ["{", *("  " + line for line in emitter.take_outer() + lines), "}"]


def gather_error(check: GatherCheck, index: int | None, kernel: str) -> IndexError:
    """The error for an out-of-range ``index`` (None: not known) found by ``check`` in
    ``kernel``; worded like eager's (the gathered dim's number is not known here)."""
    source = check.buffer.removeprefix("buf_")
    which = "an index" if index is None else f"index {index}"
    return IndexError(
        f"{which} is out of bounds for dimension with size {check.size!r} "
        f"(gather from {source!r} in C++ kernel {kernel})"
    )


class CheckedKernel:
    """A loaded kernel that makes checks, called like one that does not.

    ``fn`` is its ctypes entry point (its buffer addresses, then a pointer to two int64
    slots; it returns a check's 1-based number or 0). Each call passes fresh slots, so
    concurrent calls share none, and raises the failed check's error: :class:`IndexError`
    for a gather, ``RuntimeError("ZeroDivisionError")`` for a division.
    """

    def __init__(self, fn: Callable[..., int], name: str, checks: Sequence[KernelCheck]) -> None:
        self.fn = fn
        self.name = name
        self.checks = tuple(checks)

    def __call__(self, *addresses: int) -> None:
        """Run the kernel on buffer ``addresses``; raise if a check failed."""
        slots = _SLOTS()
        failed = self.fn(*addresses, slots)
        if failed:
            index = slots[0] if slots[1] else None
            raise self.checks[failed - 1].error(index, self.name)
