"""The per-call path of a compiled function: what a cache hit runs, and that its
shortcuts (guards reading a positional call's arguments directly, graph runners that
are the generated launcher itself) check and return exactly what the general path does.
Here, not in the runtime package: it runs the real capture stage."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torchstrata.runtime as rt

from .profiled_calls import python_calls

RUNTIME_DIR = os.path.dirname(rt.__file__)


def scale_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale + y


def _agree(guards: rt.GuardSet, fn: Callable[..., Any], args: tuple[Any, ...]) -> int:
    """The failing index (-1: none) of both checks, which must be the same."""
    globals_ = getattr(fn, "__func__", fn).__globals__
    by_frame = guards.check(rt.bind_frame(fn, args, {}), globals_)
    assert guards.check_args is not None
    assert guards.check_args(args, globals_) == by_frame, args
    return by_frame


def test_positional_guards_agree_with_frame_guards():
    compiled = rt.compile(scale_add)
    x, y = torch.randn(4, 3), torch.randn(3)
    with torch.no_grad():
        compiled(x, y, 2.0)
        (entry,) = compiled.cache.entries
        guards = entry.guards
        assert guards.args_source is not None and "L[" not in guards.args_source
        assert _agree(guards, scale_add, (x, y, 2.0)) == -1
        failing = [
            (torch.randn(5, 3), y, 2.0),  # shape
            (x.double(), y, 2.0),  # dtype
            (torch.randn(3, 4).t(), y, 2.0),  # same shape, other strides
            (x.clone().requires_grad_(), y, 2.0),
            (x, y, 3.0),  # another constant
            (x, y, 2),  # an int is not a float
            ("x", y, 2.0),  # not a tensor
            (x, torch.randn(3, device="meta"), 2.0),  # another device
        ]
        for args in failing:
            assert _agree(guards, scale_add, args) >= 0
    assert _agree(guards, scale_add, (x, y, 2.0)) == 0  # grad mode is guarded too


def test_module_guards_read_self_and_arguments_directly():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    compiled = rt.compile(model)
    x = torch.randn(2, 3)
    with torch.no_grad():
        compiled(x)
        (entry,) = compiled.compiled_forward.cache.entries
        guards = entry.guards
        assert guards.args_source is not None and "_self" in guards.args_source
        assert _agree(guards, model.forward, (x,)) == -1
        assert _agree(guards, model.forward, (torch.randn(3, 3),)) >= 0
        model[0].weight = torch.nn.Parameter(torch.randn(4, 3).t().contiguous().t())
        assert _agree(guards, model.forward, (x,)) >= 0  # the weight's strides changed
        model[0].weight = torch.nn.Parameter(torch.randn(4, 3))
        assert _agree(guards, model.forward, (x,)) == -1
        model[1] = torch.nn.GELU()
        assert _agree(guards, model.forward, (x,)) >= 0


def test_keyword_and_positional_calls_share_an_entry_and_recompile_alike():
    compiled = rt.compile(scale_add)
    x, y = torch.randn(4, 3), torch.randn(3)
    with torch.no_grad():
        first = compiled(x, y, 2.0)
        by_keyword = compiled(x, y=y, scale=2.0)
        assert len(compiled.cache) == 1
        torch.testing.assert_close(first, by_keyword)
        torch.testing.assert_close(compiled(x, y, 3.0), scale_add(x, y, 3.0))
        torch.testing.assert_close(compiled(x, scale=3.0, y=y), scale_add(x, y, 3.0))
    assert len(compiled.cache) == 2
    assert compiled.recompile_reasons == ["constant_match on L['scale'] (expected 2.0)"]


def test_a_bad_call_still_reaches_the_function():
    compiled = rt.compile(scale_add)
    with pytest.raises(TypeError, match="scale"):
        compiled(torch.randn(3), torch.randn(3))


def _runtime_frames(call: Callable[[], Any]) -> list[str]:
    """Names of the Python functions of this package that ``call`` runs, in order."""
    return python_calls(call, lambda code: code.co_filename.startswith(RUNTIME_DIR))


def test_a_warm_call_runs_no_frame_binding_and_no_runner_wrapper():
    compiled = rt.compile(scale_add)
    x, y = torch.randn(4, 3), torch.randn(3)
    with torch.no_grad():
        compiled(x, y, 2.0)
        frames = _runtime_frames(lambda: compiled(x, y, 2.0))
    assert frames == ["CompiledFunction.__call__", "FrameCache.find_args"]


def test_a_warm_training_call_runs_the_autograd_function_only():
    compiled = rt.compile(scale_add)
    x, y = torch.randn(4, 3, requires_grad=True), torch.randn(3)
    compiled(x, y, 2.0)
    frames = _runtime_frames(lambda: compiled(x, y, 2.0))
    assert frames[:2] == ["CompiledFunction.__call__", "FrameCache.find_args"]
    assert not any(name.endswith("run") for name in frames)


def test_outputs_that_cannot_have_gradients_stay_non_differentiable():
    def sine_and_sign(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.sin()
        return y * 2, y > 0

    x = torch.randn(5, requires_grad=True)
    compiled = rt.compile(sine_and_sign)
    for _ in range(2):  # the first run and a warm one
        doubled, positive = compiled(x)
        assert doubled.requires_grad and not positive.requires_grad
        torch.testing.assert_close(positive, x.sin() > 0)
        (grad,) = torch.autograd.grad(doubled.sum(), x)
        torch.testing.assert_close(grad, 2 * x.cos())


def test_guards_hand_the_graph_inputs_to_the_program():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    compiled = rt.compile(model)
    x = torch.randn(2, 3)
    with torch.no_grad():
        compiled(x)
        function = compiled.compiled_forward
        (entry,) = function.cache.entries
        assert entry.run_inputs is not None and entry.guards.fetch_args is not None
        globals_ = function._globals
        inputs = entry.guards.fetch_args((x,), globals_)
        assert inputs is not None and inputs[0] is x
        assert any(value is model[0].weight for value in inputs)
        # It fails exactly when check_args does.
        for args in [(x,), (torch.randn(3, 3),), (x.double(),)]:
            failed = entry.guards.fetch_args(args, globals_) is None
            assert failed == (entry.guards.check_args(args, globals_) >= 0)
        frames = _runtime_frames(lambda: compiled(x))
        assert frames[-2:] == ["CompiledFunction.__call__", "FrameCache.find_args"]
        torch.testing.assert_close(compiled(x), model(x))
        model[0].weight = torch.nn.Parameter(torch.randn(4, 3))  # a new weight is read
        torch.testing.assert_close(compiled(x), model(x))
    assert len(function.cache) == 1


def test_no_direct_run_when_the_result_reads_the_arguments():
    def doubled_and_input(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x

    compiled = rt.compile(doubled_and_input)
    x = torch.randn(3)
    with torch.no_grad():
        for _ in range(2):
            doubled, same = compiled(x)
            assert same is x
            torch.testing.assert_close(doubled, x * 2)
    (entry,) = compiled.cache.entries
    assert entry.run_inputs is None and entry.guards.fetch_args is None


def test_a_direct_run_writes_mutations_back():
    def add_in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(y)
        return y * 2

    compiled = rt.compile(add_in_place)
    x, y = torch.zeros(3), torch.ones(3)
    with torch.no_grad():
        for step in range(1, 4):
            torch.testing.assert_close(compiled(x, y), y * 2)
            torch.testing.assert_close(x, torch.full((3,), float(step)))
    (entry,) = compiled.cache.entries
    assert entry.run_inputs is not None


class _Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.shift


def test_module_members_are_read_from_their_dicts():
    model = _Affine()
    compiled = rt.compile(model)
    with torch.no_grad():
        compiled(torch.randn(2, 3))
    (entry,) = compiled.compiled_forward.cache.entries
    sources = {guard.source for guard in entry.guards.guards}
    fc = "L['self']._modules['fc']"
    assert {f"{fc}._parameters['weight']", "L['self']._buffers['shift']"} <= sources
    absent = {(g.source, g.expected) for g in entry.guards.guards if g.kind.name == "ABSENT_KEY"}
    assert (f"{fc}.__dict__", "weight") in absent  # no shadowing value
    assert (f"{fc}.__dict__", "bias") in absent  # every member of one dict, not the first
    assert not any(source.endswith((".weight", ".fc", ".shift")) for source in sources)


def test_a_member_shadowed_after_the_compile_fails_its_guard():
    """Each member read from a module's dicts is guarded absent from its ``__dict__``,
    not only the first: with one ``ABSENT_KEY`` guard kept per source, shadowing ``bias``
    ran the graph traced with the parameter (a silent wrong result)."""
    module = torch.nn.Linear(3, 3)
    compiled = rt.compile(module)
    x = torch.randn(2, 3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        torch.testing.assert_close(compiled(x), module(x))
        object.__setattr__(module, "bias", torch.full((3,), 100.0))
        torch.testing.assert_close(compiled(x), module(x))


def _new_weight(model: _Affine) -> None:
    model.fc.weight = torch.nn.Parameter(torch.randn(4, 3))


def _transposed_weight(model: _Affine) -> None:
    model.fc.weight = torch.nn.Parameter(torch.randn(3, 4).t())


def _weight_updated_in_place(model: _Affine) -> None:
    model.fc.weight.mul_(-2.0)


def _new_buffer(model: _Affine) -> None:
    model.shift = torch.randn(4)


def _weight_made_a_plain_attribute(model: _Affine) -> None:
    del model.fc.weight
    model.fc.weight = torch.randn(4, 3)


def _weight_shadowed_in_the_instance_dict(model: _Affine) -> None:
    object.__setattr__(model.fc, "weight", torch.randn(4, 3))


def _new_submodule(model: _Affine) -> None:
    model.fc = torch.nn.Linear(3, 4)


@pytest.mark.parametrize(
    "change",
    [
        _new_weight,
        _transposed_weight,
        _weight_updated_in_place,
        _new_buffer,
        _weight_made_a_plain_attribute,
        _weight_shadowed_in_the_instance_dict,
        _new_submodule,
    ],
)
def test_a_module_member_changed_after_compiling_is_read_anew(change):
    model = _Affine()
    compiled = rt.compile(model)
    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        change(model)
        for _ in range(2):
            torch.testing.assert_close(compiled(x), model(x))


class _Negated(torch.Tensor):
    """A subclass whose products come out negated (its own ``__torch_function__``)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return -out if getattr(func, "__name__", "") == "mul" else out


def test_a_tensor_subclass_after_a_plain_tensor_runs_eagerly():
    def doubled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    compiled = rt.compile(doubled)
    x = torch.randn(3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), x * 2)
        subclass = x.as_subclass(_Negated)
        with pytest.warns(rt.TorchstrataFallbackWarning, match="subclass"):
            got = compiled(subclass)
    want = doubled(subclass)
    assert type(got) is _Negated
    torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
    torch.testing.assert_close(want.as_subclass(torch.Tensor), -(x * 2))
