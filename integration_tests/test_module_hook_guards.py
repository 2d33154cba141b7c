"""Module hooks after a compile: a submodule call's hook dicts are one guard and the
global hook dicts another, so registering any hook on the submodule, or globally, fails
the generated check and the call re-traces (the hook then runs).

End to end: the guards come from the capture, so this needs every stage installed (the
runtime package's own tests run without the capture, in `nox -s isolated`).
"""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt


class _Child(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class _Parent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = _Child()
        self.second = _Child()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


@pytest.mark.parametrize(
    "register",
    [
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
    ],
)
@pytest.mark.parametrize("owner", ["second", "global"])
def test_each_hook_fails_the_generated_check_of_a_submodule_call(register, owner):
    """A submodule call's hook dicts are one guard (and the global ones another); the
    compiled check fails for a hook of each kind, on an instance or global, and holds
    again once it is removed."""
    model = _Parent()
    compiled = rt.compile(model)
    x = torch.randn(3)
    compiled(x)
    function = compiled.compiled_forward
    (entry,) = function.cache.entries
    check = entry.guards.check_args
    assert check is not None and check((x,), function._globals) == -1
    if owner == "global":
        register = register.replace("register_", "register_module_")
        handle = getattr(torch.nn.modules.module, register)(lambda *args: None)
    else:
        handle = getattr(model.second, register)(lambda *args: None)
    try:
        assert check((x,), function._globals) >= 0
        assert (
            entry.guards.fetch_args is None
            or entry.guards.fetch_args((x,), function._globals) is None
        )
        failure = entry.guards.failure(rt.bind_frame(model.forward, (x,), {}), function._globals)
        assert failure is not None and "hooks" in str(failure)
    finally:
        handle.remove()
    assert check((x,), function._globals) == -1
