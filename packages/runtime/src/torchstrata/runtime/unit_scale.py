"""Scaling a forward's unit gradients by the incoming gradient, in place
(:mod:`torchstrata.autograd.unit_grads` says where they come from).

``loss.backward()`` seeds a tangent of 1, and then the scaling must cost nothing. On the
GPU the tangent lives on the device, and reading it on the host would wait for the whole
forward; so a Triton kernel reads it and its programs return at once when it is 1.
Otherwise they multiply in float32 (in float64 for float64 values) and round once to the
gradient's dtype, as a backward graph's fused kernel would. On the CPU the tangent is read directly. Without Triton, GPU
gradients are multiplied by ``torch`` (a pass even when the tangent is 1).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs
import torch

from torchstrata.core import CompileOptions, DirectLauncher
from torchstrata.core.env_options import Environment, triton_interpret

#: Elements per program per step, warps per program, programs per SM (GPU) of the kernel.
_BLOCK, _WARPS, _PROGRAMS_PER_SM = 4096, 8, 4


@attrs.frozen
class BoundDirectLaunch:
    """The ``torchstrata_direct_launch`` ``hook`` called with a compile's cache settings
    (where Triton's compiled files go: the verified store, decision 0091). Equal, and
    hashing equal, for the same hook and settings, so :func:`_scaler`'s cache keeps one
    launch per gradient shape however many graphs are compiled."""

    hook: Any
    cache_dir: str | None
    cache_size_limit: int | None

    @classmethod
    def of(cls, hook: Any, options: CompileOptions) -> BoundDirectLaunch:
        """``hook`` bound to ``options``' cache settings."""
        return cls(hook, options.cache_dir, options.cache_size_limit)

    def __call__(
        self,
        kernel: Any,
        grid: tuple[int, ...],
        constants: dict[str, Any],
        fallback: Callable[..., None],
    ) -> Callable[..., None] | None:
        options = CompileOptions(cache_dir=self.cache_dir, cache_size_limit=self.cache_size_limit)
        launch: Callable[..., None] | None = self.hook(
            kernel=kernel, grid=grid, constants=constants, fallback=fallback, options=options
        )
        return launch


def scale_in_place(
    grad: torch.Tensor, scale: torch.Tensor, direct_launch: DirectLauncher | None = None
) -> None:
    """``grad *= scale`` (``scale`` a one-element tensor), nothing when ``scale`` is 1.

    ``grad`` must be non-overlapping and dense (every element written once).
    ``direct_launch`` (the plugin manager's ``torchstrata_direct_launch`` hook) launches
    the GPU kernel without Triton's dispatch when a plugin offers that (None: Triton's)."""
    if grad.numel() == 0:
        return
    if grad.device.type == "cpu" and scale.device.type == "cpu":
        if scale.item() != 1:
            _multiply(grad, scale)
        return
    _scaler(grad.device, grad.numel(), grad.dtype, scale.dtype, direct_launch)(grad, scale)


@functools.cache
def _scaler(
    device: torch.device,
    numel: int,
    dtype: torch.dtype,
    scale_dtype: torch.dtype,
    direct_launch: DirectLauncher | None = None,
) -> Any:
    """How to scale ``numel`` elements of ``dtype`` by a ``scale_dtype`` scale on
    ``device`` (chosen once per gradient shape and dtypes: the backward's host time is on
    the step's critical path)."""
    # the kernel indexes with int32, up to a block past the end
    small = numel < 2**31 - _BLOCK
    kernel = _build(interpreted=False) if device.type == "cuda" and small else None
    if kernel is None:
        return _multiply
    index = _device_index(device)
    return _launcher(kernel, device.type, index, numel, dtype, scale_dtype, direct_launch)


def _multiply(grad: torch.Tensor, scale: torch.Tensor) -> None:
    """``grad *= scale`` computed in float32 (float64 if either is), rounded once: not
    ``grad.mul_(scale)``, which first rounds ``scale`` to a 16-bit ``grad``'s dtype."""
    wide = torch.float64 in (grad.dtype, scale.dtype)
    compute = torch.float64 if wide else torch.float32
    grad.copy_(grad.to(compute) * scale.reshape(()).to(compute))


def launch_scale(kernel: Any, grad: torch.Tensor, scale: torch.Tensor) -> None:
    """Run the Triton ``kernel`` (from :func:`_kernel`) on ``grad`` (also on CPU tensors
    under ``TRITON_INTERPRET=1``)."""
    index = _device_index(grad.device)
    launch = _launcher(kernel, grad.device.type, index, grad.numel(), grad.dtype, scale.dtype)
    launch(grad, scale)


def _device_index(device: torch.device) -> int:
    """A CUDA device's index (the current device's for a bare ``cuda``); -1 otherwise."""
    if device.type != "cuda":
        return -1
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.cache
def _launcher(
    kernel: Any,
    device: str,
    index: int,
    numel: int,
    dtype: torch.dtype,
    scale_dtype: torch.dtype,
    direct_launch: DirectLauncher | None = None,
) -> Any:
    """A launch of ``kernel`` over ``numel`` elements of ``dtype`` scaled by a
    ``scale_dtype`` value: its arguments are tensors only (the element count and steps
    ride in a small device tensor made here, once), so on the GPU it goes through
    ``direct_launch`` (the inductor answers that hook with its ``DirectLaunch``) when a
    plugin offers one, without Triton's per-call dispatch (tens of microseconds of host
    time per backward). A direct launch reuses the binary its first call compiled, for
    that call's pointer types: the dtypes are part of this cache's key, or a float32
    gradient's launch would read a later bfloat16 gradient of the same size as float32
    (garbage, seen on the H200)."""
    wide = torch.float64 in (dtype, scale_dtype)
    blocks = -(-numel // _BLOCK)
    # on the GPU a few programs per SM stride over the blocks: at a scale of 1 they return
    # at once (on the H200, 1.2 us for K7's 262M elements against 20 us for a program per
    # block); the interpreted variant takes one block per program
    programs = blocks
    if index >= 0:
        sms = torch.cuda.get_device_properties(index).multi_processor_count
        programs = min(blocks, _PROGRAMS_PER_SM * sms)
    steps = -(-blocks // programs)
    where = torch.device(device, index) if index >= 0 else torch.device(device)
    meta = torch.tensor([numel, steps], dtype=torch.int32, device=where)
    constants = {"BLOCK": _BLOCK, "WIDE": wide, "num_warps": _WARPS}

    def dispatched(grad: torch.Tensor, scale: torch.Tensor, sizes: torch.Tensor) -> None:
        kernel[(programs,)](grad, scale, sizes, **constants)

    launch: Any = dispatched
    if index >= 0 and direct_launch is not None:
        # None: no plugin launches directly (the runtime without the inductor)
        direct = direct_launch(
            kernel=kernel, grid=(programs,), constants=constants, fallback=dispatched
        )
        launch = direct if direct is not None else dispatched
    return lambda grad, scale: launch(grad, scale, meta)


def _kernel() -> Any:
    """The Triton kernel, or None without Triton. Under ``TRITON_INTERPRET=1`` a variant
    without the early exit, which Triton 3.6's interpreter cannot run: the CPU tests
    check that one, the GPU tests the other."""
    return _build(_interpreted())


def _interpreted() -> bool:
    """``TRITON_INTERPRET=1``: ``triton.jit`` builds interpreted kernels."""
    return Environment.from_env().triton_interpret


@functools.cache
def _build(interpreted: bool) -> Any:
    """The compiled kernel, or for ``interpreted`` the variant for Triton's interpreter
    (whatever ``TRITON_INTERPRET`` says now), or None without Triton.

    GPU gradients need the compiled kernel even where the variable is set: an
    interpreted kernel launched on GPU gradients with the GPU's grid scaled only the first
    ``_PROGRAMS_PER_SM * SMs`` blocks, leaving the rest of each gradient unscaled (on the
    H200, the GPU unit-gradient tests failed now and then, in worker processes that had
    run Triton on the CPU before, when the inductor left the variable set)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None
    with triton_interpret(interpreted):
        return _decorate(triton, tl, interpreted)


def _decorate(triton: Any, tl: Any, interpreted: bool) -> Any:
    """``triton.jit`` of the kernel (see :func:`_build`)."""

    @triton.jit
    def scale_unless_one(grad, scale, sizes, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        # sizes: [elements, steps per program]
        factor = tl.load(scale)
        factor = factor.to(tl.float64) if WIDE else factor.to(tl.float32)
        if factor != 1.0:
            numel = tl.load(sizes)
            for step in range(0, tl.load(sizes + 1)):
                index = (step * tl.num_programs(0) + tl.program_id(0)) * BLOCK
                index += tl.arange(0, BLOCK)
                mask = index < numel
                value = tl.load(grad + index, mask=mask)
                value = value.to(tl.float64) if WIDE else value.to(tl.float32)
                tl.store(grad + index, (value * factor).to(grad.dtype.element_ty), mask=mask)

    @triton.jit
    def scale_unless_one_interpreted(grad, scale, sizes, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        # Triton 3.6's interpreter loads a scalar as [1] and can neither branch on it nor
        # loop to a bound that is not a constant: one block per program (one step each),
        # every access masked off at a scale of 1
        first = tl.full([1], 0, tl.int32)
        factor = tl.load(scale + first)
        factor = factor.to(tl.float64) if WIDE else factor.to(tl.float32)
        index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = index < tl.where(factor != 1.0, tl.load(sizes + first), 0)
        value = tl.load(grad + index, mask=mask)
        value = value.to(tl.float64) if WIDE else value.to(tl.float32)
        tl.store(grad + index, (value * factor).to(grad.dtype.element_ty), mask=mask)

    return scale_unless_one_interpreted if interpreted else scale_unless_one
