"""Hooks on the module given to ``compile()`` itself run as in eager: its compiled
``__call__`` traces them with the forward (a backward pre-hook there used to be skipped:
the compiled forward bypassed ``nn.Module.__call__``), and removing them goes back to the
compiled forward."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt


def _scale_output(module, log):
    return module.register_forward_hook(lambda mod, args, out: log.append("post") or out * 3)


def _shift_input(module, log):
    return module.register_forward_pre_hook(lambda mod, args: log.append("pre") or (args[0] + 1,))


def _scale_grad_input(module, log):
    return module.register_full_backward_hook(
        lambda mod, grad_in, grad_out: log.append("backward") or (grad_in[0] * 5,)
    )


def _scale_grad_output(module, log):
    return module.register_full_backward_pre_hook(
        lambda mod, grad_out: log.append("backward pre") or (grad_out[0] * 2,)
    )


def _with_kwargs(module, log):
    return module.register_forward_hook(
        lambda mod, args, kwargs, out: log.append(sorted(kwargs)) or out - 1, with_kwargs=True
    )


HOOKS = [_scale_output, _shift_input, _scale_grad_input, _scale_grad_output, _with_kwargs]


def _step(call, x):
    out = call(x)
    out.sum().backward()
    grad, x.grad = x.grad, None
    return out.detach(), grad


@pytest.mark.parametrize("add_hook", HOOKS, ids=lambda f: f.__name__.lstrip("_"))
def test_hooks_of_the_compiled_module_run_as_in_eager(add_hook):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    log: list[object] = []
    handle = add_hook(module, log)
    x = torch.randn(2, 4, requires_grad=True)
    want_out, want_grad = _step(module, x)
    eager_log = list(log)
    log.clear()
    compiled = rt.compile(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        got_out, got_grad = _step(compiled, x)
    torch.testing.assert_close(got_out, want_out)
    torch.testing.assert_close(got_grad, want_grad)
    assert log == eager_log and log
    report = rt.explain(compiled, x)
    assert report.graph_count == 1 and not report.graph_breaks
    handle.remove()
    log.clear()
    got_out, got_grad = _step(compiled, x)
    want_out, want_grad = _step(module, x)
    torch.testing.assert_close(got_out, want_out)
    torch.testing.assert_close(got_grad, want_grad)
    assert log == []
