"""A light stand-in for the standard headers that generated C++ kernels include.

Parsing ``<cmath>`` (with ``<cstdint>`` and ``<cstring>``) is about half of a kernel's
compile (~0.15 s of ~0.3 s on a 2-core box), and a precompiled header costs ~0.5 s to
build the first time, which a cold compile pays in full. Kernels only use a handful of
names from those headers (``std::memcpy``, ``std::fmod``, the ``std::`` math functions,
``NAN``, ``INFINITY``, the fixed-width integers), so :data:`LIGHT_PRELUDE` declares
just those, each as the GCC/Clang builtin that ``<cmath>`` itself forwards to: the code
generated (and the calls that ``omp declare simd`` vectorises) is the same. Mixed or
integer arguments promote to ``double``, as in ``<cmath>``.

A kernel that needs anything else fails to compile against it; the build then falls back
to the real headers (see :mod:`torchstrata.inductor.codegen.cpp.build`).
"""

from __future__ import annotations

from torchstrata.inductor.codegen.cpp.exprs import FLOAT_MATH_FUNCTIONS

#: The standard headers every generated kernel starts with.
STANDARD_INCLUDES = "#include <cmath>\n#include <cstdint>\n#include <cstring>\n"

#: The one-argument ``std::`` functions that kernels call: the math functions, then rounding.
_UNARY = (*FLOAT_MATH_FUNCTIONS, "floor", "ceil", "trunc", "nearbyint")
_BINARY = ("fmod", "pow", "atan2")
_INTEGERS = ("int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t")


def _light_prelude() -> str:
    lines = [
        "#include <stdint.h>",
        '#define NAN (__builtin_nanf(""))',
        "#define INFINITY (__builtin_inff())",
        "namespace std {",
        *(f"using ::{name};" for name in (*_INTEGERS, "uint64_t")),
        "inline void* memcpy(void* d, const void* s, __SIZE_TYPE__ n) "
        "{ return __builtin_memcpy(d, s, n); }",
    ]
    for name in _UNARY:
        lines += [
            f"inline float {name}(float x) {{ return __builtin_{name}f(x); }}",
            f"inline double {name}(double x) {{ return __builtin_{name}(x); }}",
            f"template <typename T> inline double {name}(T x) "
            f"{{ return __builtin_{name}(double(x)); }}",
        ]
    for name in _BINARY:
        lines += [
            f"inline float {name}(float a, float b) {{ return __builtin_{name}f(a, b); }}",
            f"inline double {name}(double a, double b) {{ return __builtin_{name}(a, b); }}",
            f"template <typename A, typename B> inline double {name}(A a, B b) "
            f"{{ return __builtin_{name}(double(a), double(b)); }}",
        ]
    lines += [
        "inline float abs(float x) { return __builtin_fabsf(x); }",
        "inline double abs(double x) { return __builtin_fabs(x); }",
        "inline int abs(int x) { return x < 0 ? -x : x; }",
        "inline long abs(long x) { return x < 0 ? -x : x; }",
        "inline long long abs(long long x) { return x < 0 ? -x : x; }",
        "inline bool isinf(float x) { return __builtin_isinf(x); }",
        "inline bool isinf(double x) { return __builtin_isinf(x); }",
        "inline bool isnan(float x) { return __builtin_isnan(x); }",
        "inline bool isnan(double x) { return __builtin_isnan(x); }",
        "}  // namespace std",
    ]
    return "\n".join(lines) + "\n"


#: Declarations replacing :data:`STANDARD_INCLUDES` (see the module docstring).
LIGHT_PRELUDE = _light_prelude()


def lighten(source: str) -> str | None:
    """``source`` with its standard includes replaced by :data:`LIGHT_PRELUDE`, or None
    when it does not start its includes the usual way."""
    if STANDARD_INCLUDES not in source:
        return None
    return source.replace(STANDARD_INCLUDES, LIGHT_PRELUDE, 1)
