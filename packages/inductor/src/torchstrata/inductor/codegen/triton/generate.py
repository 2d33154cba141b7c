"""Triton backend: a :class:`Kernel` as one ``@triton.jit`` function.

* pointwise kernels: a 1-D block of ``XBLOCK`` elements per program, masked at the end;
* reduction kernels: a 2-D ``[XBLOCK, RBLOCK]`` tile, ``XBLOCK`` rows per program.
  *Persistent*: the whole row in one tile (``RBLOCK = next_power_of_2(row)``, every value
  computed and every input read once). *Looped*: one loop over the row per group of
  reductions, accumulators per lane; a max followed by a sum of ``exp(v - max)`` (softmax,
  log-softmax, cross-entropy) is one *online* loop that rescales the running sums when
  the max grows (kept per row, or per group of a thread's consecutive elements). Which variant and which block sizes run is chosen by ``triton_tuning``.

16-bit floats are loaded into ``float32`` and rounded only when stored; max/min are
NaN-propagating (``_ts_max``/``_ts_min``). The text of expressions, stores and tile
reductions comes from :mod:`~torchstrata.inductor.codegen.triton.printer`, the loops from
:mod:`~torchstrata.inductor.codegen.triton.loops`.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchstrata.core import SizeValue
from torchstrata.inductor.codegen.cat_bounds import cat_names
from torchstrata.inductor.codegen.emitter import ExprEmitter
from torchstrata.inductor.codegen.size_names import named_sizes, number
from torchstrata.inductor.codegen.triton.accumulators import identity_text, online, welford
from torchstrata.inductor.codegen.triton.cluster import (
    CLUSTER_PARAMS,
    can_cluster,
    combine_lines,
    header_lines,
)
from torchstrata.inductor.codegen.triton.flat_index import use_flat_indices, without_unused
from torchstrata.inductor.codegen.triton.loops import block_loop, tile_loop
from torchstrata.inductor.codegen.triton.printer import (
    PARTIALS_CHUNK_PARAM,
    RED_PARAM,
    ROWS_PARAM,
    TL_TYPES,
    TritonPrinter,
    compute_type,
    derive_lines,
    literal,
    module_source,
    part_rows_param,
    reduce_text,
    render_index,
    store_line,
)
from torchstrata.inductor.codegen.triton.row_count import (
    divisor_hint,
    length_divisor_hint,
    rows_divisor_hint,
)
from torchstrata.inductor.codegen.triton.size_buckets import same_size
from torchstrata.inductor.codegen.triton.tail_code import tail_lines
from torchstrata.inductor.codegen.triton.tails import TAIL_PARAMS
from torchstrata.inductor.ir.kernel import (
    Kernel,
    ReductionSpec,
    red_vars,
    reduction_identity,
    row_vars,
)
from torchstrata.inductor.ir.online import (
    online_pairs,
    reduction_phases,
    variance_pairs,
)
from torchstrata.inductor.schedule.columns import is_column_reduction

_COMBINE = {"sum": "_ts_sum", "prod": "_ts_prod", "amax": "_ts_max", "amin": "_ts_min"}


def generate_triton(
    kernel: Kernel,
    *,
    interpret: bool,
    persistent: bool,
    group: int = 0,
    even_rows: bool = False,
    even_row: bool = False,
    cluster: int = 1,
    prefetch_partials: bool = True,
    flat_indices: bool = True,
) -> str:
    """The module source of ``kernel``; ``XBLOCK``/``RBLOCK`` are launch-time constants.

    ``persistent``: the whole row is one tile (``RBLOCK >= row``); otherwise the row is
    looped over in ``RBLOCK`` chunks (max-then-sum-of-exp pairs in one online pass).
    ``group``: the online max and sums are kept per group of ``group`` consecutive
    elements of a tile (:func:`~torchstrata.inductor.codegen.triton.accumulators.online_grouped`) instead of per row, and the loop that
    writes the output loads one tile ahead (:func:`~torchstrata.inductor.codegen.triton.loops.tile_loop`). ``even_rows``/``even_row``:
    every launch's ``XBLOCK`` divides the rows / ``RBLOCK`` divides the row, so the masks
    are constant ``True`` (Triton then drops them from loads and stores). ``cluster``: a
    looped kernel whose rows are walked by clusters of this many programs, one chunk of
    the row each (:mod:`~torchstrata.inductor.codegen.triton.cluster`; ``XBLOCK`` 1).
    ``prefetch_partials``: a kernel with partials loads its next block of rows before this
    block's work (``InductorOptions.partials_prefetch``). ``flat_indices``: a plain row or
    pointwise kernel's indices over the flat ``xindex``/``rindex`` where that divides less
    (:mod:`~torchstrata.inductor.codegen.triton.flat_index`, ``InductorOptions.flat_indices``).
    """
    cats = cat_names(kernel)  # a cat's bounds are size arguments (codegen/cat_bounds.py)
    if cluster > 1:  # the row stride too: a cluster's rows are as long as a multiple of 16
        with named_sizes(cats | {kernel.row_length: RED_PARAM}, cats):
            return _cluster_source(kernel, group, even_row, cluster, flat_indices)
    if kernel.parts:
        lines = _horizontal_lines(kernel, interpret, flat_indices)
        return module_source(kernel, lines, interpret)
    if kernel.partials is not None:  # its rows, row length and chunk: size arguments
        with named_sizes(cats | _partials_names(kernel), cats):
            lines = _partials_lines(kernel, interpret, prefetch_partials, flat_indices)
        return module_source(kernel, lines, interpret)
    # a row stride equal to the row length is spelled as ``rnumel`` (codegen/size_names.py),
    # a reduced dim's stride equal to the rows (a sum over dim 0 of ``[B, T, C]``) ``xnumel``
    length = kernel.row_length if kernel.red_shape else 0
    # a symbolic length is named at every size, 1 included (a literal 1 never: every 1
    # would print so); deciding ``length >= 2`` would split the lowering (decision 0480)
    lengths = {length: RED_PARAM} if type(length) is SizeValue or length >= 2 else {}
    # rows as many as the row is long: a column reduction's reduced stride is its rows, a
    # row kernel's row stride its length, at every size (decision 0361)
    rows = _rows_name(kernel)
    column_strides = is_column_reduction(kernel, unanimous=True) and same_size(length, kernel.rows)
    names = cats | (lengths | rows if column_strides else rows | lengths)
    with named_sizes(names, cats):
        return _row_source(kernel, interpret, persistent, group, even_rows, even_row, flat_indices)


def _rows_name(kernel: Kernel) -> dict[int, str]:
    """A reduction's rows as ``xnumel`` (decision 0285): a column sum over the leading dim
    of ``[B, T, C]`` walks its ``T*C`` rows as one and reads the reduced dim at that
    stride. Pointwise kernels keep their literals (their ``xnumel`` is every element)."""
    return {kernel.rows: ROWS_PARAM} if kernel.red_shape and kernel.rows >= 2 else {}


def _counts(kernel: Kernel) -> dict[int, str]:
    """The element counts a plain kernel takes as size arguments (decision 0310): a
    reduction's row length ``rnumel``, a pointwise kernel's elements ``xnumel``."""
    if kernel.red_shape:
        return {kernel.row_length: RED_PARAM} if kernel.row_length >= 2 else {}
    return {kernel.rows: ROWS_PARAM} if kernel.rows >= 2 else {}


def _row_source(
    kernel: Kernel,
    interpret: bool,
    persistent: bool,
    group: int,
    even_rows: bool,
    even_row: bool,
    flat_indices: bool = True,
) -> str:
    """:func:`generate_triton` of a plain row or pointwise kernel."""
    persistent = persistent or not kernel.red_shape
    reduction = bool(kernel.red_shape)
    printer = TritonPrinter(kernel, reduction, interpret)
    printer.counts = _counts(kernel)
    rv = red_vars(kernel.red_shape)
    # each index over xindex/rindex where that divides less (decision 0521)
    derived = use_flat_indices(printer, row_vars(kernel.row_shape), rv, flat_indices)
    emitter = ExprEmitter(printer, frozenset() if persistent else frozenset(v.name for v in rv))
    printer.name_of = emitter.emit
    wide = kernel.rows * kernel.row_length >= 2**31
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines = []
    if reduction:
        lines += [
            f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
            "xmask = tl.full([XBLOCK, 1], 1, tl.int1)"
            if even_rows
            else f"xmask = xindex < {ROWS_PARAM}",
            "xzero = xindex * 0",
            f"rzero = tl.full([1, RBLOCK], 0, {'tl.int64' if wide else 'tl.int32'})",
        ]
    else:
        lines += [
            f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)",
            "xmask = tl.full([XBLOCK], 1, tl.int1)"
            if even_rows
            else f"xmask = xindex < {ROWS_PARAM}",
            "xzero = xindex * 0",
        ]
    if not (even_rows or interpret):
        lines = rows_divisor_hint(kernel.rows) + lines
    if reduction and not interpret:
        lines = length_divisor_hint(kernel.row_length) + lines
    lines += derive_lines(row_vars(kernel.row_shape), "xindex")
    rindex_lines = [
        "rindex = {start}tl.arange(0, RBLOCK)[None, :]",
        "rmask = tl.full([1, RBLOCK], 1, tl.int1)" if even_row else f"rmask = rindex < {RED_PARAM}",
        *derive_lines(rv, "rindex"),
    ]
    if reduction and persistent:
        lines += [line.format(start="") for line in rindex_lines]
    phases = reduction_phases(kernel.reductions)
    pairs = {} if persistent else loop_pairs(kernel)
    if not (persistent or interpret) and kernel.full_stores:
        printer.eviction = "evict_last"
    for phase in phases:
        if persistent:
            lines += _persistent_phase(emitter, phase, interpret)
        else:
            lines += _looped_phase(
                emitter, phase, pairs, rindex_lines, kernel, interpret, group, even_row
            )
    row_stores = [store_line(s, emitter.emit(s.value), printer, False) for s in kernel.row_stores]
    lines += emitter.take_outer() + row_stores
    if kernel.full_stores:
        if persistent:
            full_stores = [
                store_line(s, emitter.emit(s.value), printer, True) for s in kernel.full_stores
            ]
            lines += emitter.take_outer() + full_stores
        else:
            emitter.open_inner()
            if not interpret:
                printer.eviction = "evict_first"
            stores = [
                store_line(s, emitter.emit(s.value), printer, True, streaming=not interpret)
                for s in kernel.full_stores
            ]
            # backwards: the tiles the reduction loop read last are still in L2 (on the
            # H200, softmax over rows of 65536: 110 -> 102 us). Loading a tile ahead paid
            # here (0.086 -> 0.082 ms), not in the reduction loops (cross-entropy's row
            # kernel: 0.144 -> 0.149 ms): bench/results/2026-11-30-h200-prefetch.txt
            loop = tile_loop(
                RED_PARAM,
                rindex_lines,
                emitter.close_inner(),
                stores,
                prefetch=bool(group),
                reverse=True,
            )
            lines += emitter.take_outer() + loop
    if even_rows and not interpret and any(f"{ROWS_PARAM}*" in line for line in lines):
        # the divisor a literal stride that ``xnumel`` spells (_rows_name) told Triton
        lines = rows_divisor_hint(kernel.rows) + lines
    if kernel.tail is None:
        return module_source(kernel, without_unused(lines, derived), interpret)

    lines += tail_lines(kernel, emitter, printer)
    lines = without_unused(lines, derived)
    return module_source(kernel, lines, interpret, extra_params=TAIL_PARAMS)


def _cluster_source(
    kernel: Kernel, group: int, even_row: bool, size: int, flat_indices: bool = True
) -> str:
    """The looped kernel over chunks of rows walked by clusters of ``size`` programs: each
    reduction phase over the program's chunk, then the cluster's partials combined
    (``triton_cluster.combine_lines``); row outputs stored by the row's first chunk."""
    if not can_cluster(kernel, size, 1):  # chunks of whole elements: size divides the row
        raise ValueError(f"{kernel.name} cannot be walked by clusters of {size} programs")
    # the row's length is ``rnumel`` (decision 0285); a chunk is a multiple of RBLOCK (a
    # configuration's clusters tile the row in whole tiles), spelled so that Triton sees it
    # (each program's tiles 16-byte aligned: vector loads)
    length = RED_PARAM
    chunk = f"({RED_PARAM} // ({size} * RBLOCK) * RBLOCK)"
    printer = TritonPrinter(kernel, True, interpret=False)
    rv = red_vars(kernel.red_shape)
    emitter = ExprEmitter(printer, frozenset(v.name for v in rv))
    printer.name_of = emitter.emit
    derived = use_flat_indices(printer, row_vars(kernel.row_shape), rv, flat_indices)
    wide = kernel.rows * kernel.row_length >= 2**31
    lines = [
        *header_lines(size, chunk, wide),
        "xmask = tl.full([XBLOCK, 1], 1, tl.int1)",
        "xzero = xindex * 0",
        f"rzero = tl.full([1, RBLOCK], 0, {'tl.int64' if wide else 'tl.int32'})",
        *derive_lines(row_vars(kernel.row_shape), "xindex"),
    ]
    rindex_lines = [
        "rindex = {start}tl.arange(0, RBLOCK)[None, :]",
        "rmask = tl.full([1, RBLOCK], 1, tl.int1)" if even_row else f"rmask = rindex < {length}",
        *derive_lines(rv, "rindex"),
    ]
    pairs = online_pairs(kernel.reductions)  # no Welford pairs: their merge is not here
    if kernel.full_stores:
        printer.eviction = "evict_last"
    for phase in reduction_phases(kernel.reductions):
        walked = _looped_phase(
            emitter, phase, pairs, rindex_lines, kernel, False, group, even_row, chunk
        )
        if walked:
            lines += walked + combine_lines(kernel, phase, pairs, size)
    first = "xmask & (chunk == 0)"
    row_stores = [
        store_line(s, emitter.emit(s.value), printer, False, first) for s in kernel.row_stores
    ]
    lines += emitter.take_outer() + row_stores
    if kernel.full_stores:
        emitter.open_inner()
        printer.eviction = "evict_first"
        stores = [
            store_line(s, emitter.emit(s.value), printer, True, streaming=True)
            for s in kernel.full_stores
        ]
        inner = emitter.close_inner()
        # no look-ahead here: on the H200, rows of 262144 in clusters of 8 with 16 warps
        # took 129 us with it, 114 without (exp_clab.py)
        loop = tile_loop(
            length, rindex_lines, inner, stores, prefetch=False, reverse=True, chunk=chunk
        )
        lines += emitter.take_outer() + loop
    lines = without_unused(lines, derived)
    return module_source(kernel, lines, interpret=False, extra_params=CLUSTER_PARAMS)


