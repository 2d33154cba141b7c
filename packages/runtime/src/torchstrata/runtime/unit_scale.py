"""Scaling a forward's unit gradients by the incoming gradient, in place
(:mod:`torchstrata.autograd.unit_grads` says where they come from).

``loss.backward()`` seeds a tangent of 1, and then the scaling must cost nothing. On the
GPU the tangent lives on the device, and reading it on the host would wait for the whole
forward; so a Triton kernel reads it and its programs return at once when it is 1 (1.4 us
on the H200 for K7's gradient of 262M elements). Otherwise they multiply in float32 (in
float64 for float64 values) and round once to the gradient's dtype, as a backward
graph's fused kernel would. On the CPU the tangent is read directly. Without Triton, GPU
gradients are multiplied by ``torch`` (a pass even when the tangent is 1).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

#: Elements per program per step, warps per program, programs per SM of the kernel.
_BLOCK, _WARPS, _PROGRAMS_PER_SM = 4096, 8, 4


def scale_in_place(grad: torch.Tensor, scale: torch.Tensor) -> None:
    """``grad *= scale`` (``scale`` a one-element tensor), nothing when ``scale`` is 1.

    ``grad`` must be non-overlapping and dense (every element written once)."""
    if grad.numel() == 0:
        return
    if grad.device.type == "cpu" and scale.device.type == "cpu":
        if scale.item() != 1:
            _multiply(grad, scale)
        return
    # the kernel indexes with int32
    kernel = _kernel() if grad.device.type == "cuda" and grad.numel() < 2**31 else None
    if kernel is None:
        _multiply(grad, scale)
        return
    launch_scale(kernel, grad, scale)


def _multiply(grad: torch.Tensor, scale: torch.Tensor) -> None:
    """``grad *= scale`` computed in float32 (float64 if either is), rounded once: not
    ``grad.mul_(scale)``, which first rounds ``scale`` to a 16-bit ``grad``'s dtype."""
    wide = torch.float64 in (grad.dtype, scale.dtype)
    compute = torch.float64 if wide else torch.float32
    grad.copy_(grad.to(compute) * scale.reshape(()).to(compute))


def launch_scale(kernel: Any, grad: torch.Tensor, scale: torch.Tensor) -> None:
    """Run the Triton ``kernel`` (from :func:`_kernel`) on ``grad`` (also on CPU tensors
    under ``TRITON_INTERPRET=1``)."""
    wide = grad.dtype == torch.float64 or scale.dtype == torch.float64
    blocks = -(-grad.numel() // _BLOCK)
    programs = min(blocks, _program_limit(grad.device))
    steps = -(-blocks // programs)
    kernel[(programs,)](grad, scale, grad.numel(), steps, BLOCK=_BLOCK, WIDE=wide, num_warps=_WARPS)


def _program_limit(device: torch.device) -> int:
    if device.type != "cuda":
        return 64
    return _PROGRAMS_PER_SM * _multiprocessors(device.index or 0)


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _kernel() -> Any:
    """The Triton kernel, or None without Triton (a kernel for Triton's interpreter
    under ``TRITON_INTERPRET=1``: ``triton.jit`` decides when it decorates)."""
    return _build(os.environ.get("TRITON_INTERPRET", "0") == "1")


@functools.cache
def _build(interpreted: bool) -> Any:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def scale_unless_one(grad, scale, numel, steps, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        factor = tl.load(scale)
        factor = factor.to(tl.float64) if WIDE else factor.to(tl.float32)
        if factor != 1.0:
            # `steps` from the host: Triton 3.6's interpreter cannot loop from a program id
            for step in range(0, steps):
                index = (step * tl.num_programs(0) + tl.program_id(0)) * BLOCK
                index += tl.arange(0, BLOCK)
                mask = index < numel
                value = tl.load(grad + index, mask=mask)
                value = value.to(tl.float64) if WIDE else value.to(tl.float32)
                tl.store(grad + index, (value * factor).to(grad.dtype.element_ty), mask=mask)

    return scale_unless_one
