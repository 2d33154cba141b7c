"""Triton backend: a :class:`Kernel` as one ``@triton.jit`` function.

* pointwise kernels: a 1-D block of ``XBLOCK`` elements per program, masked at the end;
* reduction kernels: a 2-D ``[XBLOCK, RBLOCK]`` tile, ``XBLOCK`` rows per program.
  *Persistent*: the whole row in one tile (``RBLOCK = next_power_of_2(row)``, every value
  computed and every input read once). *Looped*: one loop over the row per group of
  reductions, accumulators per lane; a max followed by a sum of ``exp(v - max)`` (softmax,
  log-softmax, cross-entropy) is one *online* loop that rescales the running sums when
  the max grows (kept per row, or per group of a thread's consecutive elements). Which variant and which block sizes run is chosen by ``triton_tuning``.

16-bit floats are loaded into ``float32`` and rounded only when stored; max/min are
NaN-propagating (``_ts_max``/``_ts_min``). Under the interpreter only ``tl``/``tl.math``
functions exist, so prims that need ``libdevice`` are left to ATen there. Kernels use only
Triton's builtins, never its ``@triton.jit`` standard library (``tl.zeros``, ``tl.sum``...):
those are decorated when Triton is imported, and the interpreter cannot call them unless
``TRITON_INTERPRET`` was already set at that moment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from torchstrata.inductor.branch_loads import branch_guards, guarded_index
from torchstrata.inductor.emitter import ExprEmitter
from torchstrata.inductor.exprs import (
    Constant,
    Expr,
    IndexValue,
    IndirectLoad,
    Load,
    Op,
    ReduceRef,
    variables,
)
from torchstrata.inductor.indexing import Index, Var, row_major_strides
from torchstrata.inductor.infix import INFIX_BINARY
from torchstrata.inductor.kernel import (
    Kernel,
    ReductionSpec,
    Store,
    red_vars,
    reduction_identity,
    row_vars,
)
from torchstrata.inductor.online import online_pairs, reduction_phases, variance_pairs
from torchstrata.inductor.tails import TAIL_PARAMS
from torchstrata.inductor.triton_loops import tile_loop

TL_TYPES = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.bool: "tl.int1",
}
HALF_TYPES = (torch.float16, torch.bfloat16)

HEADER = """import triton
import triton.language as tl
from triton.language.standard import _elementwise_max, _elementwise_min, _sum_combine
{libdevice}

{extrema}

@triton.jit
def _ts_sum(a, b):
    return a + b


@triton.jit
def _ts_prod(a, b):
    return a * b


@triton.jit
def _ts_round_bf16(v):
    # float32 -> the nearest bfloat16 value (ties to even), still float32; the interpreter's
    # own conversion truncates.
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def _ts_welford_combine(k_a, mean_a, m2_a, n_a, k_b, mean_b, m2_b, n_b):
    # two lanes' (shift, mean - shift, centred second moment, count) as one (Chan et al.)
    n = n_a + n_b
    delta = (k_b - k_a) + (mean_b - mean_a)
    frac = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    return k_a, mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _ts_nan_if_any(values, reduced, AXIS: tl.constexpr, KEEP: tl.constexpr):
    nans = tl.reduce(tl.where(values != values, 1, 0), AXIS, _sum_combine, keep_dims=KEEP)
    return tl.where(nans > 0, float("nan"), reduced)

