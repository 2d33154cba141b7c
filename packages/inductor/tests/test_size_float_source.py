"""Floats of symbolic sizes printed per language (decision 0500): the C++ printer's
``double`` source, compiled, computes bit for bit what Python computes (``math.sqrt``,
``**``, ``/``) at every size; the Triton printer's is float64 (a bare Python float in a
kernel is a float32 constant) and refuses powers other than a square root's."""

from __future__ import annotations

import ctypes
import math
import subprocess

import pytest
import sympy  # type: ignore[import-untyped]
from torch.utils._sympy.functions import (
    FloatPow,
    FloatTrueDiv,
    IntTrueDiv,
    OpaqueUnaryFn_sqrt,
    ToFloat,
)

from torchstrata.core import SizeGuards, UnprintableSize, python_source
from torchstrata.core.size_floats import size_float
from torchstrata.inductor.codegen.cpp.build import find_compiler
from torchstrata.inductor.codegen.cpp.size_source import cpp_size_source
from torchstrata.inductor.codegen.triton.size_source import triton_size_source
from torchstrata.inductor.launch.launcher import holds_size_value

S0, S1 = sympy.symbols("s0 s1", integer=True, positive=True)
#: the floats an attention's scale and a mean's factor are made of
EXPRESSIONS = [
    OpaqueUnaryFn_sqrt(ToFloat(S0)),
    FloatPow(ToFloat(S0), -0.5),
    FloatPow(ToFloat(S0), 0.5),
    FloatTrueDiv(1.0, ToFloat(S0)),
    FloatTrueDiv(1.0, OpaqueUnaryFn_sqrt(ToFloat(S0 * S1))),
    IntTrueDiv(S0, S1),
    0.5 * ToFloat(S0 + S1),
]


def _python(expr, s0: int, s1: int) -> float:
    return float(eval(python_source(expr), {"math": math}, {"s0": s0, "s1": s1}))


def test_compiled_cpp_computes_what_python_computes_bit_for_bit(tmp_path):
    source = tmp_path / "floats.cpp"
    source.write_text(
        "#include <cmath>\n#include <cstdint>\n"
        + "".join(
            f'extern "C" double f{k}(int64_t s0, int64_t s1) {{ return {cpp_size_source(e)}; }}\n'
            for k, e in enumerate(EXPRESSIONS)
        )
    )
    library = tmp_path / "floats.so"
    command = [*find_compiler().command, "-O3", "-fno-math-errno", "-shared", "-fPIC"]
    subprocess.run([*command, "-std=c++17", str(source), "-o", str(library)], check=True)
    loaded = ctypes.CDLL(str(library))
    for k, expr in enumerate(EXPRESSIONS):
        fn = getattr(loaded, f"f{k}")
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int64, ctypes.c_int64]
        for s0 in range(2, 400):
            for s1 in (2, 3, 64):
                assert fn(s0, s1) == _python(expr, s0, s1), (cpp_size_source(expr), s0, s1)


def test_python_source_is_what_python_computes():
    for s0 in range(2, 200):
        assert _python(EXPRESSIONS[0], s0, 2) == math.sqrt(s0)
        assert _python(EXPRESSIONS[1], s0, 2) == s0**-0.5
        assert _python(EXPRESSIONS[5], s0, 7) == s0 / 7


def test_triton_prints_floats_of_sizes_in_float64():
    assert triton_size_source(EXPRESSIONS[0]) == "tl.sqrt((s0).to(tl.float64))"
    assert triton_size_source(EXPRESSIONS[1]) == "(1.0 / tl.sqrt((s0).to(tl.float64)))"
    # a literal float32 does not hold exactly: a float64 scalar
    assert (
        triton_size_source(0.1 * ToFloat(S0))
        == "(tl.full([], 0.1, tl.float64)*(s0).to(tl.float64))"
    )
    assert triton_size_source(EXPRESSIONS[5]) == ("((s0).to(tl.float64) / (s1).to(tl.float64))")


def test_triton_refuses_other_powers_of_a_size():
    with pytest.raises(UnprintableSize):
        triton_size_source(FloatPow(ToFloat(S0), 1.5))


def test_a_launcher_constant_holding_a_float_of_sizes_is_refused():
    # bound once as a launcher global, it would keep the lowered size's value at every size
    scale = size_float(EXPRESSIONS[0], SizeGuards({"s0": 16, "s1": 2}))
    assert holds_size_value({"scale": (1, scale)}) and not holds_size_value((1, 2.0))