def _horizontal_lines(kernel: Kernel, interpret: bool, flat_indices: bool) -> list[str]:
    """A horizontal kernel's body: each part over its slice of the launch's elements,
    masked to it (a program's block may straddle two parts)."""
    wide = kernel.rows >= 2**31
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines = [f"gindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)"]
    offset = "0"
    for position, part in enumerate(kernel.parts):
        printer = TritonPrinter(part, False, interpret)
        emitter = ExprEmitter(printer, frozenset())
        printer.name_of = emitter.emit
        # each part's indices over its own xindex where that divides less (decision 0521)
        derived = use_flat_indices(printer, row_vars(part.row_shape), (), flat_indices)
        count = part_rows_param(position)  # the part's elements: a size argument
        part_lines = [
            f"xindex = gindex - ({offset})" if " " in offset else f"xindex = gindex - {offset}",
            f"xmask = (xindex >= 0) & (xindex < {count})",
            "xzero = xindex * 0",
            *derive_lines(row_vars(part.row_shape), "xindex"),
        ]
        stores = [store_line(s, emitter.emit(s.value), printer, False) for s in part.row_stores]
        part_lines += emitter.take_outer() + stores
        lines += without_unused(part_lines, derived)
        offset = count if offset == "0" else f"{offset} + {count}"
    return lines


