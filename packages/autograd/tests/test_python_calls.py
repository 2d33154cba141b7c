"""Ops that call Python in the backward (a gradient hook, decision 0067) run there only:
not in a unit-gradient forward, not on the trace's probe tensors."""

from __future__ import annotations

import torch

from torchstrata.autograd import aot
from torchstrata.autograd.python_calls import calls_python
from torchstrata.core import GraphBuilder, Level, OpKind, OpRef, TensorMeta, interpret, torch_op

CALLS: list[torch.Tensor] = []

_LIBRARY = torch.library.Library("aten", "FRAGMENT")
_LIBRARY.define("_torchstrata_test_hook(Tensor x) -> Tensor")
_LIBRARY.define("_torchstrata_call_test_hook(Tensor grad) -> Tensor")


def _copy(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def _call(grad: torch.Tensor) -> torch.Tensor:
    CALLS.append(grad.clone())
    return grad * 2


_LIBRARY.impl("_torchstrata_test_hook", _copy, "CompositeExplicitAutograd")
_LIBRARY.impl("_torchstrata_call_test_hook", _call, "CompositeExplicitAutograd")
torch.library.register_fake("aten::_torchstrata_test_hook", torch.empty_like, lib=_LIBRARY)
torch.library.register_fake("aten::_torchstrata_call_test_hook", torch.empty_like, lib=_LIBRARY)
torch.library.register_autograd(
    "aten::_torchstrata_test_hook",
    lambda ctx, grad: torch.ops.aten._torchstrata_call_test_hook(grad),
    lib=_LIBRARY,
)


def test_a_python_call_stays_in_the_backward():
    b = GraphBuilder(Level.TORCH)
    x = b.input("x", TensorMeta((3,), torch.float32, requires_grad=True))
    hooked = b.call(OpRef(OpKind.TORCH, "torch.ops.aten._torchstrata_test_hook.default"), x)
    loss = b.call(torch_op(torch.sum), b.call(torch_op(torch.sin), hooked))
    CALLS.clear()
    result = aot(b.build([loss]))
    assert CALLS == []  # tracing (and its kernel probes) never ran it
    assert result.num_unit_grads == 0  # a scalar loss, but its gradient calls Python
    assert result.backward is not None
    assert any(calls_python(node) for node in result.backward.nodes)
    assert not any(calls_python(node) for node in result.forward.nodes)
    value = torch.randn(3)
    saved = interpret(result.forward, value)[result.num_user_outputs :]
    (grad,) = interpret(result.backward, *saved, torch.tensor(1.0))
    assert len(CALLS) == 1
    torch.testing.assert_close(grad, 2 * torch.cos(value))
