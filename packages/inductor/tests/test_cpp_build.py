"""The C++ build: cache keys, the cache directory, and the light header prelude."""

from __future__ import annotations

import ctypes

import pytest
import torch

from torchstrata.inductor.codegen.cpp.build import (
    Compiler,
    CppCompileError,
    build_kernel,
    cache_key,
    find_compiler,
)
from torchstrata.inductor.codegen.cpp.prelude import STANDARD_INCLUDES, lighten

_KERNEL = (
    STANDARD_INCLUDES
    + """
extern "C" void {name}(const float* __restrict__ x, float* __restrict__ y) {{
  for (int i = 0; i < 8; ++i) {{
    float v = x[i];
    uint32_t bits; std::memcpy(&bits, &v, 4);
    y[i] = std::erf(v) + std::pow(v, 2) + std::fmod(v, 0.75f) + std::abs(v) + (bits ? 0.f : NAN);
    {extra}
  }}
}}
"""
)


def _run(built) -> torch.Tensor:
    x = torch.linspace(-2, 2, 8)
    y = torch.empty(8)
    built.fn(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
    return x, y


def _expected(x: torch.Tensor) -> torch.Tensor:
    return torch.erf(x) + x**2 + torch.fmod(x, 0.75) + x.abs()


def test_cache_key_covers_compiler_version_flags_and_source():
    gcc = Compiler(("/usr/bin/g++",), "g++ 13.2")
    base = cache_key(gcc, ("-O3",), "int f();")
    assert cache_key(gcc, ("-O2",), "int f();") != base
    assert cache_key(Compiler(("/usr/bin/clang++",), "g++ 13.2"), ("-O3",), "int f();") != base
    assert cache_key(Compiler(("/usr/bin/g++",), "g++ 14.1"), ("-O3",), "int f();") != base
    assert cache_key(gcc, ("-O3",), "int g();") != base
    assert cache_key(gcc, ("-O3",), "int f();") == base


def test_cxx_names_the_compiler_and_its_arguments(tmp_path):
    plain = find_compiler(None)
    assert plain.version  # the first line of --version
    wrapped = find_compiler(f"{plain.command[0]} -DTS_WRAPPED=1")
    assert wrapped.command == (plain.command[0], "-DTS_WRAPPED=1")
    source = _KERNEL.format(name="cxx_k", extra="")
    assert cache_key(wrapped, (), source) != cache_key(plain, (), source)


def test_unknown_cxx_is_a_clear_error():
    with pytest.raises(CppCompileError, match=r"\$CXX='no-such-compiler-xyz'"):
        find_compiler("no-such-compiler-xyz")


def test_light_prelude_replaces_only_the_standard_includes():
    source = _KERNEL.format(name="k", extra="")
    light = lighten(source)
    assert light is not None and "#include <cmath>" not in light
    assert light.endswith(source[len(STANDARD_INCLUDES) :])
    assert lighten("int f();") is None


def test_kernel_builds_against_the_light_prelude(tmp_path):
    built = build_kernel(_KERNEL.format(name="light_k", extra=""), "light_k", 2, tmp_path)
    x, y = _run(built)
    torch.testing.assert_close(y, _expected(x))
    again = build_kernel(_KERNEL.format(name="light_k", extra=""), "light_k", 2, tmp_path)
    assert again.cached and again.path == built.path


def test_kernel_needing_more_than_the_light_prelude_falls_back_to_the_headers(tmp_path):
    # std::signbit is not in the light prelude: the build retries with <cmath>.
    extra = "if (std::signbit(v)) y[i] += 0.0f;"
    built = build_kernel(_KERNEL.format(name="full_k", extra=extra), "full_k", 2, tmp_path)
    x, y = _run(built)
    torch.testing.assert_close(y, _expected(x))