def _partials_names(kernel: Kernel) -> dict[int, str]:
    """The sizes a kernel with partials prints as its size arguments (decision 0340): the
    rows ``xnumel``, the row length ``rnumel`` and the rows per program ``xchunk`` (a row
    kernel's index and the partial sums' stores are over them)."""
    partials = kernel.partials
    assert partials is not None
    names = {kernel.rows: ROWS_PARAM}
    if partials.chunk >= 2:
        names[partials.chunk] = PARTIALS_CHUNK_PARAM
    if kernel.row_length >= 2:
        names[kernel.row_length] = RED_PARAM
    return names


def _partials_lines(
    kernel: Kernel, interpret: bool, prefetch: bool, flat_indices: bool = True
) -> list[str]:
    """A persistent row kernel whose program ``xp`` computes a chunk of rows, ``XBLOCK`` at
    a time, adds the fused column sums of each block of rows into per-column accumulators,
    and stores them once (``partials.py``). Every row is in range (chunks tile the rows).

    The rows, the row length and the chunk are the size arguments ``xnumel``, ``rnumel``
    and ``xchunk`` (decision 0340), with the divisor hints their literals gave; under
    Triton 3.6's interpreter the chunk loop's bound stays a literal (it needs a constant
    bound there), on a GPU it is ``xchunk``."""
    partials = kernel.partials
    assert partials is not None
    printer = TritonPrinter(kernel, True, interpret)
    printer.counts = _counts(kernel)
    emitter = ExprEmitter(printer, frozenset())
    printer.name_of = emitter.emit
    rv = red_vars(kernel.red_shape)
    derived = use_flat_indices(printer, row_vars(kernel.row_shape), rv, flat_indices)
    wide = kernel.rows * kernel.row_length >= 2**31
    lines = [] if interpret else _partials_hints(kernel)
    lines += [
        "xp = tl.program_id(0).to(tl.int64)" if wide else "xp = tl.program_id(0)",
        "rindex = tl.arange(0, RBLOCK)[None, :]",
        f"rmask = rindex < {number(kernel.row_length)}",
        f"rzero = tl.full([1, RBLOCK], 0, {'tl.int64' if wide else 'tl.int32'})",
        *derive_lines(red_vars(kernel.red_shape), "rindex"),
        *(f"part_{s.name} = tl.full([1, RBLOCK], 0, tl.float32)" for s in partials.reductions),
    ]
    chunk = number(partials.chunk)
    block = [
        f"xindex = xp * {chunk} + {{start}}tl.arange(0, XBLOCK)[:, None]",
        "xmask = tl.full([XBLOCK, 1], 1, tl.int1)",
        "xzero = xindex * 0",
        *derive_lines(row_vars(kernel.row_shape), "xindex"),
    ]
    body: list[str] = []
    for phase in reduction_phases(kernel.reductions):
        body += _persistent_phase(emitter, phase, interpret)
    stores = [store_line(s, emitter.emit(s.value), printer, False) for s in kernel.row_stores]
    body += emitter.take_outer() + stores
    stores = [store_line(s, emitter.emit(s.value), printer, True) for s in kernel.full_stores]
    body += emitter.take_outer() + stores
    updates = []
    for spec in partials.reductions:
        value = emitter.emit(spec.body)
        updates += emitter.take_outer()
        masked = f"tl.where(xmask & rmask, {value}, 0.0)"
        updates.append(f"part_{spec.name} += {reduce_text(spec, masked, interpret, axis=0)}")
    bound = str(partials.chunk) if interpret else chunk
    lines += block_loop(bound, number(kernel.rows), block, body, updates, prefetch=prefetch)
    lines += [f"red_{spec.name} = part_{spec.name}" for spec in partials.reductions]
    after = TritonPrinter(kernel, True, interpret)  # names of the loop are not visible here
    after_emitter = ExprEmitter(after, frozenset(), prefix="ptmp")
    after.name_of = after_emitter.emit
    for store in partials.stores:
        value = f"({after_emitter.emit(store.value)}).to({TL_TYPES[store.dtype]})"
        offset = f"{render_index(store.index)} + rzero"
        lines += after_emitter.take_outer()
        lines.append(f"tl.store({store.buffer} + ({offset}), {value}, rmask)")
    return without_unused(lines, derived)


