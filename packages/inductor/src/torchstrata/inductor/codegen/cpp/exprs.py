"""C++ spelling shared by the C++ kernel generators: types, literals, expressions, stores.

16-bit floats are stored as ``uint16_t`` and computed in ``float``; max/min are
NaN-propagating like torch. ``where``, max and min are bitwise selects, so that loops that
also call vectorisable math functions stay branch-free (GCC 12 does not if-convert a
conditional in a loop that calls a function which may set ``errno``, such as ``expf``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

from torchstrata.core import SizeValue, is_size_float, same_size
from torchstrata.inductor.codegen.cpp.checks import (
    check_update,
    checked_function,
    checked_rows_function,
    index_in_range,
    kernel_checks,
)
from torchstrata.inductor.codegen.cpp.division import (
    CHECKED_HELPERS,
    HELPERS,
    division_update,
    may_divide_by_zero,
    needs_safe_divisor,
    uses_safe_divisors,
)
from torchstrata.inductor.codegen.cpp.erf import erf_call, erf_prelude
from torchstrata.inductor.codegen.cpp.half import half_prelude
from torchstrata.inductor.codegen.cpp.half_loops import block_half_loops
from torchstrata.inductor.codegen.cpp.parallel import OMP_DECLARATIONS, rows_function
from torchstrata.inductor.codegen.cpp.tiles import transpose_prelude
from torchstrata.inductor.codegen.infix import INFIX_BINARY
from torchstrata.inductor.codegen.size_constants import (
    count_constant,
    length_constant,
    length_text,
)
from torchstrata.inductor.codegen.size_names import divisor, named_integer, number, value_of
from torchstrata.inductor.ir.exprs import (
    Constant,
    Expr,
    IndexValue,
    IndirectLoad,
    Load,
    Op,
    ReduceRef,
)
from torchstrata.inductor.ir.indexing import Index, Var, row_major_strides
from torchstrata.inductor.ir.kernel import Kernel, Store
from torchstrata.inductor.ir.kernel_ops import KernelOp

STORAGE_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "uint16_t",
    torch.bfloat16: "uint16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.int16: "int16_t",
    torch.int32: "int32_t",
    torch.int64: "int64_t",
    torch.bool: "bool",
}
HALF_TYPES = (torch.float16, torch.bfloat16)
PARALLEL_THRESHOLD = 32768  # elements below which OpenMP's fork costs more than it saves
PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

template <typename T> static inline T ts_where(bool c, T a, T b) {
  const T m = static_cast<T>(-static_cast<int64_t>(c)); return static_cast<T>((a & m) | (b & static_cast<T>(~m)));
}
template <> inline bool ts_where<bool>(bool c, bool a, bool b) { return (c & a) | (!c & b); }
template <> inline float ts_where<float>(bool c, float a, float b) {
  uint32_t x, y; std::memcpy(&x, &a, 4); std::memcpy(&y, &b, 4);
  const uint32_t m = -static_cast<uint32_t>(c); x = (x & m) | (y & ~m); std::memcpy(&a, &x, 4); return a;
}
template <> inline double ts_where<double>(bool c, double a, double b) {
  uint64_t x, y; std::memcpy(&x, &a, 8); std::memcpy(&y, &b, 8);
  const uint64_t m = -static_cast<uint64_t>(c); x = (x & m) | (y & ~m); std::memcpy(&a, &x, 8); return a;
}
// 16-bit floats <-> float on the bit patterns: integer arithmetic, float adds that are
// exact and selects, no branches or _Float16 (GCC 12 vectorises no _Float16 conversion),
// so that omp simd loops convert a whole vector at once. Bit for bit the hardware's
// conversions (checked on all 2**32 floats): round to nearest even, NaN kept and quieted.
static inline float ts_bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t ts_f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float ts_bf16_to_f32(uint16_t h) { return ts_bits_f32(static_cast<uint32_t>(h) << 16); }
// NaN by a float compare and a plain select, then one shift or mask (decision 0517: four
// instructions fewer per vector than an integer NaN test and two masked results).
static inline uint16_t ts_f32_to_bf16(float f) {
  const uint32_t u = ts_f32_bits(f);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((f != f ? u | 0x00400000u : rounded) >> 16);
}
// A float rounded to the nearest bf16 and widened back (an op whose result eager stores
// in 16 bits): the two conversions above fused, in 32-bit lanes throughout. fp16's
// conversions follow the prelude in kernels that use them (codegen/cpp/half.py).
static inline float ts_round_bf16(float f) {
  const uint32_t u = ts_f32_bits(f);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return ts_bits_f32((f != f ? u | 0x00400000u : rounded) & 0xffff0000u);
}
// The bits of a float that is a bf16 value already (one that ts_round_bf16 returned).
static inline uint16_t ts_bf16_bits(float r) { return static_cast<uint16_t>(ts_f32_bits(r) >> 16); }
// Integers: a plain select (GCC 12 gives the initial value back from an `omp simd
// reduction(max:acc)` whose update is the masked select on integers, at trip counts 2, 8,
// 16: amax of [-3, -2] was INT_MIN). Floats: NaN wins, as in torch.
template <typename T> static inline T ts_max(T a, T b) { return a > b ? a : b; }
template <typename T> static inline T ts_min(T a, T b) { return a < b ? a : b; }
template <> inline float ts_max<float>(float a, float b) { return ts_where<float>((a != a) | (a > b), a, b); }
template <> inline float ts_min<float>(float a, float b) { return ts_where<float>((a != a) | (a < b), a, b); }
template <> inline double ts_max<double>(double a, double b) { return ts_where<double>((a != a) | (a > b), a, b); }
template <> inline double ts_min<double>(double a, double b) { return ts_where<double>((a != a) | (a < b), a, b); }
// exp of a float, inline so that omp simd loops vectorise it (a call to libmvec's expf
// costs about twice as much): x = k ln2 + r (Cody-Waite, |r| <= ln2/2), e^r by Cephes'
// polynomial 1 + r + r^2 P(r) (within about 1 ulp), then 2**k in two exact steps so that
// results down through the subnormals round once. Selects, not branches: x beyond
// [-104, 100] is clamped there (results 0 and +inf, as expf's); NaN passes through (a
// compare with NaN is false: one vmaxps/vminps per clamp, decision 0518).
static inline float ts_exp_f32(float x) {
  float c = x < -104.0f ? -104.0f : x;
  c = c > 100.0f ? 100.0f : c;
  const float k = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - k * 0.693145751953125f;
  r = r - k * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t ki = static_cast<int32_t>(k != k ? 0.0f : k);  // NaN: p is NaN
  const int32_t k1 = ki >> 1;
  const uint32_t b1 = static_cast<uint32_t>(k1 + 127) << 23;
  const uint32_t b2 = static_cast<uint32_t>(ki - k1 + 127) << 23;
  float s1, s2; std::memcpy(&s1, &b1, 4); std::memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}
template <typename T> static inline T ts_div_int(T a, T b) { return b == 0 ? T(0) : T(a / b); }
template <typename T> static inline T ts_fmod_int(T a, T b) { return b == 0 ? T(0) : T(a % b); }
template <typename T> static inline T ts_rem_int(T a, T b) {
  if (b == 0) return T(0); T r = T(a % b); return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
}
template <typename T> static inline T ts_rem_float(T a, T b) {
  T r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T ts_sign(T a) { return T((a > T(0)) - (a < T(0))); }  // NaN -> 0, as torch.sign
// prims.rand's hash (core.prims_indexing.rand): lowbias32 of the seed, the counter's low
// word and its high word; the top `bits` of the result.
static inline uint32_t ts_mix32(uint32_t x) {
  x ^= x >> 16; x *= 0x7FEB352Du; x ^= x >> 15; x *= 0x846CA68Bu; return x ^ (x >> 16);
}
static inline int64_t ts_rand_bits(int64_t seed, int64_t c, int64_t bits) {
  const uint32_t high = ts_mix32(static_cast<uint32_t>((c >> 32) + 0x9E3779B9LL));
  const uint32_t h = ts_mix32(ts_mix32(static_cast<uint32_t>(seed)) ^ static_cast<uint32_t>(c) ^ high);
  return static_cast<int64_t>(h >> (32 - bits));
}
"""

