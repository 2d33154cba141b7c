"""Symbolic sizes with floor division or modulo printed as C++ (decision 0407): the
printed expressions, compiled, compute sympy's floored values at every size, negative
operands included; non-negative ones print C's own ``/`` and ``%``."""

from __future__ import annotations

import ctypes
import itertools
import subprocess

import sympy  # type: ignore[import-untyped]
from torch.utils._sympy.functions import FloorDiv, PythonMod

from torchstrata.inductor.codegen.cpp.build import find_compiler
from torchstrata.inductor.codegen.cpp.size_source import cpp_size_source

S0, S1 = sympy.symbols("s0 s1", integer=True, positive=True)
#: each way a size is made of floor division, modulo and extremes; operands of any sign
EXPRESSIONS = [
    sympy.floor((1 - S0) / S1),
    sympy.Mod(1 - S0, S1),
    sympy.Mod(S0 - 2 * S1, 1 - S1 - S0),  # a negative modulus: the result is <= 0
    FloorDiv(S1 - S0 - 3, S1),
    PythonMod(S1 - S0, S1 + 1),
    sympy.ceiling((S0 - 5) / 3),
    sympy.Max(1, FloorDiv(S0, 3)),
    sympy.Min(S0 - 4, S1, 2),
    FloorDiv(S0 * S0 + 1, 2) - sympy.Mod(-S0, 4) * S1,
]


def test_compiled_cpp_computes_each_expression_at_every_size(tmp_path):
    source = tmp_path / "sizes.cpp"
    source.write_text(
        "#include <cstdint>\n"
        + "".join(
            f'extern "C" int64_t f{k}(int64_t s0, int64_t s1) {{ return {cpp_size_source(e)}; }}\n'
            for k, e in enumerate(EXPRESSIONS)
        )
    )
    library = tmp_path / "sizes.so"
    command = [*find_compiler().command, "-O2", "-shared", "-fPIC", "-std=c++17"]
    subprocess.run([*command, str(source), "-o", str(library)], check=True)
    loaded = ctypes.CDLL(str(library))
    for k, expr in enumerate(EXPRESSIONS):
        fn = getattr(loaded, f"f{k}")
        fn.restype, fn.argtypes = ctypes.c_int64, [ctypes.c_int64, ctypes.c_int64]
        for s0, s1 in itertools.product(range(2, 12), range(2, 7)):
            want = int(expr.xreplace({S0: s0, S1: s1}))
            assert fn(s0, s1) == want, (cpp_size_source(expr), s0, s1)


def test_non_negative_operands_print_c_division_and_remainder():
    assert cpp_size_source(FloorDiv(S0 + 1, 2)) == "((s0 + 1) / 2)"
    assert cpp_size_source(sympy.floor(S0 / 3)) == "(s0 / 3)"
    assert cpp_size_source(sympy.Mod(S0, 8)) == "(s0 % 8)"
    # a dividend of unknown sign: the floored form
    assert "!= 0" in cpp_size_source(sympy.Mod(1 - S0, S1))
