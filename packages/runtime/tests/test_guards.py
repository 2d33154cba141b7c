"""GuardSet: one generated check function over L (arguments) and G (globals)."""

from __future__ import annotations

import math

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


def test_bind_frame_follows_a_reassigned_code():
    """The signature is cached by function and code: after ``__code__`` is reassigned,
    calls bind by the new code's parameters, and by the old ones once it is back."""

    def first(x, y):
        return x

    def second(a, b):
        return a

    original = first.__code__
    assert set(rt.bind_frame(first, (1, 2), {})) == {"x", "y"}
    first.__code__ = second.__code__
    try:
        assert set(rt.bind_frame(first, (1, 2), {})) == {"a", "b"}
    finally:
        first.__code__ = original
    assert set(rt.bind_frame(first, (1, 2), {})) == {"x", "y"}


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
    # L['self'] is read by all three: fetched once, before the first
    assert "_v0 = L['self']" in guards.source and "_v1 = _v0[0]" in guards.source
    assert "_v2 = _v1.weight" in guards.source
    assert "_v3 = len(_v0)" in guards.source  # inside a call too
    frame = rt.bind_frame(module.forward, (torch.ones(4),), {})
    assert guards.failure(frame, {}) is None
    module[0] = torch.nn.Linear(4, 4)
    assert guards.failure(frame, {}).guard.source == "L['self'][0]"


def _sequence_guards(source: str, values: list[object], container: type = list) -> list[Guard]:
    """The guards the capture makes for a constant sequence: type, length, each item."""
    return [
        Guard(GuardKind.TYPE_MATCH, source, container),
        Guard(GuardKind.CONSTANT_MATCH, f"len({source})", len(values)),
        *(Guard(GuardKind.CONSTANT_MATCH, f"{source}[{i}]", v) for i, v in enumerate(values)),
    ]


def test_a_constant_sequence_is_checked_as_one_and_its_failing_item_is_named():
    values = [1, 2.5, "mean", None, True]
    guards = rt.GuardSet(_sequence_guards("G['ITEMS']", values))
    assert guards.source.count("if not") == 1
    assert guards.failure({}, {"ITEMS": list(values)}) is None
    changed = {
        "an item": [1, 2.5, "sum", None, True],
        "an int that equals a bool": [True, 2.5, "mean", None, True],
        "a float that equals an int": [1.0, 2.5, "mean", None, True],
        "a longer list": [*values, 0],
    }
    named = {
        "an item": "G['ITEMS'][2]",
        "an int that equals a bool": "G['ITEMS'][0]",
        "a float that equals an int": "G['ITEMS'][0]",
        "a longer list": "len(G['ITEMS'])",
    }
    for what, items in changed.items():
        failure = guards.failure({}, {"ITEMS": items})
        assert failure is not None and failure.guard.source == named[what], what
    assert guards.failure({}, {"ITEMS": tuple(values)}).guard.source == "G['ITEMS']"
    assert guards.failure({}, {}).guard.source == "G['ITEMS']"


def test_a_tuple_attribute_and_a_short_or_partly_read_sequence():
    guards = rt.GuardSet(_sequence_guards("L['self'].stride", [1, 2], tuple))
    assert guards.source.count("if not") == 1
    conv = torch.nn.Conv2d(1, 1, 3, stride=(1, 2))
    assert guards.failure({"self": conv}, {}) is None
    conv.stride = (1, 1)
    assert guards.failure({"self": conv}, {}).guard.source == "L['self'].stride[1]"
    short = rt.GuardSet(_sequence_guards("G['ONE']", [3]))
    assert short.source.count("if not") == 3  # one item: kept as it is
    partial = _sequence_guards("G['L']", [1, 2, 3])
    del partial[3]  # item 1 never read by the capture
    assert rt.GuardSet(partial).source.count("if not") == 4