"""

# NaN-propagating max/min: one max.NaN/min.NaN instruction on a GPU; a select under the
# interpreter (which has no such instruction to emulate).
_GPU_EXTREMA = """@triton.jit
def _ts_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _ts_min(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
"""
_INTERPRETER_EXTREMA = """@triton.jit
def _ts_max(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _ts_min(a, b):
    return tl.where((a < b) | (a != a), a, b)
"""

_TL_UNARY = {
    "exp": "tl.exp({})",
    "exp2": "tl.exp2({})",
    "log": "tl.log({})",
    "log2": "tl.log2({})",
    "sqrt": "tl.sqrt({})",
    "rsqrt": "tl.rsqrt({})",
    "sin": "tl.sin({})",
    "cos": "tl.cos({})",
    "erf": "tl.erf({})",
    "floor": "tl.floor({})",
    "ceil": "tl.ceil({})",
    "abs": "tl.abs({})",
    "neg": "-{}",
    "reciprocal": "1.0 / {}",
    "isnan": "{0} != {0}",
}
_LIBDEVICE_UNARY = {
    "expm1": "libdevice.expm1({})",
    "log1p": "libdevice.log1p({})",
    "tan": "libdevice.tan({})",
    "tanh": "libdevice.tanh({})",
    "asin": "libdevice.asin({})",
    "acos": "libdevice.acos({})",
    "atan": "libdevice.atan({})",
    "sinh": "libdevice.sinh({})",
    "cosh": "libdevice.cosh({})",
    "trunc": "libdevice.trunc({})",
    "round": "libdevice.rint({})",
    "isinf": "libdevice.isinf({}) != 0",
}
_BINARY = {
    **INFIX_BINARY,
    "maximum": "_ts_max({}, {})",
    "minimum": "_ts_min({}, {})",
}
_LIBDEVICE_BINARY = {"atan2": "libdevice.atan2({}, {})", "pow": "libdevice.pow({}, {})"}
_FLOAT_ONLY = frozenset(
    {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "reciprocal", "isnan"}
    | set(_LIBDEVICE_UNARY)
    | set(_LIBDEVICE_BINARY)
)
_OTHER = frozenset(
    {
        "div",
        "where",
        "convert_element_type",
        "bitwise_not",
        "broadcast_in_dim",
        "sum",
        "prod",
        "amax",
        "amin",
    }
)


def supports(name: str, dtype: torch.dtype, *, interpret: bool) -> bool:
    """Can this backend generate prims.``name`` on ``dtype`` operands (libdevice only on GPUs)?"""
    if dtype not in TL_TYPES or (interpret and dtype is torch.float64 and name in ("erf",)):
        return False
    known = set(_TL_UNARY) | set(_BINARY) | _OTHER
    if not interpret:
        known |= set(_LIBDEVICE_UNARY) | set(_LIBDEVICE_BINARY)
    if name not in known or (name in _FLOAT_ONLY and not dtype.is_floating_point):
        return False
    arithmetic = (
        "add",
        "sub",
        "mul",
        "div",
        "neg",
        "abs",
        "maximum",
        "minimum",
        "sum",
        "prod",
        "amax",
        "amin",
    )
    return not (dtype is torch.bool and name in arithmetic)


def compute_type(dtype: torch.dtype) -> str:
    """The Triton type values of ``dtype`` are computed in."""
    return "tl.float32" if dtype in HALF_TYPES else TL_TYPES[dtype]


def literal(value: int | float | bool, dtype: torch.dtype) -> str:
    """A typed scalar constant (shape ``[1]``, broadcasts against any tile)."""
    if dtype is torch.bool:
        return f"tl.full([1], {1 if value else 0}, tl.int1)"
    if dtype.is_floating_point:
        value = float(value)
        text = f'float("{value}")' if math.isnan(value) or math.isinf(value) else repr(value)
    else:
        text = str(int(value))
    return f"tl.full([1], {text}, {compute_type(dtype)})"


def render_index(index: Index) -> str:
    """An index as Triton integer arithmetic."""
    return index.render(lambda name: name, "//")


class TritonPrinter:
    """Spells expressions in Triton; ``masks`` picks a load's mask from its variables."""

    def __init__(self, kernel: Kernel, reduction: bool, interpret: bool = False) -> None:
        self.reduction = reduction
        self.interpret = interpret
        self.red_names = frozenset(v.name for v in red_vars(kernel.red_shape))
        self.row_names = frozenset(v.name for v in row_vars(kernel.row_shape))
        #: Triton's eviction policy for loads along the row (looped kernels keep the row
        #: in L2 for the loop that reads it again, then evict it in the last loop). A load
        #: the same for every row (LayerNorm's weight) is always kept: every row reads it.
        self.eviction: str | None = None
        #: Loads one ``where`` branch alone consumes (a cat's pieces), masked by its
        #: condition unless that reads a reduced dim the load does not (it would be out of
        #: scope where a looped kernel loads per row); ``name_of`` emits the condition.
        self.guards = {
            load: guard
            for load, guard in branch_guards(kernel_roots(kernel)).items()
            if not (variables(guard.condition) - load.index.variables()) & self.red_names
        }
        self.name_of: Callable[[Expr], str] | None = None

    def offset(self, index: Index) -> tuple[str, str]:
        """The offset text (shaped like the tile it belongs to) and its mask."""
        return f"{render_index(index)} + xzero", self.mask(index.variables())

    def mask(self, names: frozenset[str]) -> str:
        """The mask of a value of the loop variables ``names``: the row's, and the
        reduced dims' when it reads one (its tile is then ``[XBLOCK, RBLOCK]``)."""
        return "xmask & rmask" if self.reduction and names & self.red_names else "xmask"

    def render(self, expr: Expr, operands: Sequence[str]) -> str:
        """See :class:`~torchstrata.inductor.emitter.ExprPrinter`."""
        if isinstance(expr, Constant):
            return literal(expr.value, expr.dtype)
        if isinstance(expr, Load):
            guard = self.guards.get(expr) if self.name_of is not None else None
            index = expr.index if guard is None else guarded_index(expr, guard)
            offset, mask = self.offset(index)
            hint = ""
            if self.eviction and mask != "xmask":
                policy = self.eviction if index.variables() & self.row_names else "evict_last"
                hint = f", eviction_policy={policy!r}"
            if guard is not None and self.name_of is not None:
                condition = self.name_of(guard.condition)
                mask += f" & ({condition})" if guard.taken else f" & ({condition} == 0)"
            text = f"tl.load({expr.buffer} + ({offset}), {mask}, other=0{hint})"
            return f"{text}.to(tl.float32)" if expr.dtype in HALF_TYPES else text
        if isinstance(expr, IndirectLoad):
            return self._indirect_load(expr, operands[0])
        if isinstance(expr, IndexValue):
            return f"({render_index(expr.index)} + xzero).to({compute_type(expr.dtype)})"
        if isinstance(expr, ReduceRef):
            return f"red_{expr.name}"
        assert isinstance(expr, Op)
        return self._op(expr, operands)

    def _indirect_load(self, expr: IndirectLoad, position: str) -> str:
        """``tl.load`` of element ``index + stride * position``, masked to ``0 <= position <
        size`` (one unsigned compare) and NaN outside. The offset is int64: the position
        is (and is cast to be), and ``index`` is computed in int64 too when the gathered
        buffer may pass 2**31 elements (it can be far larger than the kernel's domain)."""
        _, high = expr.index.bounds()
        if high + expr.stride * max(expr.size - 1, 0) >= 2**31:
            base = expr.index.render(lambda name: f"{name}.to(tl.int64)", "//")
        else:
            base = render_index(expr.index)
        wanted = f"({position}).to(tl.int64)"
        inside = f"({wanted}.to(tl.uint64, bitcast=True) < {expr.size})"
        mask = self.mask(variables(expr))  # the position's variables count too
        step = wanted if expr.stride == 1 else f"{expr.stride} * {wanted}"
        offset = f"{base} + xzero + {step}"
        text = f'tl.load({expr.buffer} + ({offset}), {mask} & {inside}, other=float("nan"))'
        return f"{text}.to(tl.float32)" if expr.dtype in HALF_TYPES else text

    def _op(self, expr: Op, args: Sequence[str]) -> str:
        name = expr.name
        operand_dtype = expr.args[0].dtype
        if name == "convert_element_type":
            if expr.dtype is torch.bool:
                return f"{args[0]} != 0"
            if expr.dtype is torch.bfloat16 and self.interpret:
                return f"_ts_round_bf16({args[0]}.to(tl.float32))"
            if expr.dtype in HALF_TYPES:
                return f"{args[0]}.to({TL_TYPES[expr.dtype]}).to(tl.float32)"
            return f"{args[0]}.to({compute_type(expr.dtype)})"
        if name == "where":
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        if name == "div":
            if operand_dtype.is_floating_point:
                return f"{args[0]} / {args[1]}"
            return (
                f"tl.where({args[1]} == 0, 0, {args[0]} // tl.where({args[1]} == 0, 1, {args[1]}))"
            )
        if name == "bitwise_not":
            return f"{args[0]} == 0" if operand_dtype is torch.bool else f"~{args[0]}"
        for table in (_TL_UNARY, _LIBDEVICE_UNARY, _BINARY, _LIBDEVICE_BINARY):
            if name in table:
                return table[name].format(*args)
        raise NotImplementedError(f"prims.{name} in Triton")

    def define(self, name: str, expr: Expr, text: str) -> str:
        """See :class:`~torchstrata.inductor.emitter.ExprPrinter`."""
        return f"{name} = {text}"


def kernel_roots(kernel: Kernel) -> Iterable[Expr]:
    """Every expression a kernel computes from: reduction bodies, then stored values."""
    yield from (spec.body for spec in kernel.reductions)
    yield from (store.value for store in (*kernel.row_stores, *kernel.full_stores))
    if kernel.tail is not None:
        yield from (spec.body for spec in kernel.tail.reductions)
        yield from (store.value for store in kernel.tail.stores)


def derive_lines(vars_: Sequence[Var], flat: str) -> list[str]:
    """Assignments of the loop variables ``vars_`` from the flat (row-major) index ``flat``."""
    strides = row_major_strides([v.size for v in vars_])
    lines = []
    for dim, (var, stride) in enumerate(zip(vars_, strides, strict=True)):
        text = f"{flat} // {stride}" if stride != 1 else flat
        lines.append(f"{var.name} = {f'({text}) % {var.size}' if dim > 0 else text}")
    return lines


def store_line(
    store: Store,
    value: str,
    printer: TritonPrinter,
    full: bool,
    row_mask: str = "xmask",
    streaming: bool = False,
) -> str:
    """``tl.store`` of ``value`` to ``store``; ``full``: a whole-domain store (per element).

    ``streaming``: written with the ``.cs`` cache hint, so the output does not push out
    of L2 the input a looped kernel is still reading for the second time (on the H200,
    softmax over rows of 65536: 88.5 -> 86.2 us)."""
    if store.dtype is torch.bfloat16 and printer.interpret:
        value = f"_ts_round_bf16(({value}).to(tl.float32))"
    offset = render_index(store.index) + " + xzero"
    mask = f"{row_mask} & rmask" if full else row_mask
    if full:
        offset += " + rzero"
    hint = ", cache_modifier='.cs'" if streaming else ""
    stored = f"({value}).to({TL_TYPES[store.dtype]})"
    return f"tl.store({store.buffer} + ({offset}), {stored}, {mask}{hint})"


_COMBINE_FN = {"sum": "_sum_combine", "prod": "_ts_prod", "amax": "_ts_max", "amin": "_ts_min"}
# The interpreter reduces Triton's own combine functions with numpy and any other one
# element by element in Python; its numpy max ignores NaN, hence the fix-up.
_INTERPRETER_COMBINE_FN = {"amax": "_elementwise_max", "amin": "_elementwise_min"}


def reduce_text(spec: ReductionSpec, values: str, interpret: bool, axis: int = 1) -> str:
    """Reduce the ``[XBLOCK, RBLOCK]`` tile ``values`` along the row, keeping dims; with
    ``axis=2``, the ``[XBLOCK, groups, group]`` tile ``values`` within each group, dropping
    the group's dim."""
    keep = axis == 1
    if interpret and spec.kind in _INTERPRETER_COMBINE_FN:
        combine = _INTERPRETER_COMBINE_FN[spec.kind]
        text = f"tl.reduce({values}, {axis}, {combine}, keep_dims={keep})"
        if spec.dtype.is_floating_point:
            return f"_ts_nan_if_any({values}, {text}, {axis}, {keep})"
        return text
    return f"tl.reduce({values}, {axis}, {_COMBINE_FN[spec.kind]}, keep_dims={keep})"


_COMBINE = {"sum": "_ts_sum", "prod": "_ts_prod", "amax": "_ts_max", "amin": "_ts_min"}


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def generate_triton(
    kernel: Kernel,
    *,
    interpret: bool,
    persistent: bool,
    group: int = 0,
    even_rows: bool = False,
    even_row: bool = False,
) -> str:
    """The module source of ``kernel``; ``XBLOCK``/``RBLOCK`` are launch-time constants.

    ``persistent``: the whole row is one tile (``RBLOCK >= row``); otherwise the row is
    looped over in ``RBLOCK`` chunks (max-then-sum-of-exp pairs in one online pass).
    ``group``: the online max and sums are kept per group of ``group`` consecutive
    elements of a tile (:func:`_online_grouped`) instead of per row, and the loop that
    writes the output loads one tile ahead (:func:`~torchstrata.inductor.triton_loops.tile_loop`). ``even_rows``/``even_row``:
    every launch's ``XBLOCK`` divides the rows / ``RBLOCK`` divides the row, so the masks
    are constant ``True`` (Triton then drops them from loads and stores).
    """
    if kernel.parts:
        return module_source(kernel, _horizontal_lines(kernel, interpret), interpret)
    persistent = persistent or not kernel.red_shape
    reduction = bool(kernel.red_shape)
    printer = TritonPrinter(kernel, reduction, interpret)
    rv = red_vars(kernel.red_shape)
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
            else f"xmask = xindex < {kernel.rows}",
            "xzero = xindex * 0",
            f"rzero = tl.full([1, RBLOCK], 0, {'tl.int64' if wide else 'tl.int32'})",
        ]
    else:
        lines += [
            f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)",
            "xmask = tl.full([XBLOCK], 1, tl.int1)"
            if even_rows
            else f"xmask = xindex < {kernel.rows}",
            "xzero = xindex * 0",
        ]
    lines += derive_lines(row_vars(kernel.row_shape), "xindex")
    rindex_lines = [
        "rindex = {start}tl.arange(0, RBLOCK)[None, :]",
        "rmask = tl.full([1, RBLOCK], 1, tl.int1)"
        if even_row
        else f"rmask = rindex < {kernel.row_length}",
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
            # kernel: 0.144 -> 0.149 ms): docs/measurements/2026-11-30-h200-prefetch.txt
            loop = tile_loop(
                kernel.row_length,
                rindex_lines,
                emitter.close_inner(),
                stores,
                prefetch=bool(group),
                reverse=True,
            )
            lines += emitter.take_outer() + loop
    if kernel.tail is None:
        return module_source(kernel, lines, interpret)
    from torchstrata.inductor.triton_tail import tail_lines  # it builds on this module

    lines += tail_lines(kernel, emitter, printer)
    return module_source(kernel, lines, interpret, extra_params=TAIL_PARAMS)


def module_source(
    kernel: Kernel, lines: Sequence[str], interpret: bool, extra_params: Sequence[str] = ()
) -> str:
    """The module text: the header, then ``kernel`` as a ``@triton.jit`` function of its
    buffers, ``extra_params`` (scratch buffers) and ``XBLOCK``/``RBLOCK``, body ``lines``."""
    params = ", ".join(
        [arg.name for arg in kernel.args]
        + list(extra_params)
        + ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    )
    source = HEADER.format(
        libdevice="" if interpret else "from triton.language.extra import libdevice",
        extrema=_INTERPRETER_EXTREMA if interpret else _GPU_EXTREMA,
    )
    return (
        source
        + f"\n@triton.jit\ndef {kernel.name}({params}):\n"
        + "".join(f"    {line}\n" for line in lines)
    )


def _horizontal_lines(kernel: Kernel, interpret: bool) -> list[str]:
    """A horizontal kernel's body: each part over its slice of the launch's elements,
    masked to it (a program's block may straddle two parts)."""
    wide = kernel.rows >= 2**31
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines = [f"gindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)"]
    offset = 0
    for part in kernel.parts:
        printer = TritonPrinter(part, False, interpret)
        emitter = ExprEmitter(printer, frozenset())
        printer.name_of = emitter.emit
        lines += [
            f"xindex = gindex - {offset}",
            f"xmask = (xindex >= 0) & (xindex < {part.rows})",
            "xzero = xindex * 0",
            *derive_lines(row_vars(part.row_shape), "xindex"),
        ]
        stores = [store_line(s, emitter.emit(s.value), printer, False) for s in part.row_stores]
        lines += emitter.take_outer() + stores
        offset += part.rows
    return lines


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
#: (docs/measurements/2026-11-30-h200-layernorm-welford.txt).
WELFORD_MIN_LENGTH = 65536


def loop_pairs(kernel: Kernel) -> dict[str, ReductionSpec]:
    """Reductions a looped kernel computes in an earlier reduction's loop: ``{partner name:
    the reduction whose loop computes it}`` (online softmax sums, Welford second moments
    on rows of at least :data:`WELFORD_MIN_LENGTH`)."""
    pairs = online_pairs(kernel.reductions)
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
) -> list[str]:
    """One loop over the row for ``phase``; a phase whose reductions are partners of an
    earlier one (:func:`loop_pairs`) is folded into that one's loop, so it emits nothing."""
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
            f"acc_{spec.name} = tl.full([XBLOCK, {width}], {_identity_text(spec)}, {ctype})"
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
            even = kernel.row_length if even_row else None
            new_inits, new_updates, new_finals = _welford(spec, masked, mine, interpret, even)
        else:
            new_inits, new_updates, new_finals = _online(spec, masked, mine, interpret, group)
        inits[-1:] = new_inits
        updates += new_updates
        finals += new_finals
    inner = emitter.close_inner()
    loop = tile_loop(kernel.row_length, rindex_lines, inner, updates, prefetch=False)
    return emitter.take_outer() + inits + loop + finals