#: ``std::`` math functions of one argument that kernels call under their own name; only
#: floating-point operands are supported (see :func:`supports`). The light prelude
#: declares each (see :mod:`~torchstrata.inductor.codegen.cpp.prelude`).
FLOAT_MATH_FUNCTIONS = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log1p",
    "sqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "erf",
)

_UNARY = {
    **{name: f"std::{name}({{}})" for name in FLOAT_MATH_FUNCTIONS},
    "floor": "std::floor({})",
    "ceil": "std::ceil({})",
    "trunc": "std::trunc({})",
    "round": "std::nearbyint({})",
    "rsqrt": "1 / std::sqrt({})",
    "reciprocal": "1 / ({})",
    "neg": "-({})",
    "isnan": "({0} != {0})",
    "isinf": "std::isinf({})",
    "sign": "ts_sign({})",
}
_BINARY = {
    **INFIX_BINARY,
    "maximum": "ts_max({}, {})",
    "minimum": "ts_min({}, {})",
    "atan2": "std::atan2({}, {})",
    "pow": "std::pow({}, {})",
}
_FLOAT_ONLY = frozenset(
    {
        *FLOAT_MATH_FUNCTIONS,
        "rsqrt",
        "reciprocal",
        "atan2",
        "pow",
        "isinf",
    }
)


