"""``direct_meta`` answers exactly what running the op on meta tensors answers, or nothing."""

from __future__ import annotations

import itertools
import operator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from torchstrata.core import TensorMeta, direct_meta

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: (op name, callable on meta tensors, arity)
POINTWISE = [
    ("operator.add", operator.add, 2),
    ("operator.mul", operator.mul, 2),
    ("operator.sub", operator.sub, 2),
    ("operator.truediv", operator.truediv, 2),
    ("torch.add", torch.add, 2),
    ("torch.Tensor.mul", torch.Tensor.mul, 2),
    ("torch.maximum", torch.maximum, 2),
    ("aten.add.Tensor", torch.ops.aten.add.Tensor, 2),
    ("aten.mul.Tensor", torch.ops.aten.mul.Tensor, 2),
    ("aten.div.Tensor", torch.ops.aten.div.Tensor, 2),
    ("aten.minimum.default", torch.ops.aten.minimum.default, 2),
    ("torch.nn.functional.gelu", F.gelu, 1),
    ("aten.gelu.default", torch.ops.aten.gelu.default, 1),
    ("torch.exp", torch.exp, 1),
    ("torch.Tensor.tanh", torch.Tensor.tanh, 1),
    ("aten.sigmoid.default", torch.ops.aten.sigmoid.default, 1),
    ("torch.nn.functional.silu", F.silu, 1),
    ("operator.neg", operator.neg, 1),
]


def _meta_tensor(meta: TensorMeta) -> torch.Tensor:
    tensor = meta.to_meta_tensor()
    if meta.requires_grad:
        tensor = tensor.requires_grad_(True).clone()
    return tensor