Lines = list[str]


def _online(
    spec: ReductionSpec,
    masked: str,
    sums: Sequence[ReductionSpec],
    interpret: bool,
    group: int,
) -> tuple[Lines, Lines, Lines]:
    """Online max and sums of ``exp(v - max)`` (inits, loop body, finals).

    Per row (``group`` 0): each iteration reduces the tile's max and its sums of
    exponentials, the running sums are rescaled by one exp per row when the max grows (one
    exp per element). Per group (:func:`_online_grouped`): no reduction across threads
    inside the loop.
    """
    m, ctype = spec.name, compute_type(spec.dtype)
    if group:
        return _online_grouped(spec, masked, sums, interpret, group)
    inits = [f"acc_{m} = tl.full([XBLOCK, 1], {_identity_text(spec)}, {ctype})"]
    tile_max = reduce_text(spec, f"val_{m}", interpret)
    updates = [
        f"val_{m} = {masked}",
        f"new_{m} = _ts_max(acc_{m}, {tile_max})",
        f"safe_{m} = tl.where(new_{m} == float('-inf'), 0.0, new_{m})",
        f"scale_{m} = tl.exp(acc_{m} - safe_{m})",
        f"term_{m} = tl.exp(val_{m} - safe_{m})",
    ]
    finals = [f"red_{m} = acc_{m}"]
    for partner in sums:
        s = partner.name
        inits.append(f"acc_{s} = tl.full([XBLOCK, 1], 0, {compute_type(partner.dtype)})")
        tile = reduce_text(partner, f"term_{m}", interpret)
        updates.append(f"acc_{s} = acc_{s} * scale_{m} + {tile}")
        finals.append(f"red_{s} = acc_{s}")
    return inits, [*updates, f"acc_{m} = new_{m}"], finals


