"""Triton text shared by the kernel generators: the module header and its helper functions,
the prims Triton spells (:func:`supports`), :class:`TritonPrinter` (an expression as Triton
text: loads with their masks, gathers, ops), stores, tile reductions and the module around
a kernel body (:func:`module_source`).

Under the interpreter only ``tl``/``tl.math`` functions exist, so prims that need
``libdevice`` are left to ATen there. So is an integer ``div``: the interpreter runs on CPU
tensors, where eager raises for a zero divisor, and a kernel cannot raise (it gives 0;
CUDA's eager does not raise, so GPU kernels keep their division). Kernels use only
Triton's builtins, never its ``@triton.jit`` standard library (``tl.zeros``,
``tl.sum``...): those are decorated when Triton is imported, and the interpreter cannot
call them unless ``TRITON_INTERPRET`` was already set at that moment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from torchstrata.core import SizeValue, is_size_float, same_size, wrapped_integer
from torchstrata.inductor.codegen.cat_bounds import cat_params, cat_sizes
from torchstrata.inductor.codegen.infix import INFIX_BINARY
from torchstrata.inductor.codegen.size_constants import (
    count_constant,
    length_constant,
    length_text,
)
from torchstrata.inductor.codegen.size_names import divisor, named_integer, number, value_of
from torchstrata.inductor.codegen.triton.branch_loads import branch_guards, guarded_index
from torchstrata.inductor.codegen.triton.header import module_header
from torchstrata.inductor.codegen.triton.size_buckets import column_sum, symbol_params
from torchstrata.inductor.ir.exprs import (
    Constant,
    Expr,
    IndexValue,
    IndirectLoad,
    Load,
    Op,
    ReduceRef,
    variables,
)
from torchstrata.inductor.ir.indexing import Index, Var, row_major_strides
from torchstrata.inductor.ir.kernel import Kernel, ReductionSpec, Store, red_vars, row_vars
from torchstrata.inductor.ir.kernel_ops import KernelOp

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


def half_round(value: str, dtype: torch.dtype) -> str:
    """``value`` (float32) rounded to the 16-bit ``dtype`` and widened again: an
    intermediate rounded where eager rounds it (each eager op's result is stored in
    ``dtype``)."""
    return f"{value}.to({TL_TYPES[dtype]}).to(tl.float32)"


def rounds_to_half(source: str) -> bool:
    """True when a kernel's ``source`` rounds an intermediate to 16 bits (:func:`half_round`).

    Such a kernel must be compiled without floating-point contraction: LLVM narrows
    ``fptrunc(fmul(fpext a, fpext b))`` to a 16-bit multiply (exact), and the contraction
    that follows fuses it with the next add into one 16-bit FMA, so the product is never
    rounded where eager rounds it (seen on the H100/H200 with Triton 3.6: RoPE's
    ``q * cos + rotate_half(q) * sin`` in bf16 differed from eager in a quarter of its
    elements, one rounding short)."""
    return any(half_round("", dtype) in source for dtype in HALF_TYPES)


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
        KernelOp.RAND_BITS.value,
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
    if interpret and name == "div" and not dtype.is_floating_point:
        return False  # ATen's CPU kernel raises for a zero divisor (see the module)
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


def statistic_exp(argument: str, dtype: torch.dtype) -> str:
    """``exp(argument)`` for an online softmax statistic computed in ``dtype``'s compute type.

    Inside the running sum of ``exp(v - max)`` and its rescaling factors, a float32 exp
    may flush results below 2**-126 to zero: each such term is added to (or scales) a sum
    that ends at least 1 (the max's own term), so none of them can change its float32
    value. ``tl.exp`` keeps those tiny results, and on sm_90 pays three instructions per
    element (a range test, a pre-scale and a square around the hardware ``ex2``) that
    a loop of a handful of float operations per element feels. Exps whose results reach
    an output keep their subnormal results (``tl.exp``, or ``shifted_exps``); float64
    statistics stay ``tl.exp``.
    """
    if compute_type(dtype) == "tl.float32":
        return f"tl.math.exp2(({argument}) * {LOG2_E!r})"
    return f"tl.exp({argument})"


#: log2(e), as ``tl.exp`` multiplies by it before the hardware's base-2 exponential.
LOG2_E = 1.4426950408889634


def literal(value: int | float | bool | SizeValue, dtype: torch.dtype) -> str:
    """A typed scalar constant (shape ``[1]``, broadcasts against any tile); a symbolic
    lowering's size as its expression over the kernel's symbols (decision 0400)."""
    if type(value) is SizeValue or is_size_float(value):  # a float of sizes: 0500
        return f"tl.full([1], ({value}), {compute_type(dtype)})"
    if dtype is torch.bool:
        return f"tl.full([1], {1 if value else 0}, tl.int1)"
    if dtype.is_floating_point:
        value = float(value)
        if value == 0.0 and math.copysign(1.0, value) < 0:
            # Triton 3.6's tl.full makes any zero +0.0, and its -x is 0 - x (+0.0 again):
            # the sign bit alone, bitcast
            bits, width = (
                ("-9223372036854775808", "64")
                if dtype is torch.float64
                else (
                    "-2147483648",
                    "32",
                )
            )
            kind = compute_type(dtype)
            return f"tl.full([1], {bits}, tl.int{width}).to({kind}, bitcast=True)"
        text = f'float("{value}")' if math.isnan(value) or math.isinf(value) else repr(value)
    else:
        text = str(wrapped_integer(int(value), dtype))
    return f"tl.full([1], {text}, {compute_type(dtype)})"


def _constant(expr: Constant) -> str:
    """A constant; an integer equal to a size argument is spelled as it (a cat's bound)."""
    text = named_integer(expr.value, expr.dtype.is_floating_point)
    if text is not None:
        return f"(tl.full([1], 0, {compute_type(expr.dtype)}) + ({text}))"
    return literal(expr.value, expr.dtype)


def render_index(index: Index, reach: int = 0) -> str:
    """An index as Triton integer arithmetic: in the loop variables' own width where every
    value it takes, plus ``reach`` (what a caller adds to it), fits in int32, else in
    int64. A kernel's domain can be small while its offsets are not: a column of a
    ``[46341, 46341]`` tensor is 46341 elements read at offsets up to 2**31 (in int32 they
    wrapped around, reading outside the buffer)."""
    low, high = index.bounds()
    if low >= -(2**31) and high + reach < 2**31:
        return index.render(lambda name: name, "//", number, divisor)
    return index.render(lambda name: f"{name}.to(tl.int64)", "//", number, divisor)


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
        #: element counts that the module's size arguments hold (value -> name): a plain
        #: row or pointwise kernel's ``rnumel``/``xnumel`` (decision 0310)
        self.counts: dict[int, str] = {}
        #: the form each index is printed in (``flat_index.FlatIndices.choose``: over the
        #: flat ``xindex``/``rindex`` where that divides less, decision 0521); None: as is
        self.flat_index: Callable[[Index], Index] | None = None

    def index_text(self, index: Index, reach: int = 0) -> str:
        """:func:`render_index` of ``index`` in the form :attr:`flat_index` picks."""
        return render_index(index if self.flat_index is None else self.flat_index(index), reach)

    def offset(self, index: Index, row: bool = False) -> tuple[str, str]:
        """The offset text (shaped like the tile it belongs to) and its mask. With ``row``,
        a load the same for every row of a reduction (LayerNorm's weight) is one
        ``[1, RBLOCK]`` row masked by ``rmask`` alone, broadcast where it is used: as an
        ``[XBLOCK, RBLOCK]`` tile it was loaded once per row of the tile (decision 0465)."""
        if row and self.row_invariant(index):
            return self.index_text(index), "rmask"
        return f"{self.index_text(index)} + xzero", self.mask(index.variables())

    def row_invariant(self, index: Index) -> bool:
        """Whether ``index`` reads along a reduction's row only (no row variable)."""
        names = index.variables()
        return self.reduction and bool(names) and names <= self.red_names

    def mask(self, names: frozenset[str]) -> str:
        """The mask of a value of the loop variables ``names``: the row's, and the
        reduced dims' when it reads one (its tile is then ``[XBLOCK, RBLOCK]``)."""
        return "xmask & rmask" if self.reduction and names & self.red_names else "xmask"

    def render(self, expr: Expr, operands: Sequence[str]) -> str:
        """See :class:`~torchstrata.inductor.codegen.emitter.ExprPrinter`."""
        if isinstance(expr, Constant):
            return _constant(expr)
        if isinstance(expr, Load):
            guard = self.guards.get(expr) if self.name_of is not None else None
            index = expr.index if guard is None else guarded_index(expr, guard)
            # a guarded load's mask has the condition's shape: it keeps the tile's
            row = guard is None and self.row_invariant(index)
            offset, mask = self.offset(index, row)
            hint = ""
            if row and not self.interpret:
                hint = ", eviction_policy='evict_last'"  # every row reads it
            elif self.eviction and mask != "xmask":
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
            return f"({self.index_text(expr.index)} + xzero).to({compute_type(expr.dtype)})"
        if isinstance(expr, ReduceRef):
            return f"red_{expr.name}"
        assert isinstance(expr, Op)
        found = length_constant(expr, value_of(RED_PARAM))
        counted = None
        if found is not None:
            length = length_text(RED_PARAM, found[2])
            counted = (found[0], length, 1.0 if found[1] else None)
        if counted is None and self.counts:  # decision 0310
            counted = count_constant(expr, self.counts, self._per_element)
        if counted is not None:  # a count the kernel takes as a size argument (0286, 0310)
            position, count, numerator = counted
            kind = compute_type(expr.dtype)
            # the reciprocal in float64 (IEEE on every target), rounded as the literal was
            over = f"tl.full([1], {numerator!r}, tl.float64)"
            text = (
                f"({over} / {count}).to({kind})"
                if numerator is not None
                else f"(tl.full([1], 0, {kind}) + {count})"
            )
            operands = [*operands[:position], text, *operands[position + 1 :]]
        return self._op(expr, operands)

    def _per_element(self, expr: Expr) -> bool:
        """Does ``expr`` differ along a tile's elements (a reduction's row, or any
        variable of a pointwise kernel)? A division of one is kept by a literal."""
        found = variables(expr)
        return bool(found & self.red_names if self.reduction else found)

    def _indirect_load(self, expr: IndirectLoad, position: str) -> str:
        """``tl.load`` of element ``index + stride * position``, masked to ``0 <= position <
        size`` (one unsigned compare) and NaN outside. The offset is int64: the position
        is (and is cast to be), and ``index`` is computed in int64 too when the gathered
        buffer may pass 2**31 elements (it can be far larger than the kernel's domain)."""
        base = self.index_text(expr.index, reach=expr.stride * max(expr.size - 1, 0))
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
                return half_round(args[0], expr.dtype)
            return f"{args[0]}.to({compute_type(expr.dtype)})"
        if name == "where":
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        if name == "div":
            if operand_dtype.is_floating_point:
                return f"{args[0]} / {args[1]}"
            return (
                f"tl.where({args[1]} == 0, 0, {args[0]} // tl.where({args[1]} == 0, 1, {args[1]}))"
            )
        if name == "neg" and operand_dtype.is_floating_point:
            return f"({args[0]} * -1.0)"  # Triton 3.6's -x is 0 - x: +0.0 for +0.0
        if name == "bitwise_not":
            return f"{args[0]} == 0" if operand_dtype is torch.bool else f"~{args[0]}"
        if name == KernelOp.RAND_BITS.value:
            return f"_ts_rand_bits({args[0]}, {args[1]}, {args[2]})"
        for table in (_TL_UNARY, _LIBDEVICE_UNARY, _BINARY, _LIBDEVICE_BINARY):
            if name in table:
                return table[name].format(*args)
        raise NotImplementedError(f"prims.{name} in Triton")

    def define(self, name: str, expr: Expr, text: str) -> str:
        """See :class:`~torchstrata.inductor.codegen.emitter.ExprPrinter`."""
        return f"{name} = {text}"


def kernel_roots(kernel: Kernel) -> Iterable[Expr]:
    """Every expression a kernel computes from: reduction bodies, then stored values."""
    yield from (spec.body for spec in kernel.reductions)
    yield from (store.value for store in (*kernel.row_stores, *kernel.full_stores))
    if kernel.tail is not None:
        yield from (spec.body for spec in kernel.tail.reductions)
        yield from (store.value for store in kernel.tail.stores)
    if kernel.partials is not None:
        yield from (spec.body for spec in kernel.partials.reductions)


def derive_lines(vars_: Sequence[Var], flat: str) -> list[str]:
    """Assignments of the loop variables ``vars_`` from the flat (row-major) index ``flat``."""
    strides = row_major_strides([v.size for v in vars_])
    lines = []
    over = frozenset({flat})
    for dim, (var, stride) in enumerate(zip(vars_, strides, strict=True)):
        # a symbolic stride divides at every size, 1 included (``x[..., -(n // 3):]``:
        # deciding ``stride != 1`` pinned the sizes where it is 1, decision 0480)
        text = flat if same_size(stride, 1) else f"{flat} // {divisor(stride, over)}"
        size = divisor(var.size, over)
        lines.append(f"{var.name} = {f'({text}) % {size}' if dim > 0 else text}")
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
    offset = printer.index_text(store.index) + " + xzero"
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
    """Reduce the ``[XBLOCK, RBLOCK]`` tile ``values`` along the row, keeping dims (with
    ``axis=0``, across its rows: a column sum); with ``axis=2``, the ``[XBLOCK, groups,
    group]`` tile ``values`` within each group, dropping the group's dim."""
    keep = axis != 2
    if interpret and spec.kind in _INTERPRETER_COMBINE_FN:
        combine = _INTERPRETER_COMBINE_FN[spec.kind]
        text = f"tl.reduce({values}, {axis}, {combine}, keep_dims={keep})"
        if spec.dtype.is_floating_point:
            return f"_ts_nan_if_any({values}, {text}, {axis}, {keep})"
        return text
    return f"tl.reduce({values}, {axis}, {_COMBINE_FN[spec.kind]}, keep_dims={keep})"


#: The parameter of every generated kernel holding its number of rows (elements of a
#: pointwise kernel): the masks of the plain row and pointwise kernels compare with it.
ROWS_PARAM = "xnumel"
#: The parameter of every generated reduction kernel holding its number of reduced
#: elements per row: the plain row kernels' ``rmask`` and loops compare with it, so kernels
#: that differ only in it (a softmax over a symbolic last dim, a column sum over ``B*T``
#: rows) are one source (decision 0250).
RED_PARAM = "rnumel"


#: The parameter of a kernel with column partial sums holding the rows each program walks
#: (``partials.py``; decision 0340).
PARTIALS_CHUNK_PARAM = "xchunk"


def part_rows_param(part: int) -> str:
    """The parameter of a horizontal kernel holding the elements of its part ``part``
    (each part's offset is the sum of the earlier ones'): decision 0250."""
    return f"{ROWS_PARAM}_p{part}"


def size_params(kernel: Kernel) -> list[str]:
    """The size parameters of ``kernel``'s module, after its buffers: ``xnumel``, then a
    reduction's ``rnumel`` or a horizontal kernel's parts' element counts, a kernel with
    partials' ``xchunk``, a cat's sizes; then a symbolic lowering's symbols."""
    parts = [part_rows_param(i) for i in range(len(kernel.parts))]
    chunk = [PARTIALS_CHUNK_PARAM] if kernel.partials is not None else []
    red = [RED_PARAM] if kernel.red_shape else []
    return [ROWS_PARAM, *red, *parts, *chunk, *cat_params(kernel), *symbol_params()]


def size_values(kernel: Kernel) -> dict[str, int]:
    """The values of :func:`size_params` beyond ``xnumel`` (which launches pass from the
    rows they compute the grid from)."""
    values = {part_rows_param(i): part.rows for i, part in enumerate(kernel.parts)}
    if kernel.partials is not None:
        values[PARTIALS_CHUNK_PARAM] = kernel.partials.chunk
    values |= dict(zip(cat_params(kernel), cat_sizes(kernel), strict=True))
    return {RED_PARAM: kernel.row_length} | values if kernel.red_shape else values


def module_source(
    kernel: Kernel, lines: Sequence[str], interpret: bool, extra_params: Sequence[str] = ()
) -> str:
    """The module text: the header, then ``kernel`` as a ``@triton.jit`` function of its
    buffers, ``extra_params`` (scratch buffers), its number of rows ``xnumel`` (passed at
    launch: kernels that differ only in it are one source), a reduction's row length
    ``rnumel`` (:data:`RED_PARAM`, likewise) and ``XBLOCK``/``RBLOCK``, body ``lines``."""
    symbols = symbol_params()  # a symbolic lowering's, and its reductions' rows: 0400
    # a static lowering's row length is a constexpr (a binary per length, as Inductor's
    # literal): its masks and offsets fold, 65.6 -> 50.7 us for LayerNorm over rows of 771
    # fp16 on the H100 (decision 0465)
    sizes = [
        f"{name}: tl.constexpr" if name == RED_PARAM and not symbols else name
        for name in size_params(kernel)
    ]
    params = ", ".join(
        [arg.name for arg in kernel.args]
        + list(extra_params)
        + [*sizes, "XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    )
    source = module_header(interpret)
    kept = list(symbols)
    if symbols and kernel.red_shape:  # or a GPU column sum's row length (0440)
        kept.insert(0, RED_PARAM if not interpret and column_sum(kernel) else ROWS_PARAM)
    jit = f"triton.jit(do_not_specialize={kept!r})" if kept else "triton.jit"
    return (
        source
        + f"\n@{jit}\ndef {kernel.name}({params}):\n"
        + "".join(f"    {line}\n" for line in lines)
    )