def test_a_tuple_group_passes_an_object_once_and_checks_every_other_one():
    """The tuple group's check remembers the last tuple that passed (``is``); a tuple of
    other values, of the same values as another object, of values equal under ``==``
    but of other types, and ``None`` (at the first call too) are each checked in full."""
    values = (1, 2, "zeros")
    guards = rt.GuardSet(_sequence_guards("G['T']", list(values), tuple))
    assert guards.source.count(" is not ") == 1
    assert guards.check({}, {"T": None}) >= 0  # before any tuple passed
    passing = tuple(list(values))
    assert guards.check({}, {"T": passing}) == -1
    assert guards.check({}, {"T": passing}) == -1  # the remembered object
    assert guards.check({}, {"T": (1, 3, "zeros")}) >= 0
    assert guards.check({}, {"T": (True, 2, "zeros")}) >= 0  # equal under ==, a bool
    assert guards.check({}, {"T": (1.0, 2, "zeros")}) >= 0
    assert guards.check({}, {"T": [1, 2, "zeros"]}) >= 0
    assert guards.check({}, {"T": tuple(list(values))}) == -1  # equal, another object
    assert guards.check({}, {"T": None}) >= 0
    failure = guards.failure({}, {"T": (1, 3, "zeros")})
    assert failure is not None and failure.guard.source == "G['T'][1]"


def test_a_list_group_is_checked_in_full_every_call():
    """A list can change in place: no remembered object."""
    guards = rt.GuardSet(_sequence_guards("G['L']", [1, 2]))
    assert " is not " not in guards.source
    items = [1, 2]
    assert guards.check({}, {"L": items}) == -1
    items[1] = 3
    assert guards.check({}, {"L": items}) >= 0


def test_zero_and_nan_floats_are_told_apart_exactly():
    zero = rt.GuardSet([Guard(GuardKind.CONSTANT_MATCH, "L['s']", 0.0)])
    assert zero.failure({"s": 0.0}, {}) is None
    assert zero.failure({"s": -0.0}, {}) is not None
    assert zero.failure({"s": 0}, {}) is not None
    negative = rt.GuardSet([Guard(GuardKind.CONSTANT_MATCH, "L['s']", -0.0)])
    assert negative.failure({"s": -0.0}, {}) is None
    assert negative.failure({"s": 0.0}, {}) is not None
    nan = rt.GuardSet([Guard(GuardKind.CONSTANT_MATCH, "L['s']", math.nan)])
    assert nan.failure({"s": float("nan")}, {}) is None
    assert nan.failure({"s": 1.0}, {}) is not None
    # in a sequence, a zero float keeps its own exact guard
    guards = rt.GuardSet(_sequence_guards("G['S']", [1.0, 0.0, 2.0]))
    assert guards.source.count("if not") == 5
    assert guards.failure({}, {"S": [1.0, -0.0, 2.0]}).guard.source == "G['S'][1]"


def test_a_compiled_call_tells_a_negative_zero_from_zero():
    def divide(x: torch.Tensor, s: float) -> torch.Tensor:
        return x / s

    compiled = rt.compile(divide)
    x = torch.ones(3)
    for s in (0.0, -0.0, 0.0, float("nan"), float("nan")):
        torch.testing.assert_close(compiled(x, s), divide(x, s), equal_nan=True)

    def both_signs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return 1 / (x * 0.0), 1 / (x * -0.0)

    torch.testing.assert_close(rt.compile(both_signs)(x), both_signs(x))


class _Divide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.s = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(int(x.sum().item())):  # a graph break: what follows is a segment
            x = x * 2
        return x / self.s


def test_after_a_graph_break_a_negative_zero_is_told_from_zero():
    """The segment after the break guards ``self.s`` itself (capture's guard check)."""
    module = _Divide()
    compiled = rt.compile(module)
    x = torch.ones(3)
    for value in (0.0, -0.0, 0.0, float("nan"), -0.0):
        module.s = value
        torch.testing.assert_close(compiled(x), module(x), equal_nan=True)


