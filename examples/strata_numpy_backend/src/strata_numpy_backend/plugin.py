"""The hook implementation torchstrata finds through the ``numpy-backend`` entry point."""

from __future__ import annotations

import torch

from strata_numpy_backend.backend import NumpyBackend
from torchstrata.core import CompileOptions, hookimpl
from torchstrata.inductor import Backend, BackendSpec, CodegenError


def _create(device: torch.device, options: CompileOptions) -> Backend:
    if device.type != "cpu":
        raise CodegenError(f"the numpy backend runs CPU tensors; the graph lives on {device}")
    return NumpyBackend()


@hookimpl
def torchstrata_inductor_backends() -> list[BackendSpec]:
    """The ``numpy`` backend (CPU only, never a default)."""
    return [BackendSpec("numpy", _create, "fused kernels evaluated with NumPy")]
