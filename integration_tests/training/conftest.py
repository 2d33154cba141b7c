"""Fixtures for the training tests: a fresh runtime per test, fallbacks as errors."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt


@pytest.fixture(autouse=True)
def _fresh_runtime():
    """Empty caches and seeded RNG; any eager fallback fails the test unless the test
    expects it (``pytest.warns``)."""
    rt.reset()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        yield
    rt.reset()


@pytest.fixture(params=["cpp", "eager"])
def codegen(request) -> str:
    """Generated C++ kernels, and the ATen graphs in the reference interpreter."""
    return request.param
