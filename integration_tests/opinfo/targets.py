"""Where the compiled OpInfo tests run: the CPU through C++ kernels, and a GPU (when
there is one) through Triton kernels."""

from __future__ import annotations

import pytest
import torch

#: pytest parameters: ``"cpu"``, and ``"cuda"`` marked ``gpu`` (skipped without a device).
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]

#: The code generator each device's samples are compiled with.
CODEGEN = {"cpu": "cpp", "cuda": "triton"}
