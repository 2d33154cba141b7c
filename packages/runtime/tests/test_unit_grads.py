"""Unit gradients: a forward that also returns its scalar output's gradients for a
tangent of 1 has its first backward scale them in place instead of running the
backward graph (``AotResult.num_unit_grads``)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime.unit_grads as unit_grads
from torchstrata.core import AotResult, GraphBuilder, Level, TensorMeta, aten, hookimpl


def square_sum(x: torch.Tensor) -> torch.Tensor:
    return (x * x).sum()


class UnitGradAot:
    """``(x * x).sum()``: saves x, returns ``2 * x`` (or, with ``alias``, x itself, which
    is then not a gradient the runtime may scale) as the unit gradient."""

    def __init__(self, alias: bool = False) -> None:
        self.alias = alias

    @hookimpl
    def torchstrata_aot(self, graph, options):
        meta = graph.inputs[0].tensor_meta
        fwd = GraphBuilder(Level.ATEN)
        x = fwd.input("x", meta)
        loss = fwd.call(aten("sum.default"), fwd.call(aten("mul.Tensor"), x, x))
        unit = x if self.alias else fwd.call(aten("mul.Tensor"), x, 2)
        forward = fwd.build([loss, x, unit])
        bwd = GraphBuilder(Level.ATEN)
        saved = bwd.input("x", TensorMeta(meta.shape, meta.dtype))
        tangent = bwd.input("tangent", TensorMeta((), meta.dtype))
        scale = bwd.call(aten("mul.Tensor"), tangent, 1.0 if self.alias else 2.0)
        grad = bwd.call(aten("mul.Tensor"), saved, scale)
        return AotResult(
            forward,
            bwd.build([grad]),
            num_user_outputs=1,
            num_saved=1,
            tangent_outputs=(0,),
            grad_inputs=(0,),
            num_unit_grads=1,
        )


@pytest.fixture
def scaled(monkeypatch):
    """The data pointers of the gradients the runtime scaled in place."""
    seen: list[int] = []
    original = unit_grads.scale_in_place

    def spy(grad, scale, *launch):
        seen.append(grad.data_ptr())
        original(grad, scale, *launch)

    monkeypatch.setattr(unit_grads, "scale_in_place", spy)
    return seen


@pytest.mark.parametrize("seed", [1.0, 0.5, 0.0, -3.0])
def test_the_first_backward_scales_the_unit_gradient_instead_of_running_backward(
    make_stages, scaled, seed
):
    stages = make_stages(aot=False, extra=(("unit-aot", UnitGradAot()),))
    x = torch.randn(6, requires_grad=True)
    loss = stages.compile(square_sum)(x)
    loss.backward(torch.tensor(seed))
    torch.testing.assert_close(x.grad, 2 * x.detach() * seed)
    assert stages.codegen.calls == 1  # the backward graph was never compiled
    # the engine handed the forward's buffer to x.grad, not a copy of it
    assert scaled == [x.grad.data_ptr()]


def test_a_second_backward_through_a_retained_graph_runs_the_backward_graph(make_stages, scaled):
    stages = make_stages(aot=False, extra=(("unit-aot", UnitGradAot()),))
    x = torch.randn(6, requires_grad=True)
    loss = stages.compile(square_sum)(x)
    loss.backward(torch.tensor(2.0), retain_graph=True)
    loss.backward(torch.tensor(0.5))
    torch.testing.assert_close(x.grad, 2 * x.detach() * 2.5)
    assert len(scaled) == 1 and stages.codegen.calls == 2


def test_create_graph_runs_the_backward_graph(make_stages, scaled):
    stages = make_stages(aot=False, extra=(("unit-aot", UnitGradAot()),))
    x = torch.randn(6, requires_grad=True)
    loss = stages.compile(square_sum)(x)
    (grad,) = torch.autograd.grad(loss, x, torch.tensor(3.0), create_graph=True)
    torch.testing.assert_close(grad, 6 * x.detach())
    assert not scaled and stages.codegen.calls == 2


def test_a_unit_gradient_sharing_memory_with_an_input_is_never_scaled(make_stages, scaled):
    """Scaling it would change the caller's tensor: the backward graph runs instead."""
    stages = make_stages(aot=False, extra=(("unit-aot", UnitGradAot(alias=True)),))
    x = torch.randn(6, requires_grad=True)
    before = x.detach().clone()
    loss = stages.compile(square_sum)(x)
    loss.backward(torch.tensor(4.0))
    torch.testing.assert_close(x.detach(), before, rtol=0, atol=0)
    torch.testing.assert_close(x.grad, 4 * before)
    assert not scaled and stages.codegen.calls == 2


def test_after_a_tangent_other_than_one_the_forward_skips_its_unit_gradients(make_stages, scaled):
    """Scaling costs a pass that the backward graph would not: the next forward runs
    without unit gradients until a backward is seeded with 1 again."""
    stages = make_stages(aot=False, extra=(("unit-aot", UnitGradAot()),))
    compiled = stages.compile(square_sum)
    x = torch.randn(6, requires_grad=True)
    for seed, used in [(0.5, True), (1.0, False), (1.0, True), (2.0, True), (3.0, False)]:
        x.grad = None
        before = len(scaled)
        compiled(x).backward(torch.tensor(seed))
        torch.testing.assert_close(x.grad, 2 * x.detach() * seed)
        assert (len(scaled) > before) == used, seed


def test_after_a_forward_never_backpropagated_the_forward_skips_its_unit_gradients(
    make_stages, scaled
):
    """A loss computed with gradients on and dropped (an evaluation loop without
    no_grad) would pay for gradients nobody takes: the next forwards run without them
    until a backward runs again."""
    stages = make_stages(aot=False, extra=(("unit-aot", UnitGradAot()),))
    compiled = stages.compile(square_sum)
    x = torch.randn(6, requires_grad=True)
    torch.testing.assert_close(compiled(x), (x * x).sum())  # dropped: no backward
    for used in (False, True):  # without unit gradients, then (a backward ran) with
        x.grad = None
        before = len(scaled)
        compiled(x).backward()
        torch.testing.assert_close(x.grad, 2 * x.detach())
        assert (len(scaled) > before) == used


def test_a_bound_direct_launch_passes_the_compiles_cache_settings_and_hashes_by_value():
    from torchstrata.core import CompileOptions
    from torchstrata.runtime.unit_scale import BoundDirectLaunch

    calls = []

    def hook(**kwargs):
        calls.append(kwargs)
        return "launch"

    first = BoundDirectLaunch.of(hook, CompileOptions(cache_dir="/tmp/a", cache_size_limit=10))
    again = BoundDirectLaunch.of(hook, CompileOptions(cache_dir="/tmp/a", cache_size_limit=10))
    other = BoundDirectLaunch.of(hook, CompileOptions(cache_dir="/tmp/b"))
    assert first == again and hash(first) == hash(again) and first != other
    assert first(kernel="k", grid=(2,), constants={"BLOCK": 4}, fallback=print) == "launch"
    (kwargs,) = calls
    assert kwargs["options"].cache_dir == "/tmp/a" and kwargs["options"].cache_size_limit == 10
    assert (kwargs["kernel"], kwargs["grid"], kwargs["constants"]) == ("k", (2,), {"BLOCK": 4})
