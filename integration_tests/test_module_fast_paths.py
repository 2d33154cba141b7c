"""Modules whose forward picks a fused fast path after asking about dispatch modes."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import torchstrata.runtime as rt


class _Recording(TorchDispatchMode):
    """Records the ATen ops that run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _attention() -> tuple[nn.MultiheadAttention, torch.Tensor]:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval().requires_grad_(False)
    return mha, torch.randn(2, 5, 16)


def test_multihead_attention_in_eval_mode_is_one_graph():
    # its forward asks for the dispatch-mode stack's length before taking the fused path
    mha, x = _attention()

    def attend(x):
        return mha(x, x, x, need_weights=False)[0]

    compiled = rt.compile(attend, fullgraph=True)
    torch.testing.assert_close(compiled(x), attend(x))
    torch.testing.assert_close(compiled(x + 1), attend(x + 1))
    assert len(compiled.cache) == 1


def test_a_dispatch_mode_fails_the_guard_and_sees_the_ops_eager_runs():
    mha, x = _attention()

    def attend(x):
        return mha(x, x, x, need_weights=False)[0]

    compiled = rt.compile(attend)
    compiled(x)
    with _Recording() as eager_mode:
        expected = attend(x)
    with _Recording() as compiled_mode:
        got = compiled(x)
    torch.testing.assert_close(got, expected)
    # the guard on the mode stack failed: compiled again under the mode, whose ops it saw
    assert len(compiled.cache) == 2
    assert compiled_mode.ops == eager_mode.ops
