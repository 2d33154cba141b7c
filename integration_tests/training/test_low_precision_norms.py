"""float16/bfloat16 training steps on the CPU of ops that save statistics for their
backward (layer norm's mean and rstd, RMS norm's rstd, softmax's output): gradients
match eager's and hold no NaN.

The forward and backward graphs must agree on the dtype of every saved value: a CPU
layer norm saves its statistics in the input dtype, and a backward kernel reading them
as float32 reads past their end (NaN gradients whose count changed from run to run).
Each step runs twice so that reads of uninitialised memory show.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt


def layer_norm(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def rms_norm(x, weight, bias):
    return F.rms_norm(x, (x.shape[-1],), weight, 1e-6) + bias


def softmax(x, weight, bias):
    return torch.softmax(x * weight + bias, dim=-1)


def log_softmax(x, weight, bias):
    return torch.log_softmax(x * weight + bias, dim=-1)


FUNCTIONS = {f.__name__: f for f in (layer_norm, rms_norm, softmax, log_softmax)}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _leaves(dtype: torch.dtype) -> list[torch.Tensor]:
    shapes = [(64, 256), (256,), (256,)]
    return [torch.randn(shape).to(dtype).requires_grad_() for shape in shapes]


def _step(fn, leaves: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = fn(*leaves)
    # A fixed, non-uniform tangent: a plain sum makes softmax's input gradient zero.
    out.float().mul(torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    grads = [leaf.grad for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    return out.detach(), grads


@pytest.mark.parametrize("dtype_name", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_low_precision_training_step_matches_eager(name, dtype_name, tmp_path):
    fn, dtype = FUNCTIONS[name], DTYPES[dtype_name]
    leaves = _leaves(dtype)
    eager_out, eager_grads = _step(fn, leaves)
    compiled = rt.compile(fn, options={"cache_dir": str(tmp_path)})
    for _ in range(2):
        out, grads = _step(compiled, leaves)
        assert out.dtype == dtype and not out.isnan().any()
        torch.testing.assert_close(out.float(), eager_out.float(), rtol=2e-2, atol=2e-2)
        for grad, eager_grad in zip(grads, eager_grads, strict=True):
            assert grad.dtype == dtype
            assert not grad.isnan().any()
            # Sums over 64 rows in a 8- or 11-bit mantissa: a few units in the last place.
            scale = eager_grad.float().abs().max().item()
            torch.testing.assert_close(grad.float(), eager_grad.float(), rtol=0, atol=0.05 * scale)


def test_backward_kernels_are_built_in_the_cache_dir(tmp_path):
    """The backward graph, compiled on the first backward, honours ``cache_dir`` too."""
    compiled = rt.compile(layer_norm, options={"cache_dir": str(tmp_path)})
    leaves = _leaves(torch.bfloat16)
    out = compiled(*leaves)
    forward_libraries = set(tmp_path.rglob("*.so"))
    assert forward_libraries
    out.float().sum().backward()
    backward_libraries = set(tmp_path.rglob("*.so")) - forward_libraries
    assert backward_libraries
    assert os.path.commonpath([tmp_path, *backward_libraries]) == str(tmp_path)
