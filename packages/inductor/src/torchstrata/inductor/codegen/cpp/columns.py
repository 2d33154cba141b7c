"""Column reductions in C++: reducing over a strided dim into contiguous outputs.

A weight gradient ``dW[n] = sum_m dy[m, n] * xhat[m, n]`` is a kernel whose rows are the
N columns and whose reduced dim is the M rows, at stride N. Walking each column down its
strided dim touches one float per cache line, so here the reduced dim is the outer loop
and a SIMD loop over a block of contiguous columns updates one accumulator per column:
every thread streams through memory in order.

The reduced dim is split into chunks so that threads share the work even when there is
a single block of columns. Each chunk writes its partial results to scratch; a second
loop combines them in chunk order (so results do not depend on the thread count) and
does the row stores.

The number of reduced elements (and of groups) are the function's size arguments
(:func:`column_sizes`), not literals: a bias gradient summed over ``B*T`` rows is one source
for every ``B*T`` (decision 0250). Whether the work items run in parallel and whether the
reduced dim is chunked (the chunks' count and length) depend on the sizes and are computed
by the kernel from them (decision 0356). Chunked or not, one loop over the work items
reduces them, a function over a range of items compiled once and called in parallel or not
when called (decision 0390); the combining loop runs where ``red_chunks`` is more than one.
The width stays in the source (decision 0393: as an argument, its SIMD loops' run-time trip
count cost a ``[2048, 64]`` column sum 2.5x).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torchstrata.core import active_symbols
from torchstrata.inductor.codegen.cpp.checks import flag_arguments
from torchstrata.inductor.codegen.cpp.exprs import (
    COMBINE,
    PARALLEL_THRESHOLD,
    CppPrinter,
    compute_type,
    derive_vars,
    emit_store,
    kernel_source,
    literal,
)
from torchstrata.inductor.codegen.cpp.parallel import ROW_HI, ROW_LO, branch, range_calls
from torchstrata.inductor.codegen.cpp.sum_loops import (
    accumulator_type,
)
from torchstrata.inductor.codegen.emitter import ExprEmitter
from torchstrata.inductor.codegen.size_names import named_sizes
from torchstrata.inductor.ir.exprs import Expr, ReduceRef, reductions_used, variables
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import (
    Kernel,
    ReductionSpec,
    red_vars,
    reduction_identity,
    row_vars,
)
from torchstrata.inductor.schedule.columns import is_column_reduction

COLUMN_BLOCK = 1024  # most columns per block: one accumulator array each, kept in L1
MIN_COLUMNS = 8  # fewer contiguous columns than one AVX vector: reduce along rows instead
WORK_ITEMS = 16  # parallel work items to aim for (blocks x chunks), whatever the thread count
MIN_CHUNK = 32  # fewest reduced elements per chunk
#: Reduced elements that a float32 sum adds in float (per column, one after another)
#: before adding them to its double accumulator: full float SIMD width, within ~2 ulps.
SUM_ROWS = 16
#: The size arguments of a column reduction: reduced elements, a chunk's length, chunks.
LENGTH_PARAM, CHUNK_PARAM, CHUNKS_PARAM = "red_rows", "red_chunk", "red_chunks"
#: The size argument of a column reduction with row dims before its columns: their
#: elements (a sum over dim 0 of ``[B, T, C]`` has ``T`` groups of ``C`` columns).
GROUPS_PARAM = "groups"


def _wide(spec: ReductionSpec) -> bool:
    return accumulator_type(spec.dtype, spec.kind) != compute_type(spec.dtype)


def _acc_type(spec: ReductionSpec) -> str:
    return accumulator_type(spec.dtype, spec.kind)


def uses_column_loop(kernel: Kernel) -> bool:
    """True when :func:`generate_column_cpp` generates ``kernel``: a column reduction by
    the vote of :func:`~torchstrata.inductor.schedule.columns.is_column_reduction`, of a shape that
    the column loop handles: at least ``MIN_COLUMNS`` columns, one phase of reductions
    (none reads another) and stores over the reduced dims only where they are contiguous
    along the columns and read no reduction (a bias gradient's producer, stored as the
    loop walks it: see ``schedule.scheduler.sums_leading_dims``).
    """
    if not kernel.red_shape or not kernel.row_shape:
        return False
    if kernel.row_shape[-1] < MIN_COLUMNS or not kernel.reductions:
        return False
    if any(reductions_used(spec.body) for spec in kernel.reductions):
        return False
    column = row_vars(kernel.row_shape)[-1].name
    for store in kernel.full_stores:
        if reductions_used(store.value) or not _contiguous(store.index, column):
            return False
    return is_column_reduction(kernel)


def _contiguous(index: Index, column: str) -> bool:
    return any(
        isinstance(atom, Var) and atom.name == column and coeff == 1 for atom, coeff in index.terms
    )


class _BlockEmitter(ExprEmitter):
    """An emitter whose inner loop runs over columns; reduction results vary per column."""

    def depends_on_inner(self, expr: Expr) -> bool:
        """See :meth:`ExprEmitter.depends_on_inner`; a :class:`ReduceRef` is per column."""
        return isinstance(expr, ReduceRef) or super().depends_on_inner(expr)


class _Layout:
    """How the domain is cut: outer row groups x column blocks x chunks of the reduced dim."""

    def __init__(self, kernel: Kernel) -> None:
        rows = row_vars(kernel.row_shape)
        self.outer_vars, self.column = rows[:-1], rows[-1]
        self.red_vars = red_vars(kernel.red_shape)
        self.groups = math.prod(v.size for v in self.outer_vars)
        self.columns = self.column.size
        self.blocks = -(-self.columns // COLUMN_BLOCK)
        self.block = -(-self.columns // self.blocks)
        self.length = kernel.row_length

    @property
    def can_chunk(self) -> bool:
        """Does the source hold the chunked loop? Where there are fewer blocks of columns
        than :data:`WORK_ITEMS` (the columns are in the source; the groups are not, so
        whether a size's groups leave room for chunks is decided when called)."""
        return self.blocks < WORK_ITEMS

    def sizes(self) -> tuple[tuple[str, int], ...]:
        """The function's size arguments (name, value): the reduced elements, and the
        groups where there are any. The chunking is computed from them in the kernel."""
        sizes: tuple[tuple[str, int], ...] = ((LENGTH_PARAM, self.length),)
        return sizes + (((GROUPS_PARAM, self.groups),) if self.grouped else ())

    def elements_condition(self) -> str:
        """Whether the kernel's elements reach ``PARALLEL_THRESHOLD``, in C++."""
        if not self.grouped:
            return f"{LENGTH_PARAM} * {self.groups * self.columns} >= {PARALLEL_THRESHOLD}"
        return f"{LENGTH_PARAM} * {GROUPS_PARAM} * {self.columns} >= {PARALLEL_THRESHOLD}"

    def parallel_condition(self) -> str | None:
        """When the unchunked work items run in parallel (decision 0356): with more than one
        item and at least ``PARALLEL_THRESHOLD`` elements; None where there is one item."""
        if not self.grouped and self.blocks == 1:
            return None
        return self.elements_condition()

    def chunking(self) -> list[str]:
        """Lines computing ``red_chunks`` (chunks of the reduced dim) and ``red_chunk`` (a
        chunk's length) from the size arguments: chunks only from ``PARALLEL_THRESHOLD``
        elements, enough for :data:`WORK_ITEMS` work items, of at least :data:`MIN_CHUNK`
        reduced elements each; then as many chunks as that length needs. Computed in the
        kernel, not passed: each ``int64_t`` argument costs the launcher's call."""
        items = self.group_items()
        return [
            f"int64_t {CHUNKS_PARAM} = 1;",
            f"if ({self.elements_condition()}) {{",
            f"  const int64_t wanted = ({WORK_ITEMS} + ({items}) - 1) / ({items});",
            f"  const int64_t most = {LENGTH_PARAM} / {MIN_CHUNK};",
            f"  {CHUNKS_PARAM} = wanted < most ? wanted : most;",
            f"  {CHUNKS_PARAM} = {CHUNKS_PARAM} < 1 ? 1 : {CHUNKS_PARAM};",
            "}",
            f"const int64_t {CHUNK_PARAM} = ({LENGTH_PARAM} + {CHUNKS_PARAM} - 1) / {CHUNKS_PARAM};",
            f"if ({CHUNK_PARAM} > 0) {{",
            f"  {CHUNKS_PARAM} = ({LENGTH_PARAM} + {CHUNK_PARAM} - 1) / {CHUNK_PARAM};",
            "}",
        ]

    def counts(self) -> dict[int, str]:
        """The reduced elements a column's reduction is scaled by (a column mean's
        ``sum / T``), read from ``red_rows`` (decision 0310)."""
        return {self.length: LENGTH_PARAM} if self.length >= 2 else {}

    @property
    def grouped(self) -> bool:
        """Does the function take its number of groups (row dims before the columns)?"""
        return self.groups >= 2

    def group_items(self) -> str:
        """The number of groups times blocks of columns, as the source spells it."""
        if not self.grouped:
            return str(self.groups * self.blocks)
        return GROUPS_PARAM if self.blocks == 1 else f"{GROUPS_PARAM} * {self.blocks}"

    def names(self) -> dict[int, str]:
        """How the source spells the values that the groups argument gives (decision
        0285): the groups, and the groups times the columns (the reduced dim's stride in
        a contiguous ``[B, T, C]``), where neither equals the column count."""
        if not self.grouped:
            return {}
        names = {
            self.groups: GROUPS_PARAM,
            self.groups * self.columns: f"{self.columns}*{GROUPS_PARAM}",
        }
        return {value: text for value, text in names.items() if value != self.columns}

    def block_header(self, item: str, per_chunk: str) -> list[str]:
        """Lines binding the outer row vars, ``c0`` and ``cn`` of work item ``item``
        (``per_chunk``: the work items of one block of columns, 1 or the chunk count)."""
        per_group = f"{self.blocks}" if per_chunk == "1" else f"({self.blocks} * {per_chunk})"
        lines = [f"const int64_t xo = {item} / {per_group};"]
        lines += derive_vars(self.outer_vars, "xo")
        block_index = f"({item} / {per_chunk}) % {self.blocks}"
        lines += [
            f"const int64_t c0 = {block_index} * {self.block};",
            f"const int64_t cn = {self.columns} - c0 < {self.block} "
            f"? {self.columns} - c0 : {self.block};",
        ]
        return lines


def _column_loop(layout: _Layout, body: Sequence[str]) -> list[str]:
    return [
        "#pragma omp simd",
        "for (int64_t c = 0; c < cn; ++c) {",
        f"  const int64_t {layout.column.name} = c0 + c;",
        *("  " + line for line in body),
        "}",
    ]


def _accumulate(kernel: Kernel, layout: _Layout, chunked: bool) -> list[str]:
    """The chunk loop (the whole reduced dim where not ``chunked``): accumulators start at
    the identity and fold in each reduced element."""
    printer = CppPrinter(layout.counts(), lambda expr: bool(variables(expr)))
    emitter = ExprEmitter(printer, frozenset({layout.column.name}), prefix="a")
    emitter.open_inner()
    updates = []
    wide = [spec for spec in kernel.reductions if _wide(spec)]
    for spec in kernel.reductions:
        name = f"block_{spec.name}" if _wide(spec) else f"acc_{spec.name}"
        acc, ctype = f"{name}[c]", compute_type(spec.dtype)
        value = emitter.emit(spec.body)
        combined = COMBINE[spec.kind].format(acc=acc, v=value)
        updates.append(f"{acc} = static_cast<{ctype}>({combined});")
    stores = [emit_store(store, emitter.emit) for store in kernel.full_stores]
    inner = emitter.close_inner() + stores + updates
    per_element = (
        derive_vars(layout.red_vars, "rr") + emitter.take_outer() + _column_loop(layout, inner)
    )
    if chunked:
        bounds = [
            f"const int64_t r_begin = chunk * {CHUNK_PARAM};",
            f"const int64_t r_end = r_begin + {CHUNK_PARAM} < {LENGTH_PARAM} "
            f"? r_begin + {CHUNK_PARAM} : {LENGTH_PARAM};",
        ]
    else:
        bounds = ["const int64_t r_begin = 0;", f"const int64_t r_end = {LENGTH_PARAM};"]
    if not wide:
        return [
            *bounds,
            "for (int64_t rr = r_begin; rr < r_end; ++rr) {",
            *("  " + line for line in per_element),
            "}",
        ]
    # Wide sums add SUM_ROWS elements in float (block_<name>), then into their double acc.
    starts = _column_loop(layout, [f"block_{s.name}[c] = 0;" for s in wide])
    flushes = _column_loop(
        layout,
        [
            f"acc_{s.name}[c] = acc_{s.name}[c] + static_cast<{_acc_type(s)}>(block_{s.name}[c]);"
            for s in wide
        ],
    )
    block = [
        "const int64_t rb_end = rb + "
        + str(SUM_ROWS)
        + " < r_end ? rb + "
        + str(SUM_ROWS)
        + " : r_end;",
        *starts,
        "for (int64_t rr = rb; rr < rb_end; ++rr) {",
        *("  " + line for line in per_element),
        "}",
        *flushes,
    ]
    return [
        *bounds,
        *(f"alignas(64) {compute_type(s.dtype)} block_{s.name}[{layout.block}];" for s in wide),
        f"for (int64_t rb = r_begin; rb < r_end; rb += {SUM_ROWS}) {{",
        *("  " + line for line in block),
        "}",
    ]


def _store_block(kernel: Kernel, layout: _Layout) -> list[str]:
    """The row stores of one block of columns, reading each column's accumulators."""
    reduced = frozenset(v.name for v in layout.red_vars)  # a column's value: once a call
    printer = CppPrinter(layout.counts(), lambda expr: bool(variables(expr) & reduced))
    emitter = _BlockEmitter(printer, frozenset({layout.column.name}), prefix="s")
    emitter.open_inner()
    emitter.preset_inner(
        {
            ReduceRef(s.name, s.dtype): (
                f"static_cast<{compute_type(s.dtype)}>(acc_{s.name}[c])"
                if _wide(s)
                else f"acc_{s.name}[c]"
            )
            for s in kernel.reductions
        }
    )
    stores = [emit_store(store, emitter.emit) for store in kernel.row_stores]
    inner = emitter.close_inner() + stores
    return emitter.take_outer() + _column_loop(layout, inner)


def _declare_accumulators(kernel: Kernel, layout: _Layout, init: str | None) -> list[str]:
    """Per-reduction accumulator arrays, set to the identity (``init`` None) or partial 0."""
    lines, sets = [], []
    for spec in kernel.reductions:
        lines.append(f"alignas(64) {_acc_type(spec)} acc_{spec.name}[{layout.block}];")
        if init is None:
            value = literal(reduction_identity(spec.kind, spec.dtype), spec.dtype)
        else:
            value = f"part_{spec.name}[{init}]"
        sets.append(f"acc_{spec.name}[c] = {value};")
    return lines + _column_loop(layout, sets)


def column_sizes(kernel: Kernel) -> tuple[tuple[str, int], ...]:
    """The size arguments (name, value) that :func:`generate_column_cpp`'s function of
    ``kernel`` takes after its buffers."""
    return _Layout(kernel).sizes()


def generate_column_cpp(kernel: Kernel, simd_functions: frozenset[str]) -> str:
    """The C++ source of a column reduction (see :func:`uses_column_loop`); its groups
    (row dims before the columns) are a size argument, spelled as it in indices
    (:mod:`~torchstrata.inductor.codegen.size_names`)."""
    layout = _Layout(kernel)
    names = layout.names()
    inner = frozenset({layout.column.name, "c"})
    with named_sizes(names, names, inner):
        return _generate_columns(kernel, layout, simd_functions)


def _generate_columns(kernel: Kernel, layout: _Layout, simd_functions: frozenset[str]) -> str:
    names = (*(name for name, _ in layout.sizes()), *map(str, active_symbols()))
    if not layout.can_chunk:
        body, items_body = _unchunked(kernel, layout, names)
        return kernel_source(kernel, body, simd_functions, names, items_body)
    body, items_body, items_params = _chunkable(kernel, layout, names)
    return kernel_source(kernel, body, simd_functions, names, items_body, items_params)


def _item_loop(
    items: str, item_body: Sequence[str], pragma: str = "", start: str = "0"
) -> list[str]:
    """The loop over work items ``start`` to ``items`` around ``item_body``, under ``pragma``."""
    return [
        *([pragma] if pragma else []),
        f"for (int64_t item = {start}; item < {items}; ++item) {{",
        *("  " + line for line in item_body),
        "}",
    ]


def _unchunked(
    kernel: Kernel, layout: _Layout, sizes: Sequence[str]
) -> tuple[list[str], list[str]]:
    """One work item per group and block of columns, each reducing its whole reduced dim
    and storing; in parallel from ``PARALLEL_THRESHOLD`` elements. Where that is decided
    when called, the item loop is a function over a range of items, compiled once (decision
    0359): the lines that call it, and its loop; else the loop, and no function."""
    item_body = [
        *layout.block_header("item", "1"),
        *_declare_accumulators(kernel, layout, None),
        *_accumulate(kernel, layout, False),
        *_store_block(kernel, layout),
    ]
    items = layout.group_items()
    condition = layout.parallel_condition()
    if condition is None:
        return _item_loop(items, item_body), []
    loop = _item_loop(ROW_HI, item_body, start=ROW_LO)
    args = [*(arg.name for arg in kernel.args), *sizes, *flag_arguments(kernel)]
    return range_calls(args, f"({items})", condition), loop


def _chunkable(
    kernel: Kernel, layout: _Layout, sizes: Sequence[str]
) -> tuple[list[str], list[str], list[str]]:
    """Work items per group, block of columns and chunk of the reduced dim (one chunk, the
    whole dim, where ``red_chunks`` is 1), one loop for both (decision 0390): an item
    reduces its chunk, then stores its block where there is one chunk, else writes its
    partial results to scratch, which a second loop combines in chunk order. The item loop
    is a function over a range of items, compiled once, called in parallel where there is
    more than one chunk (a size is chunked only from ``PARALLEL_THRESHOLD`` elements) or,
    unchunked, by 0356's condition (a checked kernel's flags through pointers, see
    ``checks.flag_arguments``). Returns the lines that call it, its loop, and the
    parameters it takes beyond the kernel's (the chunking and the scratch arrays)."""
    partial = f"(xo * {CHUNKS_PARAM} + chunk) * {layout.columns} + {layout.column.name}"
    writes = _column_loop(
        layout, [f"part_{s.name}[{partial}] = acc_{s.name}[c];" for s in kernel.reductions]
    )
    item_body = [
        *layout.block_header("item", CHUNKS_PARAM),
        f"const int64_t chunk = item % {CHUNKS_PARAM};",
        *_declare_accumulators(kernel, layout, None),
        *_accumulate(kernel, layout, True),
        *branch(f"{CHUNKS_PARAM} == 1", _store_block(kernel, layout), writes),
    ]
    groups = (
        f"{GROUPS_PARAM} * {layout.columns}" if layout.grouped else layout.groups * layout.columns
    )
    body = [*layout.chunking()]
    for spec in kernel.reductions:
        ctype = _acc_type(spec)
        allocation = f"__builtin_malloc(sizeof({ctype}) * {groups} * {CHUNKS_PARAM})"
        body.append(
            f"{ctype}* part_{spec.name} = "
            f"{CHUNKS_PARAM} > 1 ? static_cast<{ctype}*>({allocation}) : nullptr;"
        )
    items = f"{layout.group_items()} * {CHUNKS_PARAM}"
    condition = layout.parallel_condition() or f"{CHUNKS_PARAM} > 1"
    loop = _item_loop(ROW_HI, item_body, start=ROW_LO)
    params = [f"const int64_t {CHUNK_PARAM}", f"const int64_t {CHUNKS_PARAM}"]
    params += [f"{_acc_type(s)}* __restrict__ part_{s.name}" for s in kernel.reductions]
    args = [*(arg.name for arg in kernel.args), *sizes, CHUNK_PARAM, CHUNKS_PARAM]
    args += [f"part_{s.name}" for s in kernel.reductions]
    body += range_calls(args + flag_arguments(kernel), f"({items})", condition)
    combine = _combine_and_store(kernel, layout)
    return (
        [*body, f"if ({CHUNKS_PARAM} > 1) {{", *("  " + line for line in combine), "}"],
        loop,
        params,
    )


def _combine_and_store(kernel: Kernel, layout: _Layout) -> list[str]:
    """The second loop: fold each block's partials in chunk order, store, free scratch."""
    first = f"xo * {CHUNKS_PARAM} * {layout.columns} + {layout.column.name}"
    folds = []
    for spec in kernel.reductions:
        acc, ctype = f"acc_{spec.name}[c]", _acc_type(spec)
        part = f"part_{spec.name}[(xo * {CHUNKS_PARAM} + k) * {layout.columns} + c0 + c]"
        combined = COMBINE[spec.kind].format(acc=acc, v=part)
        folds.append(f"{acc} = static_cast<{ctype}>({combined});")
    fold_loop = [
        f"for (int64_t k = 1; k < {CHUNKS_PARAM}; ++k) {{",
        "  #pragma omp simd",
        "  for (int64_t c = 0; c < cn; ++c) {",
        *("    " + line for line in folds),
        "  }",
        "}",
    ]
    item_body = [
        *layout.block_header("item", "1"),
        *_declare_accumulators(kernel, layout, first),
        *fold_loop,
        *_store_block(kernel, layout),
    ]
    pragma = "#pragma omp parallel for" if layout.grouped or layout.blocks > 1 else ""
    lines = _item_loop(layout.group_items(), item_body, pragma)
    return lines + [f"__builtin_free(part_{spec.name});" for spec in kernel.reductions]
