"""Extern calls through torch's bindings dispatch the same overload as their OpOverload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchstrata.inductor.launch.extern_calls import DIRECT_CALLS, direct_call


class _Dispatched(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _randn(*shape: int, device: str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=dtype)


def _sdpa(device: str) -> tuple[Any, ...]:
    q, k, v = (_randn(2, 4, 16, 8, device=device, dtype=torch.float16) for _ in range(3))
    return (q, k, v)


#: Arguments for each overload: a function of the device (CPU values where a CPU kernel
#: exists; the CUDA-only attention kernels are checked on meta tensors).
SAMPLES: dict[str, tuple[Callable[[str], tuple[Any, ...]], dict[str, Any], bool]] = {
    "aten.mm.default": (lambda d: (_randn(5, 3, device=d), _randn(3, 4, device=d)), {}, True),
    "aten.addmm.default": (
        lambda d: (_randn(4, device=d), _randn(5, 3, device=d), _randn(3, 4, device=d)),
        {"beta": 0.5, "alpha": 2.0},
        True,
    ),
    "aten.bmm.default": (
        lambda d: (_randn(2, 5, 3, device=d), _randn(2, 3, 4, device=d)),
        {},
        True,
    ),
    "aten.baddbmm.default": (
        lambda d: (_randn(2, 5, 4, device=d), _randn(2, 5, 3, device=d), _randn(2, 3, 4, device=d)),
        {"alpha": 0.5},
        True,
    ),
    "aten.convolution.default": (
        lambda d: (
            _randn(1, 2, 7, 7, device=d),
            _randn(3, 2, 3, 3, device=d),
            _randn(3, device=d),
            [2, 1],
            [1, 0],
            [1, 1],
            False,
            [0, 0],
            1,
        ),
        {},
        True,
    ),
    "aten.embedding.default": (
        lambda d: (_randn(10, 4, device=d), torch.tensor([[1, 9], [0, 3]], device=d), 0),
        {},
        True,
    ),
    "aten.index_copy.default": (
        lambda d: (
            _randn(3, 6, 2, device=d),
            1,
            torch.tensor([4, 0], device=d),
            _randn(3, 2, 2, device=d),
        ),
        {},
        True,
    ),
    "aten.index_copy_.default": (
        lambda d: (
            _randn(3, 6, 2, device=d),
            1,
            torch.tensor([5], device=d),
            _randn(3, 1, 2, device=d),
        ),
        {},
        True,
    ),
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (
        lambda d: tuple(_randn(2, 4, 16, 8, device=d) for _ in range(3)),
        {"is_causal": True, "scale": 0.25},
        True,
    ),
    "aten._scaled_dot_product_efficient_attention.default": (
        lambda d: (*_sdpa(d), None, False),
        {"scale": 0.25},
        False,
    ),
}


def _overload(name: str) -> torch._ops.OpOverload:
    _, packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def test_every_direct_call_has_a_sample():
    assert set(SAMPLES) == DIRECT_CALLS


def _cloned(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("name", sorted(DIRECT_CALLS))
def test_a_direct_call_dispatches_the_same_overload(name):
    op = _overload(name)
    call = direct_call(op)
    assert call is not op
    make, kwargs, _ = SAMPLES[name]
    args = make("meta")
    with _Dispatched() as by_op:
        expected = op(*args, **kwargs)
    with _Dispatched() as by_call:
        got = call(*args, **kwargs)
    assert by_call.ops == by_op.ops == [name]
    assert _types(got) == _types(expected)  # e.g. not a tensor where the overload gives an int


def _types(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_types(item) for item in value]
    return type(value)


@pytest.mark.parametrize(
    "name",
    ["_scaled_dot_product_flash_attention.default", "_scaled_dot_product_cudnn_attention.default"],
)
def test_attention_whose_binding_returns_other_types_keeps_its_overload(name):
    packet, overload = name.split(".")
    op = getattr(getattr(torch.ops.aten, packet), overload)
    assert direct_call(op) is op
    args = (*_sdpa("meta"), *(() if "flash" in name else (None, False)))
    function = getattr(torch._C._VariableFunctions, packet)
    # the reason: max_q and max_k come back as tensors from the binding, ints from the op
    assert _types(function(*args)) != _types(op(*args))


def test_other_calls_keep_their_overload():
    index_put = torch.ops.aten.index_put_.default  # its binding refuses None indices
    assert direct_call(index_put) is index_put
    add = torch.ops.aten.add.Tensor  # not a default overload
    assert direct_call(add) is add
    mm = torch.ops.aten.mm.default
    assert direct_call(mm, {"self": None}) is mm  # the binding calls it `input`
    assert direct_call(torch.ops.aten.mm.out) is torch.ops.aten.mm.out


_NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
#: (overload, device) pairs whose values are compared: CPU where a CPU kernel exists.
_RUNS = [(name, "cpu") for name in sorted(DIRECT_CALLS) if SAMPLES[name][2]] + [
    pytest.param(name, "cuda", marks=_NO_CUDA)
    for name in sorted(DIRECT_CALLS)
    if not name.endswith("_for_cpu.default")
]


@pytest.mark.parametrize(("name", "device"), _RUNS)
def test_a_direct_call_computes_what_its_overload_computes(name, device):
    op = _overload(name)
    make, kwargs, _ = SAMPLES[name]
    torch.manual_seed(0)
    args = make(device)
    first, second = _cloned(args), _cloned(args)
    expected, got = op(*first, **kwargs), direct_call(op)(*second, **kwargs)
    # attention's random-number state and debug outputs are not values to compare
    pairs = [(got, expected)] if isinstance(expected, torch.Tensor) else zip(got, expected)
    compared = 0
    for g, e in pairs:
        assert type(g) is type(e)
        if isinstance(e, torch.Tensor) and e.dtype.is_floating_point and e.numel():
            torch.testing.assert_close(g, e, rtol=0, atol=0)
            compared += 1
    assert compared >= 1
    torch.testing.assert_close(second, first, rtol=0, atol=0)  # in place: the same update