_BOOL_UNSUPPORTED = frozenset(
    {
        "add",
        "sub",
        "mul",
        "div",
        "remainder",
        "fmod",
        "neg",
        "abs",
        "sign",
        "maximum",
        "minimum",
        "sum",
        "prod",
        "amax",
        "amin",
        "pow",
    }
)


def compute_type(dtype: torch.dtype) -> str:
    """The C++ type values of ``dtype`` are computed in."""
    return "float" if dtype in HALF_TYPES else STORAGE_TYPES[dtype]


def exp_call(argument: str, ctype: str) -> str:
    """``exp(argument)`` computed in ``ctype``: the prelude's inline ``ts_exp_f32`` for
    floats, the library's ``std::exp`` otherwise."""
    return f"ts_exp_f32({argument})" if ctype == "float" else f"std::exp({argument})"


def supports(name: str, dtype: torch.dtype) -> bool:
    """Can this backend generate prims.``name`` on operands of ``dtype``?"""
    if dtype not in STORAGE_TYPES:
        return False
    if name in _FLOAT_ONLY and not dtype.is_floating_point:
        return False
    return not (dtype is torch.bool and name in _BOOL_UNSUPPORTED)


def literal(value: int | float | bool | SizeValue, dtype: torch.dtype) -> str:
    """A C++ literal of ``value`` in the compute type of ``dtype``; a size of a symbolic
    lowering is its expression over the symbols, which every kernel takes (decision 0382)
    and converts as the literal of its value would be."""
    ctype = compute_type(dtype)
    if dtype is torch.bool:
        return "true" if value else "false"
    if type(value) is SizeValue or is_size_float(value):  # a float of sizes: 0500
        return f"static_cast<{ctype}>({value})"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return f"static_cast<{ctype}>(NAN)"
        if math.isinf(value):
            return f"static_cast<{ctype}>({'' if value > 0 else '-'}INFINITY)"
        return f"static_cast<{ctype}>({value!r})"
    value = int(value)
    if value == -(2**63):
        return "static_cast<int64_t>(-9223372036854775807LL - 1)"
    return f"static_cast<{ctype}>({value}LL)"


def _constant(expr: Constant) -> str:
    """A constant; an integer equal to a size argument is spelled as it (a cat's bound)."""
    text = named_integer(expr.value, expr.dtype.is_floating_point)
    if text is not None:
        return f"static_cast<{compute_type(expr.dtype)}>({text})"
    return literal(expr.value, expr.dtype)


def render_index(index: Index) -> str:
    """An index as C++ (int64 arithmetic); coefficients and constants that equal a size
    argument are spelled as it (:mod:`~torchstrata.inductor.codegen.size_names`)."""
    return index.render(lambda name: name, "/", number, divisor)