def _partials_hints(kernel: Kernel) -> list[str]:
    """The divisors of the sizes a kernel with partials takes as arguments that their
    literals told Triton (:func:`~torchstrata.inductor.codegen.triton.row_count.rows_divisor_hint`):
    aligned row starts for vector loads."""
    partials = kernel.partials
    assert partials is not None
    return [
        *rows_divisor_hint(kernel.rows),
        *length_divisor_hint(kernel.row_length),
        *divisor_hint(PARTIALS_CHUNK_PARAM, partials.chunk),
    ]


def _persistent_phase(
    emitter: ExprEmitter, phase: Sequence[ReductionSpec], interpret: bool
) -> list[str]:
    lines = []
    for spec in phase:
        value = emitter.emit(spec.body)
        identity = literal(reduction_identity(spec.kind, spec.dtype), spec.dtype)
        lines += emitter.take_outer()
        lines.append(f"masked_{spec.name} = tl.where(xmask & rmask, {value}, {identity})")
        lines.append(f"red_{spec.name} = {reduce_text(spec, f'masked_{spec.name}', interpret)}")
    return lines


#: Rows at least this long compute a mean and centred second moment in one Welford loop;
#: shorter ones in a loop each (their second read hits L2). LayerNorm in bf16 on the H200:
#: [4096, 16384] 73.6 us with Welford against 71.5; [256, 262144] 119.7 against 136.9
#: (bench/results/2026-11-30-h200-layernorm-welford.txt).
WELFORD_MIN_LENGTH = 65536


