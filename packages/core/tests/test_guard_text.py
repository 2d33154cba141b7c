"""Guards spelled with the values they check."""

from __future__ import annotations

import torch

from torchstrata.core import Guard, GuardKind, TensorMeta, describe_guard


def test_tensor_guard_shows_shape_strides_dtype_device():
    meta = TensorMeta.from_tensor(torch.zeros(64, 128))
    text = describe_guard(Guard(GuardKind.TENSOR_MATCH, "L['x']", meta))
    assert text.startswith("L['x']: Tensor, shape == (64, 128), stride == (128, 1)")
    assert "dtype == torch.float32" in text and "requires_grad == False" in text


def test_constant_guards_show_the_value():
    assert describe_guard(Guard(GuardKind.CONSTANT_MATCH, "L['self'].p", 0.1)) == (
        "L['self'].p == 0.1"
    )
    assert describe_guard(Guard(GuardKind.CONSTANT_MATCH, "L['flag']", True)) == "L['flag'] is True"
    guard = Guard(GuardKind.CONSTANT_MATCH, "torch.is_grad_enabled()", False, "grad mode")
    assert describe_guard(guard) == "torch.is_grad_enabled() is False  # grad mode"


def test_identity_type_and_absent_key_guards():
    held = Guard(GuardKind.ID_MATCH, "G['torch']", id(torch), referent=torch)
    assert describe_guard(held) == "G['torch'] is <module torch>"
    assert describe_guard(Guard(GuardKind.ID_MATCH, "G['f']", 1234)) == "id(G['f']) == 1234"
    assert describe_guard(Guard(GuardKind.TYPE_MATCH, "L['n']", int)) == "type(L['n']) is int"
    linear = Guard(GuardKind.TYPE_MATCH, "L['m']", torch.nn.Linear)
    assert describe_guard(linear) == "type(L['m']) is torch.nn.modules.linear.Linear"
    absent = Guard(GuardKind.ABSENT_KEY, "L['m'].__dict__", "forward")
    assert describe_guard(absent) == "'forward' not in L['m'].__dict__"


def test_long_values_are_shortened():
    text = describe_guard(Guard(GuardKind.CONSTANT_MATCH, "L['s']", "x" * 500))
    assert len(text) < 100 and text.endswith("...")