class CppPrinter:
    """Spells expressions in C++.

    An indirect load's definition also records whether its index is in range (see
    :func:`~torchstrata.inductor.codegen.cpp.checks.check_update`), and an integer division's
    whether its divisor is zero (:func:`~torchstrata.inductor.codegen.cpp.division.division_update`):
    :meth:`render` keeps the name of the index or divisor until :meth:`define`, which the
    emitter calls right after.
    """

    def __init__(
        self,
        counts: Mapping[int, str] | None = None,
        per_element: Callable[[Expr], bool] | None = None,
    ) -> None:
        self._positions: dict[Expr, str] = {}
        self._divisors: dict[Expr, str] = {}
        #: element counts the kernel computes from its size arguments (value -> C++ text)
        #: and whether a value is per element (decisions 0310, 0392: ``count_constant``),
        #: which a printer with counts must be told (set here or once its emitter exists)
        self.counts = dict(counts or {})
        self.per_element = per_element

    def render(self, expr: Expr, operands: Sequence[str]) -> str:
        """See :class:`~torchstrata.inductor.codegen.emitter.ExprPrinter`."""
        if isinstance(expr, Constant):
            return _constant(expr)
        if isinstance(expr, Load):
            return _element(expr.buffer, render_index(expr.index), expr.dtype)
        if isinstance(expr, IndirectLoad):
            self._positions[expr] = operands[0]
            return _indirect_element(expr, operands[0])
        if isinstance(expr, IndexValue):
            return f"static_cast<{compute_type(expr.dtype)}>({render_index(expr.index)})"
        if isinstance(expr, ReduceRef):
            return f"red_{expr.name}"
        assert isinstance(expr, Op)
        found = length_constant(expr, value_of("red_len"))  # generate.RED_LEN_PARAM
        counted = None
        if found is not None:
            length = length_text("red_len", found[2])
            counted = (found[0], length, 1.0 if found[1] else None)
        if counted is None and self.counts:  # decision 0310
            assert self.per_element is not None, "a printer with counts needs per_element"
            counted = count_constant(expr, self.counts, self.per_element)
        if counted is not None:  # a count computed from the size arguments (0286, 0310)
            position, count, numerator = counted
            ctype = compute_type(expr.dtype)
            text = f"static_cast<{ctype}>({count})"
            if numerator is not None:  # in double, rounded as the literal was
                text = f"static_cast<{ctype}>({numerator!r} / static_cast<double>({count}))"
            operands = [*operands[:position], text, *operands[position + 1 :]]
        return self._op(expr, operands)

    def _op(self, expr: Op, args: Sequence[str]) -> str:
        name, ctype = expr.name, compute_type(expr.dtype)
        operand_dtype = expr.args[0].dtype
        is_float = operand_dtype.is_floating_point
        if name == "convert_element_type":
            if expr.dtype is torch.bool:
                return f"({args[0]} != 0)"
            if expr.dtype is torch.float16:
                return f"ts_round_f16(static_cast<float>({args[0]}))"
            if expr.dtype is torch.bfloat16:
                return f"ts_round_bf16(static_cast<float>({args[0]}))"
            return f"static_cast<{ctype}>({args[0]})"
        if name == "where":
            return f"ts_where<{ctype}>({args[0]}, {args[1]}, {args[2]})"
        if may_divide_by_zero(expr):
            self._divisors[expr] = args[1]
        if needs_safe_divisor(expr):  # a divisor that may be 0 or -1 (see cpp_division)
            text = f"{CHECKED_HELPERS[name]}({args[0]}, {args[1]})"
        elif name == "div":
            text = f"{args[0]} / {args[1]}" if is_float else f"ts_div_int({args[0]}, {args[1]})"
        elif name == "remainder":
            text = f"ts_rem_{'float' if is_float else 'int'}({args[0]}, {args[1]})"
        elif name == "fmod":
            text = (
                f"std::fmod({args[0]}, {args[1]})"
                if is_float
                else f"ts_fmod_int({args[0]}, {args[1]})"
            )
        elif name == "exp":
            text = exp_call(args[0], ctype)
        elif name == "erf":
            text = erf_call(args[0], ctype)
        elif name == "abs":
            text = f"std::abs({args[0]})"
        elif name == "bitwise_not":
            text = f"!({args[0]})" if operand_dtype is torch.bool else f"~({args[0]})"
        elif name == KernelOp.RAND_BITS.value:
            text = f"ts_rand_bits({args[0]}, {args[1]}, {args[2]})"
        elif name in _UNARY:
            text = _UNARY[name].format(*args)
        else:
            text = _BINARY[name].format(*args)
        return f"static_cast<{ctype}>({text})"

    def define(self, name: str, expr: Expr, text: str) -> str:
        """See :class:`~torchstrata.inductor.codegen.emitter.ExprPrinter`."""
        line = f"const {compute_type(expr.dtype)} {name} = {text};"
        position = self._positions.pop(expr, None)
        if isinstance(expr, IndirectLoad) and position is not None:
            line += " " + check_update(expr, position)
        divisor = self._divisors.pop(expr, None)
        if divisor is not None:
            line += " " + division_update(divisor)
        return line