def loop_pairs(kernel: Kernel) -> dict[str, ReductionSpec]:
    """Reductions a looped kernel computes in an earlier reduction's loop: ``{partner name:
    the reduction whose loop computes it}`` (online softmax sums and counts of maxima,
    Welford second moments on rows of at least :data:`WELFORD_MIN_LENGTH`)."""
    pairs = online_pairs(kernel.reductions, counts=True)
    if kernel.row_length >= WELFORD_MIN_LENGTH:
        pairs |= variance_pairs(kernel.reductions, kernel.row_length)
    return pairs


def _looped_phase(
    emitter: ExprEmitter,
    phase: Sequence[ReductionSpec],
    pairs: dict[str, ReductionSpec],
    rindex_lines: list[str],
    kernel: Kernel,
    interpret: bool,
    group: int,
    even_row: bool,
    chunk: str | None = None,
) -> list[str]:
    """One loop over the row (or the program's ``chunk`` of it) for ``phase``; a phase
    whose reductions are partners of an earlier one (:func:`loop_pairs`) is folded into
    that one's loop, so it emits nothing."""
    if all(spec.name in pairs for spec in phase):
        return []
    partners = [spec for spec in kernel.reductions if pairs.get(spec.name) in phase]
    # With an online max kept per row, every accumulator of the loop is kept per row too
    # (one reduction of the tile per iteration, few registers); otherwise per lane.
    per_row = any(pairs[p.name].kind == "amax" for p in partners) and not group
    emitter.open_inner()
    inits, updates, finals = [], [], []
    for spec in phase:
        identity = literal(reduction_identity(spec.kind, spec.dtype), spec.dtype)
        ctype = compute_type(spec.dtype)
        width = "1" if per_row else "RBLOCK"
        inits.append(
            f"acc_{spec.name} = tl.full([XBLOCK, {width}], {identity_text(spec)}, {ctype})"
        )
        value = emitter.emit(spec.body)
        masked = f"tl.where(xmask & rmask, {value}, {identity})"
        mine = [p for p in partners if pairs[p.name] is spec]
        if not mine:
            acc = f"acc_{spec.name}"
            tile = reduce_text(spec, masked, interpret) if per_row else masked
            updates.append(f"{acc} = {_COMBINE[spec.kind]}({acc}, {tile})")
            finals.append(
                f"red_{spec.name} = {acc if per_row else reduce_text(spec, acc, interpret)}"
            )
            continue
        if spec.kind == "sum":
            even = RED_PARAM if even_row else None
            new_inits, new_updates, new_finals = welford(spec, masked, mine, interpret, even)
        else:
            # a cluster's chunk: its partial sums are merged later (triton_cluster.py)
            whole = None if chunk is not None else RED_PARAM
            new_inits, new_updates, new_finals = online(spec, masked, mine, interpret, group, whole)
        inits[-1:] = new_inits
        updates += new_updates
        finals += new_finals
    inner = emitter.close_inner()
    # a cluster's chunk is a few tiles: its loop loads the next one ahead (as the fast
    # handwritten cluster kernel does, a one-off device script (git history))
    ahead = chunk is not None and group > 0
    # the row's length is the kernel's argument (a cluster's chunk is computed from it)
    length = RED_PARAM
    loop = tile_loop(length, rindex_lines, inner, updates, prefetch=ahead, chunk=chunk)
    return emitter.take_outer() + inits + loop + finals
