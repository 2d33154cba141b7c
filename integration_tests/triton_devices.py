"""The devices of the Triton path, as test parameters: the interpreter on CPU tensors
here (``triton`` mark), compiled kernels on a GPU (``gpu`` mark, skipped without one).

The graph-cache test modules keep lists of their own: a fresh process loads them by path,
where a relative import does not resolve."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def triton_devices(cpu: str = "cpu", cuda: str = "cuda") -> list[Any]:
    """``pytest.param`` of ``cpu`` and of ``cuda`` (the values the test receives)."""
    return [
        pytest.param(cpu, marks=pytest.mark.triton),
        pytest.param(
            cuda,
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
            ],
        ),
    ]


#: ``"cpu"`` (the interpreter) and ``"cuda"``
TRITON_DEVICES = triton_devices()