def _run_on_meta(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """What running ``fn`` on meta tensors says, as metadata on the inputs' device."""

    def convert(value: Any) -> Any:
        return _meta_tensor(value) if isinstance(value, TensorMeta) else value

    try:
        result = fn(*[convert(a) for a in args], **{k: convert(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001 - an error is an answer direct_meta must not contradict
        return "error"
    device = next(a.device for a in args if isinstance(a, TensorMeta) and a.ndim)

    def describe(tensor: torch.Tensor) -> TensorMeta:
        return TensorMeta.from_tensor(tensor).with_device(device)

    if isinstance(result, tuple):
        return tuple(describe(item) for item in result)
    return describe(result)


def _operands() -> list[Any]:
    """Tensors (several shapes, strides, dtypes) and Python scalars."""
    out: list[Any] = [2, 0.5, True]
    for dtype in FLOATS:
        out += [
            TensorMeta((4, 8), dtype),
            TensorMeta((8,), dtype),
            TensorMeta((4, 1), dtype, requires_grad=True),
            TensorMeta((), dtype),
        ]
    out += [
        TensorMeta((4, 8), torch.float32, strides=(1, 4)),  # transposed: not answered
        TensorMeta((1, 8), torch.float32, strides=(1, 1)),  # row-major, odd size-1 stride
        TensorMeta((2, 1, 4, 8), torch.float32),
        TensorMeta((4, 8), torch.int64),
        TensorMeta((), torch.int64),
        TensorMeta((), torch.bool),
        TensorMeta((3,), torch.float32),
        TensorMeta((4, 8), torch.complex64),
    ]
    return out


@pytest.mark.parametrize(("name", "fn", "arity"), POINTWISE, ids=[p[0] for p in POINTWISE])
@pytest.mark.parametrize("grad", [True, False])
def test_pointwise_matches_meta_kernels(name: str, fn: Any, arity: int, grad: bool) -> None:
    answered = 0
    with torch.set_grad_enabled(grad):
        for args in itertools.product(_operands(), repeat=arity):
            direct = direct_meta(name, list(args), {})
            if direct is None:
                continue
            answered += 1
            assert direct == _run_on_meta(fn, list(args), {}), (name, args)
    assert answered > 0


@pytest.mark.parametrize(
    ("name", "fn", "kwargs"),
    [
        ("aten.add.Tensor", torch.ops.aten.add.Tensor, {"alpha": 2}),
        ("torch.sub", torch.sub, {"alpha": 0.5}),
        ("torch.nn.functional.gelu", F.gelu, {"approximate": "tanh"}),
        ("aten.gelu.default", torch.ops.aten.gelu.default, {"approximate": "tanh"}),
    ],
)
def test_allowed_keywords(name: str, fn: Any, kwargs: dict[str, Any]) -> None:
    x = TensorMeta((16, 32), torch.float16)
    args = [x, TensorMeta((32,), torch.float32)] if "gelu" not in name else [x]
    direct = direct_meta(name, args, kwargs)
    assert direct is not None
    assert direct == _run_on_meta(fn, args, kwargs)


def test_declines_what_it_does_not_know() -> None:
    x = TensorMeta((4, 8), torch.float32)
    assert direct_meta("torch.sum", [x], {}) is None
    assert direct_meta("torch.add", [x, x], {"out": x}) is None
    assert direct_meta("torch.div", [x, x], {"rounding_mode": "floor"}) is None
    assert direct_meta("torch.maximum", [x, 2.0], {}) is None
    assert direct_meta("torch.add", [x, TensorMeta((5,), torch.float32)], {}) is None
    assert direct_meta("torch.add", [x, TensorMeta((4, 8), torch.float32, "meta")], {}) is None
    assert direct_meta("torch.exp", [TensorMeta((0, 8), torch.float32)], {}) is None
    assert direct_meta("torch.exp", [TensorMeta((8, 4), torch.float32, strides=(1, 8))], {}) is None


LAYER_NORM_CASES = [
    ((4, 8), [8], True, True),
    ((2, 3, 8), [3, 8], True, False),
    ((2, 3, 8), [8], False, True),
    ((5, 16), [16], False, False),
]


@pytest.mark.parametrize(("shape", "normalized", "weight", "bias"), LAYER_NORM_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("aten_level", [True, False])
def test_layer_norm_matches_meta_kernels(
    shape: tuple[int, ...],
    normalized: list[int],
    weight: bool,
    bias: bool,
    dtype: Any,
    aten_level: bool,
) -> None:
    affine = TensorMeta(tuple(normalized), dtype, requires_grad=True)
    args = [TensorMeta(shape, dtype), normalized, affine if weight else None]
    args += [affine if bias else None, 1e-5]
    if aten_level:
        name, fn = "aten.native_layer_norm.default", torch.ops.aten.native_layer_norm.default
        with torch.no_grad():
            expected = _run_on_meta(fn, args, {})
    else:
        name, fn = "torch.nn.functional.layer_norm", F.layer_norm
        expected = _run_on_meta(fn, args, {})
    direct = direct_meta(name, args, {})
    if aten_level:
        direct = tuple(attrs_without_grad(meta) for meta in direct)  # type: ignore[union-attr]
    assert direct == expected


def attrs_without_grad(meta: TensorMeta) -> TensorMeta:
    """ATen-level callers run below autograd: compare without ``requires_grad``."""
    return TensorMeta(meta.shape, meta.dtype, meta.device, meta.strides)


def test_layer_norm_declines_mismatched_shapes() -> None:
    x = TensorMeta((4, 8), torch.float32)
    assert direct_meta("torch.nn.functional.layer_norm", [x, [4]], {}) is None
    wrong = TensorMeta((4,), torch.float32)
    assert direct_meta("torch.nn.functional.layer_norm", [x, [8], wrong], {}) is None
    transposed = TensorMeta((4, 8), torch.float32, strides=(1, 4))
    assert direct_meta("torch.nn.functional.layer_norm", [transposed, [8]], {}) is None


@pytest.mark.parametrize("device", [None, torch.device("cpu"), "cpu"])
def test_arange_of_one_int_matches_the_meta_kernel(device: Any) -> None:
    kwargs = {} if device is None else {"device": device}
    direct = direct_meta("torch.arange", [64], kwargs)
    real = torch.arange(64, device="meta")
    assert direct == TensorMeta((64,), real.dtype, torch.device("cpu"), real.stride())


def test_arange_declines_what_it_does_not_know() -> None:
    assert direct_meta("torch.arange", [0], {}) is None
    assert direct_meta("torch.arange", [4.5], {}) is None
    assert direct_meta("torch.arange", [True], {}) is None
    assert direct_meta("torch.arange", [2, 8], {}) is None
    assert direct_meta("torch.arange", [8], {"dtype": torch.float32}) is None