def test_a_modules_member_shadowing_guards_are_checked_as_one():
    module = torch.nn.Linear(2, 2)
    names = ("weight", "bias")
    guards = rt.GuardSet(
        [Guard(GuardKind.ABSENT_KEY, "L['self'].__dict__", name) for name in names]
        + [Guard(GuardKind.ID_MATCH, "L['self']", id(module))]
    )
    assert guards.source.count("if not") == 2
    assert guards.failure({"self": module}, {}) is None
    object.__setattr__(module, "bias", torch.zeros(2))  # shadows the parameter
    failure = guards.failure({"self": module}, {})
    assert failure is not None and failure.guard.expected == "bias"


def test_a_fetched_value_is_read_from_its_variable_inside_calls_and_ors():
    """A source that contains a fetched one (``len(...)`` of it, an operand of ``or``)
    reads it from its variable, and still fails when what it reads changes."""
    module = torch.nn.Linear(2, 2)
    hooks = " or ".join(f"L['self'].__dict__[{name!r}]" for name in ("_forward_hooks", "_buffers"))
    guards = rt.GuardSet(
        [
            Guard(GuardKind.ABSENT_KEY, "L['self'].__dict__", "forward"),
            Guard(GuardKind.CONSTANT_MATCH, f"{hooks} or None", None),
            Guard(GuardKind.CONSTANT_MATCH, "len(L['self'].__dict__['_parameters'])", 2),
        ]
    )
    assert "_v1 = _v0.__dict__" in guards.source  # _v0: L['self'], read by all three
    assert "_v2 = _v1['_forward_hooks'] or _v1['_buffers'] or None" in guards.source
    assert "_v3 = len(_v1['_parameters'])" in guards.source
    assert guards.failure({"self": module}, {}) is None
    handle = module.register_forward_hook(lambda *args: None)
    assert guards.failure({"self": module}, {}).guard.source.startswith("L['self'].__dict__[")
    handle.remove()
    module.register_buffer("extra", torch.zeros(1))
    assert guards.failure({"self": module}, {}).guard.source.endswith("or None")
    del module.extra
    module.register_parameter("extra", None)
    assert guards.failure({"self": module}, {}).guard.source.startswith("len(")


def test_an_identity_guard_holding_its_object_compares_with_is():
    """An ``ID_MATCH`` that holds its object (``referent``) is checked with ``is``; one
    whose referent is not the object of its ``id()`` falls back to comparing ids."""
    module = torch.nn.Linear(2, 2)
    held = rt.GuardSet([Guard(GuardKind.ID_MATCH, "L['m']", id(module), referent=module)])
    assert "_v0 is _c0" in held.source and "id(" not in held.source
    assert held.failure({"m": module}, {}) is None
    assert held.failure({"m": torch.nn.Linear(2, 2)}, {}) is not None
    other = rt.GuardSet([Guard(GuardKind.ID_MATCH, "L['m']", id(module), referent=object())])
    assert "id(_v0) ==" in other.source
    assert other.failure({"m": module}, {}) is None


def test_a_read_shared_by_two_sources_is_fetched_once_and_still_guarded():
    module = torch.nn.Linear(2, 2)
    guards = rt.GuardSet(
        [
            Guard(
                GuardKind.TENSOR_MATCH,
                f"L['self']._parameters[{name!r}]",
                TensorMeta.from_tensor(getattr(module, name)),
            )
            for name in ("weight", "bias")
        ]
    )
    assert guards.source.count("._parameters") == 1
    assert "_v2 = _v1['weight']" in guards.source and "_v3 = _v1['bias']" in guards.source
    assert guards.failure({"self": module}, {}) is None
    module.bias = torch.nn.Parameter(torch.zeros(3))
    assert guards.failure({"self": module}, {}).guard.source.endswith("['bias']")
    object.__delattr__(module, "_parameters")  # the shared read fails: the first guard does
    assert guards.failure({"self": module}, {}).guard.source.endswith("['weight']")
    assert guards.check({"self": module}, {}) == 0