def _element(buffer: str, offset: str, dtype: torch.dtype) -> str:
    """Element ``offset`` of ``buffer``, in the compute type of ``dtype``."""
    text = f"{buffer}[{offset}]"
    if dtype is torch.float16:
        return f"ts_f16_to_f32({text})"
    if dtype is torch.bfloat16:
        return f"ts_bf16_to_f32({text})"
    return text


def _indirect_element(expr: IndirectLoad, position: str) -> str:
    """An indirect load whose ``position`` (a name) is the gathered index: NaN where it is
    outside ``[0, size)``, and loaded there at position 0 instead, so that no lane of a
    vectorised loop (which may gather every lane at once) reads outside the buffer.
    ``0 <= p < size`` is one unsigned compare. (The kernel also reports such an index,
    see :mod:`~torchstrata.inductor.codegen.cpp.checks`: the call raises.)"""
    inside = index_in_range(position, expr.size)
    clamped = f"ts_where<int64_t>({inside}, static_cast<int64_t>({position}), 0)"
    # a symbolic stride is an int64_t expression of the kernel's symbols (no ``LL``)
    stride = f"{expr.stride}LL" if type(expr.stride) is int else f"{expr.stride}"
    step = clamped if same_size(expr.stride, 1) else f"{stride} * {clamped}"
    offset = f"{render_index(expr.index)} + {step}"
    ctype = compute_type(expr.dtype)
    element = _element(expr.buffer, offset, expr.dtype)
    return f"ts_where<{ctype}>({inside}, {element}, static_cast<{ctype}>(NAN))"


def store_line(store: Store, value: str) -> str:
    """The statement storing ``value`` (the C++ text of ``store.value``). A 16-bit value
    that is one already (rounded by the usual final ``convert_element_type``, or loaded) is
    stored by its bits, without rounding again."""
    target = f"{store.buffer}[{render_index(store.index)}]"
    if store.dtype in HALF_TYPES:
        value_expr = store.value
        rounded = value_expr.dtype == store.dtype and (
            isinstance(value_expr, Load)
            or (isinstance(value_expr, Op) and value_expr.name == "convert_element_type")
        )
        short = "f16" if store.dtype is torch.float16 else "bf16"
        function = f"ts_{short}_bits" if rounded else f"ts_f32_to_{short}"
        return f"{target} = {function}({value});"
    return f"{target} = static_cast<{STORAGE_TYPES[store.dtype]}>({value});"


def emit_store(store: Store, emit: Callable[[Expr], str]) -> str:
    """:func:`store_line` of ``store``, its value (and what that needs) emitted by ``emit``.

    An fp16 value that a ``convert_element_type`` rounded is stored by narrowing the float
    it rounded (``ts_store_f16``, bit for bit the same): with F16C one conversion, where
    rounding and then taking the bits is two. The rounded value's line stays, dead (and
    dropped by the compiler) unless something else uses it."""
    value = emit(store.value)
    rounding = store.value
    if (
        store.dtype is torch.float16
        and isinstance(rounding, Op)
        and rounding.name == "convert_element_type"
        and rounding.dtype is torch.float16
        and rounding.args[0].dtype.is_floating_point
    ):
        target = f"{store.buffer}[{render_index(store.index)}]"
        return f"{target} = ts_store_f16(static_cast<float>({emit(rounding.args[0])}));"
    return store_line(store, value)


def derive_vars(vars_: Sequence[Var], flat: str) -> list[str]:
    strides = row_major_strides([v.size for v in vars_])
    lines = []
    over = frozenset({flat})
    for dim, (var, stride) in enumerate(zip(vars_, strides, strict=True)):
        text = f"{flat} / {divisor(stride, over)}" if stride != 1 else flat
        if dim > 0:
            text = f"({text}) % {divisor(var.size, over)}"
        lines.append(f"const int64_t {var.name} = {text};")
    return lines


def _loop_header(var: Var) -> str:
    return loop_header(var, number(var.size))


def loop_header(var: Var, bound: str | int) -> str:
    """The ``for`` line of a loop of ``var`` from 0 to ``bound`` (a size or a parameter)."""
    return f"for (int64_t {var.name} = 0; {var.name} < {bound}; ++{var.name}) {{"


def nested_loops(vars_: Sequence[Var], body: list[str], pragma: str) -> list[str]:
    """Loops over ``vars_`` (outermost first) around ``body``; ``pragma`` on the innermost."""
    lines: list[str] = []
    for depth, var in enumerate(vars_):
        if depth == len(vars_) - 1 and pragma:
            lines.append(pragma)
        lines.append(_loop_header(var))
    lines += ["  " + line for line in body]
    lines += ["}"] * len(vars_)
    return lines


