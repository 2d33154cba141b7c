"""C++ backend: a :class:`Kernel` as plain C++ over raw pointers (no torch headers).

Rows are an OpenMP ``parallel for``; each reduction is a loop over the reduced dims
(``omp simd`` on the innermost); 16-bit floats are stored as ``uint16_t`` and computed in
``float``. Max/min are NaN-propagating like torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torchstrata.inductor.emitter import ExprEmitter
from torchstrata.inductor.exprs import (
    Constant,
    Expr,
    IndexValue,
    Load,
    Op,
    ReduceRef,
    reductions_used,
)
from torchstrata.inductor.indexing import Index, Var, linear_offset, row_major_strides
from torchstrata.inductor.infix import INFIX_BINARY
from torchstrata.inductor.kernel import (
    Kernel,
    ReductionSpec,
    Store,
    red_vars,
    reduction_identity,
    row_vars,
)
from torchstrata.inductor.row_cache import plan_row_cache

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

static inline float ts_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t ts_f32_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16);
}
static inline float ts_f16_to_f32(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
static inline uint16_t ts_f32_to_f16(float f) { _Float16 v = (_Float16)f; uint16_t h; std::memcpy(&h, &v, 2); return h; }
template <typename T> static inline T ts_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> static inline T ts_min(T a, T b) { return (a != a || a < b) ? a : b; }
template <typename T> static inline T ts_div_int(T a, T b) { return b == 0 ? T(0) : T(a / b); }
template <typename T> static inline T ts_fmod_int(T a, T b) { return b == 0 ? T(0) : T(a % b); }
template <typename T> static inline T ts_rem_int(T a, T b) {
  if (b == 0) return T(0); T r = T(a % b); return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
}
template <typename T> static inline T ts_rem_float(T a, T b) {
  T r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T ts_sign(T a) { return a != a ? a : T((a > T(0)) - (a < T(0))); }
"""

