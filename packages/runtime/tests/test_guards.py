"""GuardSet: one generated check function over L (arguments) and G (globals)."""

from __future__ import annotations

import torch

import torchstrata.runtime as rt
from torchstrata.core import Guard, GuardKind, TensorMeta

THRESHOLD = 3


def uses_global(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    return x * scale + THRESHOLD


def test_bind_frame_applies_defaults_and_binds_self():
    frame = rt.bind_frame(uses_global, (torch.ones(1),), {})
    assert set(frame) == {"x", "scale"} and frame["scale"] == 2.0
    module = torch.nn.Linear(2, 2)
    frame = rt.bind_frame(module.forward, (torch.ones(2),), {})
    assert frame["self"] is module and "input" in frame


def test_every_guard_kind_and_the_failing_one_is_named():
    x = torch.randn(2, 3)
    guards = rt.GuardSet(
        [
            Guard(GuardKind.TENSOR_MATCH, "L['x']", TensorMeta.from_tensor(x)),
            Guard(GuardKind.CONSTANT_MATCH, "L['scale']", 2.0),
            Guard(GuardKind.ID_MATCH, "G['torch']", id(torch)),
            Guard(GuardKind.TYPE_MATCH, "G['THRESHOLD']", int),
            Guard(GuardKind.CONSTANT_MATCH, "G['THRESHOLD']", 3),
        ]
    )
    assert "def check_guards(L, G)" in guards.source
    assert guards.source.count("_v0 = L['x']") == 1
    globals_ = uses_global.__globals__

    def failure(*args, **kwargs):
        return guards.failure(rt.bind_frame(uses_global, args, kwargs), globals_)

    assert failure(x) is None
    assert failure(torch.randn(3, 3)).guard.source == "L['x']"
    assert failure(torch.randn(3, 2).t()).guard.source == "L['x']"  # same shape, other strides
    assert failure(x.double()).guard.source == "L['x']"
    assert failure(x.requires_grad_()).guard.kind is GuardKind.TENSOR_MATCH
    x.requires_grad_(False)
    assert failure(x, scale=3.0).guard.source == "L['scale']"
    assert failure(x, scale=2).guard.source == "L['scale']"  # int is not float
    assert "expected torch.float32 [2, 3]" in str(failure(x.double()))


def test_a_source_that_raises_fails_its_guard():
    guards = rt.GuardSet([Guard(GuardKind.CONSTANT_MATCH, "L['self'].missing.attr", 1)])
    assert guards.failure({"self": object()}, {}).guard.source == "L['self'].missing.attr"


def test_module_parameter_sources():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4))
    guards = rt.GuardSet(
        [
            Guard(
                GuardKind.TENSOR_MATCH,
                "L['self'][0].weight",
                TensorMeta.from_tensor(module[0].weight),
            ),
            Guard(GuardKind.CONSTANT_MATCH, "L['self'].training", True),
            Guard(GuardKind.ID_MATCH, "L['self'][0]", id(module[0])),
        ]
    )
    frame = rt.bind_frame(module.forward, (torch.ones(4),), {})
    assert guards.failure(frame, {}) is None
    module.eval()
    assert guards.failure(frame, {}).guard.source == "L['self'].training"
    module.train()
    module[0].weight = torch.nn.Parameter(torch.randn(4, 4).half())
    assert guards.failure(frame, {}).guard.source == "L['self'][0].weight"


def test_a_fetched_source_is_reused_by_longer_ones():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4))
    guards = rt.GuardSet(
        [
            Guard(GuardKind.ID_MATCH, "L['self'][0]", id(module[0])),
            Guard(
                GuardKind.TENSOR_MATCH,
                "L['self'][0].weight",
                TensorMeta.from_tensor(module[0].weight),
            ),
            Guard(GuardKind.CONSTANT_MATCH, "len(L['self'])", 1),
        ]
    )
    assert "_v1 = _v0.weight" in guards.source
    assert "len(L['self'])" in guards.source  # not a prefix: evaluated as written
    frame = rt.bind_frame(module.forward, (torch.ones(4),), {})
    assert guards.failure(frame, {}) is None
    module[0] = torch.nn.Linear(4, 4)
    assert guards.failure(frame, {}).guard.source == "L['self'][0]"
