"""The C++ backend's bfloat16/float16 conversions (``ts_*`` in ``cpp.exprs.PRELUDE``):
integer arithmetic on bit patterns that the compiler vectorises, bit for bit torch's
conversions on every 16-bit value, every rounding tie (and its neighbours), subnormals,
overflow, infinities and NaN (which stays NaN; its payload is not compared: torch's
scalar conversions make it canonical)."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.build import COMPILER_FLAGS, build_kernel, find_compiler
from torchstrata.inductor.codegen.cpp.exprs import PRELUDE

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


@pytest.mark.parametrize("dtype", HALVES)
def test_narrowing_an_unrounded_float_matches_torch(tmp_path, dtype):
    """The prelude's ``ts_f32_to_*``, which stores a float that no ``convert_element_type``
    rounded (kernels store rounded values by their bits), in a SIMD loop of its own."""
    short = "f16" if dtype is torch.float16 else "bf16"
    source = (
        f"{PRELUDE}\n"
        'extern "C" void narrow(const float* __restrict__ x, uint16_t* __restrict__ y) {\n'
        "  #pragma omp simd\n"
        f"  for (int64_t i = 0; i < N; ++i) y[i] = ts_f32_to_{short}(x[i]);\n"
        "}\n"
    )
    x = _floats_that_round(dtype)
    got = torch.empty(x.shape, dtype=dtype)
    kernel = build_kernel(source.replace("N;", f"{x.numel()};"), "narrow", 2, tmp_path)
    kernel.fn(x.data_ptr(), got.data_ptr())
    _assert_same_bits(got, x.to(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_an_intermediate_rounds_in_float_lanes_as_torch(ind, dtype):
    """A 16-bit value that is never stored: one fused rounding (``ts_round_*``)."""
    x = _floats_that_round(dtype)
    compiled = ind.compile(_convert_graph(x.numel(), torch.float32, dtype, torch.float32), "cpp")
    body = compiled.kernels[0].source.split('extern "C" void')[-1]
    assert "ts_round_" in body
    (got,) = compiled(x)
    _assert_same_bits(got, x.to(dtype).float())


def test_the_conversions_vectorise(ind):
    """GCC reports the kernel's SIMD loop vectorised: loads, roundings and stores of both
    16-bit types in one loop (``_Float16`` conversions, for one, never vectorise in GCC 12)."""
    compiler = find_compiler()
    if "GCC" not in compiler.version and "g++" not in compiler.version:
        pytest.skip(f"-fopt-info is GCC's; the compiler is {compiler.version}")
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 1024), torch.float16))
    y = b.input("y", TensorMeta((64, 1024), torch.bfloat16))
    product = b.call(prim("mul"), b.call(prim("convert_element_type"), y, torch.float16), x)
    total = b.call(prim("add"), b.call(prim("convert_element_type"), product, torch.bfloat16), y)
    compiled = ind.compile(b.build([total]), "cpp")
    (kernel,) = compiled.kernels
    lines = kernel.source.splitlines()
    # 1-based number of each SIMD loop's `for` line; GCC names it or the body's first line
    loops = [n + 2 for n, line in enumerate(lines) if line.strip() == "#pragma omp simd"]
    assert loops, "no SIMD loop"
    command = [*compiler.command, *COMPILER_FLAGS, "-fopt-info-vec-optimized"]
    report = subprocess.run(
        [*command, "-x", "c++", "-", "-o", "/dev/null"],
        input=kernel.source,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    pattern = r"^<stdin>:(\d+):\d+: optimized: loop vectorized"
    vectorised = {int(number) for number in re.findall(pattern, report, re.MULTILINE)}
    missed = [loop for loop in loops if not {loop, loop + 1} & vectorised]
    assert not missed, f"SIMD loops at lines {missed} not vectorised:\n{report}"