_UNARY = {
    "exp": "std::exp({})",
    "exp2": "std::exp2({})",
    "expm1": "std::expm1({})",
    "log": "std::log({})",
    "log2": "std::log2({})",
    "log1p": "std::log1p({})",
    "sqrt": "std::sqrt({})",
    "sin": "std::sin({})",
    "cos": "std::cos({})",
    "tan": "std::tan({})",
    "tanh": "std::tanh({})",
    "asin": "std::asin({})",
    "acos": "std::acos({})",
    "atan": "std::atan({})",
    "sinh": "std::sinh({})",
    "cosh": "std::cosh({})",
    "erf": "std::erf({})",
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


def supports(name: str, dtype: torch.dtype) -> bool:
    """Can this backend generate prims.``name`` on operands of ``dtype``?"""
    if dtype not in STORAGE_TYPES:
        return False
    if name in _FLOAT_ONLY and not dtype.is_floating_point:
        return False
    return not (dtype is torch.bool and name in _BOOL_UNSUPPORTED)


def literal(value: int | float | bool, dtype: torch.dtype) -> str:
    """A C++ literal of ``value`` in the compute type of ``dtype``."""
    ctype = compute_type(dtype)
    if dtype is torch.bool:
        return "true" if value else "false"
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


def render_index(index: Index) -> str:
    """An index as C++ (int64 arithmetic)."""
    return index.render(lambda name: name, "/")


class CppPrinter:
    """Spells expressions in C++."""

    def render(self, expr: Expr, operands: Sequence[str]) -> str:
        """See :class:`~torchstrata.inductor.emitter.ExprPrinter`."""
        if isinstance(expr, Constant):
            return literal(expr.value, expr.dtype)
        if isinstance(expr, Load):
            text = f"{expr.buffer}[{render_index(expr.index)}]"
            if expr.dtype is torch.float16:
                return f"ts_f16_to_f32({text})"
            if expr.dtype is torch.bfloat16:
                return f"ts_bf16_to_f32({text})"
            return text
        if isinstance(expr, IndexValue):
            return f"static_cast<{compute_type(expr.dtype)}>({render_index(expr.index)})"
        if isinstance(expr, ReduceRef):
            return f"red_{expr.name}"
        assert isinstance(expr, Op)
        return self._op(expr, operands)

    def _op(self, expr: Op, args: Sequence[str]) -> str:
        name, ctype = expr.name, compute_type(expr.dtype)
        operand_dtype = expr.args[0].dtype
        is_float = operand_dtype.is_floating_point
        if name == "convert_element_type":
            if expr.dtype is torch.bool:
                return f"({args[0]} != 0)"
            if expr.dtype is torch.float16:
                return f"ts_f16_to_f32(ts_f32_to_f16(static_cast<float>({args[0]})))"
            if expr.dtype is torch.bfloat16:
                return f"ts_bf16_to_f32(ts_f32_to_bf16(static_cast<float>({args[0]})))"
            return f"static_cast<{ctype}>({args[0]})"
        if name == "where":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name == "div":
            text = f"{args[0]} / {args[1]}" if is_float else f"ts_div_int({args[0]}, {args[1]})"
        elif name == "remainder":
            text = f"ts_rem_{'float' if is_float else 'int'}({args[0]}, {args[1]})"
        elif name == "fmod":
            text = (
                f"std::fmod({args[0]}, {args[1]})"
                if is_float
                else f"ts_fmod_int({args[0]}, {args[1]})"
            )
        elif name == "abs":
            text = f"std::abs({args[0]})"
        elif name == "bitwise_not":
            text = f"!({args[0]})" if operand_dtype is torch.bool else f"~({args[0]})"
        elif name in _UNARY:
            text = _UNARY[name].format(*args)
        else:
            text = _BINARY[name].format(*args)
        return f"static_cast<{ctype}>({text})"

    def define(self, name: str, expr: Expr, text: str) -> str:
        """See :class:`~torchstrata.inductor.emitter.ExprPrinter`."""
        return f"const {compute_type(expr.dtype)} {name} = {text};"


def _store(store: Store, value: str) -> str:
    target = f"{store.buffer}[{render_index(store.index)}]"
    if store.dtype is torch.float16:
        return f"{target} = ts_f32_to_f16({value});"
    if store.dtype is torch.bfloat16:
        return f"{target} = ts_f32_to_bf16({value});"
    return f"{target} = static_cast<{STORAGE_TYPES[store.dtype]}>({value});"


def _derive(vars_: Sequence[Var], flat: str) -> list[str]:
    strides = row_major_strides([v.size for v in vars_])
    lines = []
    for dim, (var, stride) in enumerate(zip(vars_, strides, strict=True)):
        text = f"{flat} / {stride}" if stride != 1 else flat
        if dim > 0:
            text = f"({text}) % {var.size}"
        lines.append(f"const int64_t {var.name} = {text};")
    return lines


def _loops(vars_: Sequence[Var], body: list[str], pragma: str) -> list[str]:
    lines: list[str] = []
    for depth, var in enumerate(vars_):
        if depth == len(vars_) - 1 and pragma:
            lines.append(pragma)
        lines.append(f"for (int64_t {var.name} = 0; {var.name} < {var.size}; ++{var.name}) {{")
    lines += ["  " + line for line in body]
    lines += ["}"] * len(vars_)
    return lines


_COMBINE = {
    "sum": "{acc} + {v}",
    "prod": "{acc} * {v}",
    "amax": "ts_max({acc}, {v})",
    "amin": "ts_min({acc}, {v})",
}


_OMP_REDUCTION = {"sum": "+", "prod": "*", "amax": "max", "amin": "min"}


def _reduction_phase(
    emitter: ExprEmitter,
    reductions: Sequence[ReductionSpec],
    loop_vars: Sequence[Var],
    cache: RowCacheEmitter,
) -> list[str]:
    """One loop computing ``reductions``; each SIMD lane keeps its own accumulator.

    Lanes are combined by OpenMP, whose max/min may drop NaN, so float max/min also
    keep a per-lane "saw a NaN" flag (the result is NaN if any lane saw one).
    """
    emitter.open_inner()
    cache.enter(emitter)
    updates, inits, clauses, finals = [], [], [], []
    for spec in reductions:
        ctype = compute_type(spec.dtype)
        acc = f"acc_{spec.name}"
        identity = literal(reduction_identity(spec.kind, spec.dtype), spec.dtype)
        inits.append(f"{ctype} {acc} = {identity};")
        clauses.append(f"reduction({_OMP_REDUCTION[spec.kind]}:{acc})")
        value = emitter.emit(spec.body)
        updates.append(
            f"{acc} = static_cast<{ctype}>({_COMBINE[spec.kind].format(acc=acc, v=value)});"
        )
        result = acc
        if spec.kind in ("amax", "amin") and spec.dtype.is_floating_point:
            inits.append(f"int32_t nan_{spec.name} = 0;")  # a bool flag blocks vectorisation
            clauses.append(f"reduction(|:nan_{spec.name})")
            updates.append(f"nan_{spec.name} |= static_cast<int32_t>({value} != {value});")
            result = f"(nan_{spec.name} ? static_cast<{ctype}>(NAN) : {acc})"
        finals.append(f"const {ctype} red_{spec.name} = {result};")
    updates += cache.writes(emitter)
    body = emitter.close_inner() + updates
    pragma = "#pragma omp simd " + " ".join(clauses)
    return emitter.take_outer() + inits + _loops(loop_vars, body, pragma) + finals


class RowCacheEmitter:
    """Emits the scratch arrays of a row cache (see :mod:`~torchstrata.inductor.row_cache`)."""

    def __init__(self, cached: dict[Expr, int], loop_vars: Sequence[Var]) -> None:
        self.cached = cached
        self.slots = {expr: f"row_cache{i}" for i, expr in enumerate(cached)}
        flat = linear_offset(
            [Index.of(v) for v in loop_vars], row_major_strides([v.size for v in loop_vars])
        )
        self.position = render_index(flat)
        self.length = math.prod(v.size for v in loop_vars)
        self.loop = -1

    def declarations(self) -> list[str]:
        """Scratch arrays, declared once per row."""
        return [
            f"alignas(64) {compute_type(e.dtype)} {n}[{self.length}];"
            for e, n in self.slots.items()
        ]

    def enter(self, emitter: ExprEmitter) -> None:
        """Start the next loop: values cached by earlier loops are read from scratch."""
        self.loop += 1
        emitter.preset_inner(
            {
                e: f"{n}[{self.position}]"
                for e, n in self.slots.items()
                if self.cached[e] < self.loop
            }
        )

    def writes(self, emitter: ExprEmitter) -> list[str]:
        """Stores of the values this loop computes for later loops."""
        return [
            f"{n}[{self.position}] = {emitter.emit(e)};"
            for e, n in self.slots.items()
            if self.cached[e] == self.loop
        ]


def _phases(reductions: Sequence[ReductionSpec]) -> list[list[ReductionSpec]]:
    """Group reductions into loops: a reduction reading an earlier one starts a new loop."""
    phases: list[list[ReductionSpec]] = []
    for spec in reductions:
        reads = reductions_used(spec.body)
        if phases and not reads & {s.name for s in phases[-1]}:
            phases[-1].append(spec)
        else:
            phases.append([spec])
    return phases


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


def generate_cpp(kernel: Kernel, simd_functions: frozenset[str] = frozenset()) -> str:
    """The C++ source of ``kernel``: one ``extern "C"`` function taking buffer pointers.

    ``simd_functions`` are math functions with vector variants in libmvec (see
    :func:`~torchstrata.inductor.cpp_build.simd_math_functions`).
    """
    stored = {s.buffer for s in kernel.row_stores + kernel.full_stores}
    params = ", ".join(
        f"{'' if arg.name in stored else 'const '}{STORAGE_TYPES[arg.dtype]}* __restrict__ {arg.name}"
        for arg in kernel.args
    )
    if kernel.red_shape:
        outer_vars, inner_vars = row_vars(kernel.row_shape), red_vars(kernel.red_shape)
    else:
        all_vars = row_vars(kernel.row_shape)
        outer_vars, inner_vars = all_vars[:-1], all_vars[-1:]
    emitter = ExprEmitter(CppPrinter(), frozenset(v.name for v in inner_vars))
    phases = _phases(kernel.reductions)
    loops = [[spec.body for spec in phase] for phase in phases]
    loops.append([store.value for store in kernel.full_stores])
    cached = (
        plan_row_cache(loops, emitter.depends_on_inner, kernel.row_length)
        if kernel.red_shape
        else {}
    )
    cache = RowCacheEmitter(cached, inner_vars)
    body: list[str] = _derive(outer_vars, "xi") + cache.declarations()
    for phase in phases:
        body += _reduction_phase(emitter, phase, inner_vars, cache)
    if kernel.red_shape:
        row_lines = [_store(store, emitter.emit(store.value)) for store in kernel.row_stores]
        body += emitter.take_outer() + row_lines
        if kernel.full_stores:
            emitter.open_inner()
            cache.enter(emitter)
            stores = [_store(store, emitter.emit(store.value)) for store in kernel.full_stores]
            inner = emitter.close_inner() + stores
            body += emitter.take_outer() + _loops(inner_vars, inner, "#pragma omp simd")
    outer_count = math.prod(v.size for v in outer_vars)
    total = outer_count * math.prod(v.size for v in inner_vars)
    if not kernel.red_shape:
        # A single row (1-D pointwise) is parallelised on the inner loop instead.
        parallel_inner = outer_count == 1 and total >= PARALLEL_THRESHOLD
        emitter.open_inner()
        stores = [_store(store, emitter.emit(store.value)) for store in kernel.row_stores]
        inner_pragma = "#pragma omp parallel for simd" if parallel_inner else "#pragma omp simd"
        body += emitter.take_outer() + _loops(
            inner_vars, emitter.close_inner() + stores, inner_pragma
        )
    pragma = "#pragma omp parallel for" if outer_count > 1 and total >= PARALLEL_THRESHOLD else ""
    used = frozenset(name for name in simd_functions if f"std::{name}(" in "\n".join(body))
    lines = [PRELUDE, simd_declarations(used), f'extern "C" void {kernel.name}({params}) {{']
    if pragma:
        lines.append("  " + pragma)
    lines.append(f"  for (int64_t xi = 0; xi < {outer_count}; ++xi) {{")
    lines += ["    " + line for line in body]
    lines += ["  }", "}", ""]
    return "\n".join(lines)
