"""The C++ backend's bfloat16/float16 conversions (``ts_*`` in ``cpp.exprs.PRELUDE``):
integer arithmetic on bit patterns that the compiler vectorises, bit for bit torch's
conversions on every 16-bit value, every rounding tie (and its neighbours), subnormals,
overflow, infinities and NaN (which stays NaN; its payload is not compared: torch's
scalar conversions make it canonical)."""

from __future__ import annotations

import ctypes
import subprocess

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.build import COMPILER_FLAGS, build_kernel, find_compiler
from torchstrata.inductor.codegen.cpp.exprs import PRELUDE
from torchstrata.inductor.codegen.cpp.half import HALF_PRELUDE

HALVES = [torch.bfloat16, torch.float16]


def _every_half(dtype: torch.dtype) -> torch.Tensor:
    """All 65536 bit patterns of ``dtype``."""
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


def _next_up(x: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(x, torch.full_like(x, float("inf")))


def _next_down(x: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(x, torch.full_like(x, float("-inf")))


def _floats_that_round(dtype: torch.dtype) -> torch.Tensor:
    """float32 values where rounding to ``dtype`` goes wrong first: each value of
    ``dtype``, the midpoints between neighbours (ties, below the smallest subnormal too)
    and the float32 values on either side of each; NaNs with payloads; random bits."""
    values = _every_half(dtype).float()
    finite = values[values.isfinite()].unique()
    mids = (finite[:-1].double() + finite[1:].double()) / 2
    top = torch.finfo(dtype).max
    past = [top + (top - finite[-2].item()) / 2, float(torch.finfo(torch.float32).max)]
    points = torch.cat([finite, mids.float(), torch.tensor(past), -torch.tensor(past)])
    nans = torch.tensor([0x7F800001, 0x7FC00000, 0x7FFFFFFF, -1, -(2**22), 0x7F801000])
    noise = torch.randint(
        -(2**31), 2**31 - 1, (100_000,), generator=torch.Generator().manual_seed(0)
    )
    return torch.cat(
        [
            points,
            _next_up(points),
            _next_down(points),
            nans.to(torch.int32).view(torch.float32),
            noise.to(torch.int32).view(torch.float32),
            torch.tensor([float("inf"), float("-inf"), 0.0, -0.0, 1e-45, -1e-45, 2.0**-126]),
        ]
    )


def _assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), "NaN in different places"
    bits = {2: torch.int16, 4: torch.int32}[want.element_size()]
    differ = (got.view(bits) != want.view(bits)) & ~nan
    where = differ.nonzero().flatten()[:5].tolist()
    assert not where, f"{int(differ.sum())} values differ, e.g. {want[where].tolist()}"


def _convert_graph(n: int, source: torch.dtype, *targets: torch.dtype):
    """``x`` converted through ``targets`` in turn; the last conversion is the output."""
    b = GraphBuilder(Level.PRIMS)
    value = b.input("x", TensorMeta((n,), source))
    for target in targets:
        value = b.call(prim("convert_element_type"), value, target)
    return b.build([value])


@pytest.mark.parametrize("dtype", HALVES)
def test_widening_every_value_matches_torch(ind, dtype):
    x = _every_half(dtype)
    (got,) = ind.compile(_convert_graph(x.numel(), dtype, torch.float32), "cpp")(x)
    _assert_same_bits(got, x.float())


@pytest.mark.parametrize("dtype", HALVES)
def test_narrowing_rounds_ties_to_even_as_torch(ind, dtype):
    """A rounded output: ``ts_round_*``, then stored by its bits."""
    x = _floats_that_round(dtype)
    (got,) = ind.compile(_convert_graph(x.numel(), torch.float32, dtype), "cpp")(x)
    _assert_same_bits(got, x.to(dtype))


#: The fp16 conversions' two builds: F16C's instructions where the compiler targets them
#: (this host, as a rule), and the integer arithmetic that any other build gets.
PATHS = {"native": "", "portable": "#define TS_PORTABLE_HALF 1\n"}


def _conversion_kernel(tmp_path, path: str, function: str, source_type: str, target_type: str):
    """``y[i] = function(x[i])`` in a SIMD loop of its own, over ``n`` elements, with
    ``PATHS[path]`` before the prelude: a function of two buffers and the count."""
    source = (
        f"{PATHS[path]}{PRELUDE}{HALF_PRELUDE}\n"
        f'extern "C" void convert(const {source_type}* __restrict__ x, '
        f"{target_type}* __restrict__ y, const int64_t n) {{\n"
        "  #pragma omp simd\n"
        f"  for (int64_t i = 0; i < n; ++i) y[i] = {function}(x[i]);\n"
        "}\n"
    )
    kernel = build_kernel(source, "convert", 3, tmp_path).fn
    kernel.argtypes = [*kernel.argtypes[:2], ctypes.c_int64]

    def run(x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        y = torch.empty(x.shape, dtype=out_dtype)
        kernel(x.data_ptr(), y.data_ptr(), x.numel())
        return y

    return run


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", HALVES)
def test_narrowing_an_unrounded_float_matches_torch(tmp_path, dtype, path):
    """The prelude's ``ts_f32_to_*``, which stores a float that no ``convert_element_type``
    rounded (kernels store rounded values by their bits)."""
    short = "f16" if dtype is torch.float16 else "bf16"
    narrow = _conversion_kernel(tmp_path, path, f"ts_f32_to_{short}", "float", "uint16_t")
    x = _floats_that_round(dtype)
    _assert_same_bits(narrow(x, dtype), x.to(dtype))


@pytest.mark.parametrize("path", PATHS)
def test_each_fp16_conversion_matches_torch_in_both_builds(tmp_path, path):
    """Every fp16 conversion, F16C's and the integer one: widening all 65536 values,
    rounding in float lanes, storing a float that a rounding rounded (the narrowing) and
    storing the bits of a rounded value; odd counts, so that
    loop remainders (the scalar versions) convert too."""
    every = _every_half(torch.float16)
    widen = _conversion_kernel(tmp_path, path, "ts_f16_to_f32", "uint16_t", "float")
    _assert_same_bits(widen(every, torch.float32), every.float())
    _assert_same_bits(widen(every[:37], torch.float32), every[:37].float())
    x = _floats_that_round(torch.float16)
    rounding = _conversion_kernel(tmp_path, path, "ts_round_f16", "float", "float")
    _assert_same_bits(rounding(x, torch.float32), x.half().float())
    _assert_same_bits(rounding(x[:13], torch.float32), x[:13].half().float())
    store = _conversion_kernel(tmp_path, path, "ts_store_f16", "float", "uint16_t")
    _assert_same_bits(store(x, torch.float16), x.half())
    _assert_same_bits(store(x[:11], torch.float16), x[:11].half())
    bits = _conversion_kernel(tmp_path, path, "ts_f16_bits", "float", "uint16_t")
    _assert_same_bits(bits(every.float(), torch.float16), every)
    _assert_same_bits(bits(every[:5].float(), torch.float16), every[:5])


def test_fp16_uses_f16c_where_the_build_targets_it():
    """On a host whose ``-march=native`` has F16C and AVX2 (and GCC), the prelude takes the
    F16C path: it defines ``TS_F16C``; otherwise the portable one is the only path."""
    compiler = find_compiler()
    macros = subprocess.run(
        [*compiler.command, *COMPILER_FLAGS[:2], "-dM", "-E", "-x", "c++", "-"],
        input="",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wanted = ("__F16C__", "__AVX2__", "__x86_64__", "__GNUC__")
    targets = all(f"#define {m} " in macros for m in wanted) and "__clang__" not in macros
    probe = f"{PRELUDE}{HALF_PRELUDE}\n#ifndef TS_F16C\n#error portable\n#endif\n"
    checked = subprocess.run(
        [*compiler.command, *COMPILER_FLAGS, "-fsyntax-only", "-x", "c++", "-"],
        input=probe,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (checked.returncode == 0) == targets, checked.stderr[-2000:]


@pytest.mark.parametrize("dtype", HALVES)
def test_an_intermediate_rounds_in_float_lanes_as_torch(ind, dtype):
    """A 16-bit value that is never stored: one fused rounding (``ts_round_*``)."""
    x = _floats_that_round(dtype)
    compiled = ind.compile(_convert_graph(x.numel(), torch.float32, dtype, torch.float32), "cpp")
    body = ind.kernel_code(compiled.kernels[0].source)
    assert "ts_round_" in body
    (got,) = compiled(x)
    _assert_same_bits(got, x.to(dtype).float())


def test_the_conversions_vectorise(ind):
    """GCC reports the kernel's SIMD loop vectorised: loads, roundings and stores of both
    16-bit types in one loop (``_Float16`` conversions, for one, never vectorise in GCC 12)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 1024), torch.float16))
    y = b.input("y", TensorMeta((64, 1024), torch.bfloat16))
    product = b.call(prim("mul"), b.call(prim("convert_element_type"), y, torch.float16), x)
    total = b.call(prim("add"), b.call(prim("convert_element_type"), product, torch.bfloat16), y)
    compiled = ind.compile(b.build([total]), "cpp")
    (kernel,) = compiled.kernels
    ind.assert_simd_loops_vectorised(kernel.source)


#: Each ISA's vector variants (x86 vector function ABI letter: lanes of the widening, of
#: the narrowing), called directly: GCC picks the one that fits a loop's vector width, so
#: a kernel on this host may exercise only some of them.
VARIANTS = {"b": (4, 4), "c": (8, 4), "d": (8, 8), "e": (16, 16)}

_VARIANT_HARNESS = r"""
#ifdef TS_F16C
#if ISA_e && !defined(__AVX512F__)
#error no AVX-512
#endif
typedef float vwf __attribute__((vector_size(4 * WIDEN)));
typedef uint32_t vwu __attribute__((vector_size(4 * WIDEN)));
typedef float vnf __attribute__((vector_size(4 * NARROW)));
typedef uint32_t vnu __attribute__((vector_size(4 * NARROW)));
typedef uint32_t vhalf __attribute__((vector_size(2 * WIDEN)));
extern "C" void variants(const uint32_t* h, const float* f, float* widened, uint32_t* narrowed,
                         float* rounded, const int64_t n) {
  for (int64_t i = 0; i < n; i += WIDEN) {
    vwu x; std::memcpy(&x, h + i, sizeof x);
#if ISA_c
    vhalf low, high; std::memcpy(&low, h + i, sizeof low); std::memcpy(&high, h + i + WIDEN / 2, sizeof high);
    const vwf w = WIDEN_FN(low, high);
#else
    const vwf w = WIDEN_FN(x);
#endif
    std::memcpy(widened + i, &w, sizeof w);
    vwf g; std::memcpy(&g, f + i, sizeof g);
    const vwf r = ROUND_FN(g);
    std::memcpy(rounded + i, &r, sizeof r);
  }
  for (int64_t i = 0; i < n; i += NARROW) {
    vnf g; std::memcpy(&g, f + i, sizeof g);
    const vnu o = NARROW_FN(g);
    std::memcpy(narrowed + i, &o, sizeof o);
  }
}
#else
#error the portable build
#endif
"""


@pytest.mark.parametrize("isa", VARIANTS)
def test_every_f16c_vector_variant_matches_torch(tmp_path, isa):
    """Each vector variant that the F16C path defines, on all 65536 fp16 values (widened)
    and on the rounding set (rounded and narrowed)."""
    widen, narrow = VARIANTS[isa]
    defines = {
        "WIDEN": widen,
        "NARROW": narrow,
        f"ISA_{isa}": 1,
        "WIDEN_FN": f"_ZGV{isa}N{widen}v_ts_f16c_widen",
        "ROUND_FN": f"_ZGV{isa}N{widen}v_ts_f16c_round",
        "NARROW_FN": f"_ZGV{isa}N{narrow}v_ts_f16c_narrow",
    }
    head = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    source = f"{PRELUDE}{HALF_PRELUDE}\n{head}{_VARIANT_HARNESS}"
    compiler = find_compiler()
    probe = subprocess.run(
        [*compiler.command, *COMPILER_FLAGS, "-fsyntax-only", "-x", "c++", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:  # no F16C (or, for "e", no AVX-512) in this build
        pytest.skip(f"this build has no F16C variant {isa!r}: {probe.stderr[-300:]}")
    kernel = build_kernel(source, "variants", 6, tmp_path).fn
    kernel.argtypes = [*kernel.argtypes[:5], ctypes.c_int64]
    halves = _every_half(torch.float16)
    floats = _floats_that_round(torch.float16)
    n = max(halves.numel(), floats.numel())
    n += -n % 16
    h = torch.zeros(n, dtype=torch.int32)
    h[: halves.numel()] = halves.view(torch.int16).to(torch.int32) & 0xFFFF
    f = torch.zeros(n)
    f[: floats.numel()] = floats
    widened, rounded = torch.empty(n), torch.empty(n)
    narrowed = torch.empty(n, dtype=torch.int32)
    kernel(
        h.data_ptr(), f.data_ptr(), widened.data_ptr(), narrowed.data_ptr(), rounded.data_ptr(), n
    )
    _assert_same_bits(widened[: halves.numel()], halves.float())
    _assert_same_bits(rounded, f.half().float())
    assert (narrowed >> 16 == 0).all(), "a narrowed lane has bits above 16"
    _assert_same_bits(narrowed.to(torch.int16).view(torch.float16), f.half())