def split_loops(outer: Sequence[Var], innermost: Sequence[tuple[Var, list[str], str]]) -> list[str]:
    """Loops over ``outer`` around consecutive innermost loops, each a (var, body, pragma)."""
    lines: list[str] = []
    for var, body, pragma in innermost:
        lines += nested_loops([var], body, pragma)
    return enclose_loops(outer, lines)


def enclose_loops(outer: Sequence[Var], lines: list[str]) -> list[str]:
    """Loops over ``outer`` (outermost first) around ``lines``."""
    for var in reversed(outer):
        lines = [_loop_header(var), *("  " + line for line in lines), "}"]
    return lines


COMBINE = {
    "sum": "{acc} + {v}",
    "prod": "{acc} * {v}",
    "amax": "ts_max({acc}, {v})",
    "amin": "ts_min({acc}, {v})",
}


def simd_declarations(functions: frozenset[str]) -> str:
    """``omp declare simd`` declarations of libmvec functions, so that SIMD loops call them."""
    lines = ['extern "C" {']
    for name in sorted(functions):
        arity = SIMD_ARITY.get(name, 1)
        for ctype, suffix in (("float", "f"), ("double", "")):
            params = ", ".join([ctype] * arity)
            lines += ["#pragma omp declare simd notinbranch", f"{ctype} {name}{suffix}({params});"]
    return "\n".join([*lines, "}"]) if functions else ""


SIMD_ARITY = {"pow": 2, "atan2": 2}


def kernel_source(
    kernel: Kernel,
    body: Sequence[str],
    simd_functions: frozenset[str],
    sizes: Sequence[str] = (),
    rows_body: Sequence[str] = (),
    rows_params: Sequence[str] = (),
) -> str:
    """A whole translation unit: the prelude, SIMD declarations and ``kernel``'s function.

    ``body`` holds the function's statements; buffers the kernel stores to are the only
    non-``const`` pointers; ``sizes`` name ``int64_t`` parameters after the buffers (the
    outer loop's trip count). A kernel with indirect loads or integer divisions by values
    also checks their indices or divisors
    (:func:`~torchstrata.inductor.codegen.cpp.checks.checked_function`); any other is a ``void``
    function of its buffers alone. The helpers of checked divisions follow the prelude in
    the kernels that use them only. A non-empty ``rows_body`` (a loop over the rows from
    ``row_lo`` to ``row_hi``, which ``body`` calls: decision 0359) becomes a function of
    its own before the kernel's, taking the same parameters, ``rows_params`` (C++
    declarations of values that ``body`` computes before calling it) and the range; a
    checked kernel's also takes a pointer per flag (``checks.flag_arguments``).
    """
    body, rows_body = block_half_loops(body), block_half_loops(rows_body)  # decision 0516
    stored = {s.buffer for s in kernel.row_stores + kernel.full_stores}
    params = ", ".join(
        [
            *(
                f"{'' if arg.name in stored else 'const '}{STORAGE_TYPES[arg.dtype]}* __restrict__ {arg.name}"
                for arg in kernel.args
            ),
            *(f"const int64_t {size}" for size in sizes),
        ]
    )
    outlined = []
    if rows_body:
        extra, statements = list(rows_params), list(rows_body)
        if kernel_checks(kernel):  # the flags its loops set, through pointers
            flags, statements = checked_rows_function(kernel, rows_body)
            extra += flags
        outlined = [*OMP_DECLARATIONS, *rows_function(", ".join([params, *extra]), statements)]
    text = "\n".join([*outlined, *body])
    used = frozenset(name for name in simd_functions if f"std::{name}(" in text)
    head = f'extern "C" void {kernel.name}({params}'
    if kernel_checks(kernel):  # returns which check failed, if any (see cpp_checks)
        function = checked_function(head, body, kernel, CppPrinter, sizes)
    else:
        function = [head + ") {", *("  " + line for line in body), "}"]
    prelude = PRELUDE + HELPERS if uses_safe_divisors(kernel) else PRELUDE
    prelude += half_prelude(text) + erf_prelude(text) + transpose_prelude(text)
    return "\n".join([prelude, simd_declarations(used), *outlined, *function, ""])
