"""Small helpers to make seeded random inputs for workloads."""

from __future__ import annotations

import torch

SEED = 0


def seeded() -> None:
    """Reset the global RNGs so every build of a workload sees the same numbers."""
    torch.manual_seed(SEED)


def randn(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    *,
    requires_grad: bool = False,
    scale: float = 1.0,
) -> torch.Tensor:
    """A normal random tensor (generated in fp32, then cast) as a leaf."""
    t = torch.randn(shape, dtype=torch.float32, device=device) * scale
    return t.to(dtype).requires_grad_(requires_grad)


def randn_like_all(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Random gradient tensors shaped like ``tensors`` (for ``backward``)."""
    return tuple(randn(tuple(t.shape), t.dtype, t.device) for t in tensors)