def _online_grouped(
    spec: ReductionSpec, masked: str, sums: Sequence[ReductionSpec], interpret: bool, group: int
) -> tuple[Lines, Lines, Lines]:
    """Online max and sums kept per group of ``group`` consecutive elements of the tile.

    The tile is reshaped to ``[XBLOCK, RBLOCK // group, group]``; a group lies within one
    thread (loads are vectors of 8 bf16 or 4 float32), so its max and sum need no shuffle
    and no barrier, and the loop's warps stream independently. The running sums are
    rescaled by one exp per group; the groups are merged once, after the loop. On the
    H200, cross-entropy's row kernel over [4096, 128256] bf16 ran at 100% of copy against
    86% per row (docs/measurements/2026-11-30-h200-online-groups.txt).
    """
    m, ctype = spec.name, compute_type(spec.dtype)
    width = f"RBLOCK // {group}"
    inits = [f"acc_{m} = tl.full([XBLOCK, {width}], {_identity_text(spec)}, {ctype})"]
    updates = [
        f"val_{m} = tl.reshape({masked}, [XBLOCK, {width}, {group}])",
        f"new_{m} = _ts_max(acc_{m}, {reduce_text(spec, f'val_{m}', interpret, axis=2)})",
        f"safe_{m} = tl.where(new_{m} == float('-inf'), 0.0, new_{m})",
        f"scale_{m} = tl.exp(acc_{m} - safe_{m})",
        f"term_{m} = tl.exp(val_{m} - safe_{m}[:, :, None])",
    ]
    finals = [
        f"red_{m} = {reduce_text(spec, f'acc_{m}', interpret)}",
        f"rsafe_{m} = tl.where(red_{m} == float('-inf'), 0.0, red_{m})",
    ]
    for partner in sums:
        s = partner.name
        inits.append(f"acc_{s} = tl.full([XBLOCK, {width}], 0, {compute_type(partner.dtype)})")
        tile = reduce_text(partner, f"term_{m}", interpret, axis=2)
        updates.append(f"acc_{s} = acc_{s} * scale_{m} + {tile}")
        rescaled = f"acc_{s} * tl.exp(acc_{m} - rsafe_{m})"
        finals.append(f"red_{s} = {reduce_text(partner, rescaled, interpret)}")
    return inits, [*updates, f"acc_{m} = new_{m}"], finals


