"""C++ kernels are built with ``-fno-math-errno`` (decision 0231): a SIMD loop over
``sqrt`` vectorises (with ``errno`` GCC calls ``sqrtf`` for each negative operand and
keeps the loop scalar), and the results stay those of IEEE ``sqrt``: negative operands
give NaN, as in eager."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.build import COMPILER_FLAGS, find_compiler


def _rsqrt_graph():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 1024), torch.float32))
    return b.build([b.call(prim("mul"), b.call(prim("rsqrt"), x), x)])


def test_a_loop_over_sqrt_vectorises(ind) -> None:
    """GCC reports the kernel's SIMD loop over ``1 / sqrt(x) * x`` vectorised."""
    compiler = find_compiler()
    if "GCC" not in compiler.version and "g++" not in compiler.version:
        pytest.skip(f"-fopt-info is GCC's; the compiler is {compiler.version}")
    compiled = ind.compile(_rsqrt_graph(), "cpp")
    (kernel,) = compiled.kernels
    lines = kernel.source.splitlines()
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


def test_sqrt_of_negatives_and_specials_as_eager(ind) -> None:
    """Negative operands, zeros, infinities and NaN give eager's values."""
    compiled = ind.compile(_rsqrt_graph(), "cpp")
    x = torch.randn(64, 1024)
    x[0, :6] = torch.tensor([-1.0, -0.0, 0.0, float("inf"), float("-inf"), float("nan")])
    (got,) = compiled(x)
    torch.testing.assert_close(got, torch.rsqrt(x) * x, equal_nan=True)
