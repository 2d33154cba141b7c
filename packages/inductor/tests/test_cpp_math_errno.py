"""C++ kernels are built with ``-fno-math-errno`` (decision 0231): a SIMD loop over
``sqrt`` vectorises (with ``errno`` GCC calls ``sqrtf`` for each negative operand and
keeps the loop scalar), and the results stay those of IEEE ``sqrt``: negative operands
give NaN, as in eager."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim


def _rsqrt_graph():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 1024), torch.float32))
    return b.build([b.call(prim("mul"), b.call(prim("rsqrt"), x), x)])


def test_a_loop_over_sqrt_vectorises(ind) -> None:
    """GCC reports the kernel's SIMD loop over ``1 / sqrt(x) * x`` vectorised."""
    compiled = ind.compile(_rsqrt_graph(), "cpp")
    (kernel,) = compiled.kernels
    ind.assert_simd_loops_vectorised(kernel.source)


def test_sqrt_of_negatives_and_specials_as_eager(ind) -> None:
    """Negative operands, zeros, infinities and NaN give eager's values."""
    compiled = ind.compile(_rsqrt_graph(), "cpp")
    x = torch.randn(64, 1024)
    x[0, :6] = torch.tensor([-1.0, -0.0, 0.0, float("inf"), float("-inf"), float("nan")])
    (got,) = compiled(x)
    torch.testing.assert_close(got, torch.rsqrt(x) * x, equal_nan=True)