def _welford(
    spec: ReductionSpec,
    masked: str,
    squares: Sequence[ReductionSpec],
    interpret: bool,
    even_length: int | None,
) -> tuple[Lines, Lines, Lines]:
    """The sum ``spec`` and, in the same loop, its centred sums of squares (inits, loop
    body, finals): a Welford running mean and second moment per lane, merged across the
    lanes at the end (Chan's formula). The sum itself is still accumulated directly, so
    the mean is the same as without the partner.

    Each lane works on its values minus its first value (the shift): with a large mean
    and a small spread, a running mean near the mean itself would be rounded to the
    mean's ulp at every step, which is of the order of the spread.

    When ``RBLOCK`` divides the row (of ``even_length``) every lane holds the same count,
    so the update divides by a scalar (``1 / (k + 1)`` at the ``k``-th tile) instead of
    per lane.
    """
    s, ctype = spec.name, compute_type(spec.dtype)
    tile = "[XBLOCK, RBLOCK]"
    inits = [
        f"acc_{s} = tl.full({tile}, 0, {ctype})",
        f"wk_{s} = tl.full({tile}, 0, {ctype})",
        f"wmean_{s} = tl.full({tile}, 0, {ctype})",
        f"wm2_{s} = tl.full({tile}, 0, {ctype})",
    ]
    updates = [
        f"val_{s} = {masked}",
        f"acc_{s} = acc_{s} + val_{s}",
        f"wk_{s} = tl.where(roffset == 0, val_{s}, wk_{s})",
        f"wv_{s} = val_{s} - wk_{s}",
    ]
    if even_length is not None:
        updates += [f"wstep_{s} = 1.0 / (roffset // RBLOCK + 1)"]
        count = f"tl.full({tile}, {even_length} // RBLOCK, {ctype})"
    else:
        inits.append(f"wn_{s} = tl.full({tile}, 0, {ctype})")
        updates += [
            f"wn_{s} = wn_{s} + tl.where(xmask & rmask, 1.0, 0.0)",
            f"wstep_{s} = tl.where(xmask & rmask, 1.0 / tl.maximum(wn_{s}, 1.0), 0.0)",
        ]
        count = f"wn_{s}"
    updates += [
        f"delta_{s} = wv_{s} - wmean_{s}",
        f"wmean_{s} = wmean_{s} + delta_{s} * wstep_{s}",
        f"wm2_{s} = wm2_{s} + tl.where(xmask & rmask, delta_{s} * (wv_{s} - wmean_{s}), 0.0)",
    ]
    state = f"(wk_{s}, wmean_{s}, wm2_{s}, {count})"
    merged = f"tl.reduce({state}, 1, _ts_welford_combine, keep_dims=True)"
    finals = [
        f"red_{s} = {reduce_text(spec, f'acc_{s}', interpret)}",
        f"wk_{s}, wmean_{s}, wm2_{s}, wn_{s} = {merged}",
    ]
    finals += [f"red_{square.name} = wm2_{s}" for square in squares]
    return inits, updates, finals


def _identity_text(spec: ReductionSpec) -> str:
    value = reduction_identity(spec.kind, spec.dtype)
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return f'float("{value}")'
    return repr(value)
