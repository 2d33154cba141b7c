"""Integer division by a divisor tensor holding a zero raises eager's error, compiled.

Eager's CPU kernels raise ``RuntimeError: ZeroDivisionError`` for ``torch.div`` with
``rounding_mode="floor"`` or ``"trunc"``, ``//``, ``torch.remainder`` (``%``) and
``torch.fmod`` of every integer dtype, their in-place and Scalar-dividend forms too. A
zero Scalar divisor is refused at trace time; a tensor's zeros are found when the kernel
runs: C++ kernels check their divisors (``inductor/cpp_division.py``), and under Triton's
interpreter (CPU tensors) an integer ``div`` is left to ATen, which raises.

``INT_MIN // -1`` wraps in eager's floor division (its remainders are 0) and compiled; its
``rounding_mode="trunc"`` of int32/int64 kills eager's process with SIGFPE, and wraps
compiled.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import torchstrata.runtime as tsr
from torchstrata.runtime import TorchstrataFallbackWarning

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _floor_divide_in_place(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a = a.clone()
    a //= b
    return a


def _mod_in_place(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a = a.clone()
    a %= b
    return a


DIVISIONS: dict[str, Fn] = {
    "div floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "floordiv": lambda a, b: a // b,
    "remainder": lambda a, b: torch.remainder(a, b),
    "mod": lambda a, b: a % b,
    "fmod": lambda a, b: torch.fmod(a, b),
}
OTHER_FORMS: dict[str, Fn] = {
    "div_ floor": lambda a, b: a.clone().div_(b, rounding_mode="floor"),
    "div_ trunc": lambda a, b: a.clone().div_(b, rounding_mode="trunc"),
    "remainder_": lambda a, b: a.clone().remainder_(b),
    "fmod_": lambda a, b: a.clone().fmod_(b),
    "//=": _floor_divide_in_place,
    "%=": _mod_in_place,
    "Scalar // tensor": lambda a, b: 5 // b + a,
    "Scalar % tensor": lambda a, b: 5 % b + a,
    "Scalar remainder tensor": lambda a, b: torch.remainder(5, b) + a,
    "broadcast divisor": lambda a, b: torch.div(a, b[:, :1], rounding_mode="floor"),
    "broadcast row divisor": lambda a, b: torch.fmod(a, b[:1]),
    "0-dim divisor": lambda a, b: torch.remainder(a, b[1, 2]),
    "mixed dtypes": lambda a, b: torch.div(a.long(), b, rounding_mode="trunc"),
    "fused sum": lambda a, b: (torch.div(a, b, rounding_mode="floor") * 2).sum(),
    "fused row sums": lambda a, b: (a % b).sum(-1) + 1,
    "fused amax": lambda a, b: torch.fmod(a * 3, b).amax(0),
    "chain": lambda a, b: torch.div(a + 1, b, rounding_mode="trunc") % (b + 100),
}
INTEGERS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
CODEGENS = ["cpp", pytest.param("triton", marks=pytest.mark.triton)]


def _operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Dividends and nonzero divisors, both of both signs where ``dtype`` has them."""
    generator = torch.Generator().manual_seed(0)
    low = 0 if dtype == torch.uint8 else -50
    a = torch.randint(low, 50, (4, 6), generator=generator)
    b = torch.randint(1, 7, (4, 6), generator=generator)
    if dtype != torch.uint8:
        b = b * (torch.randint(0, 2, (4, 6), generator=generator) * 2 - 1)
    return a.to(dtype), b.to(dtype)


def _check(fn: Fn, dtype: torch.dtype, codegen: str) -> None:
    """Nonzero divisors: the compiled function gives eager's numbers without a fallback.
    Zero divisors: the compiled function raises what eager raises."""
    a, b = _operands(dtype)
    compiled = tsr.compile(fn, codegen=codegen)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = compiled(a, b)
        expected = fn(a, b)
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected)
        b[1, 2] = b[0, 0] = 0  # read by each divisor: whole, a row, a column, one
        with pytest.raises(RuntimeError) as eager:
            fn(a, b)
        assert str(eager.value) == "ZeroDivisionError"
        with pytest.raises(RuntimeError) as caught:
            compiled(a, b)
    assert type(caught.value) is type(eager.value)
    assert str(caught.value) == str(eager.value)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("name", DIVISIONS)
def test_a_zero_divisor_raises_eagers_error(name: str, dtype: torch.dtype, codegen: str) -> None:
    _check(DIVISIONS[name], dtype, codegen)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("name", OTHER_FORMS)
def test_other_forms_and_fused_kernels_raise_too(name: str, codegen: str) -> None:
    _check(OTHER_FORMS[name], torch.int32, codegen)


def test_the_cpp_kernel_checks_its_divisors() -> None:
    # The fused sum is one C++ kernel that divides and checks (no ATen division).
    fn = OTHER_FORMS["fused sum"]
    report = tsr.explain(tsr.compile(fn, codegen="cpp"), *_operands(torch.int32))
    assert report.eager_ops == ()
    (kernel,) = report.kernels
    assert "zero_divisor |=" in kernel.source


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("name", ["div floor", "remainder", "fmod", "div trunc"])
def test_the_smallest_value_by_minus_one(name: str, dtype: torch.dtype, codegen: str) -> None:
    # No SIGFPE: eager's floor division wraps to INT_MIN and its remainders are 0; its
    # trunc division of int32/int64 crashes (not called here), compiled it wraps too.
    smallest = torch.iinfo(dtype).min
    a = torch.tensor([[smallest, 7], [-7, smallest]], dtype=dtype)
    b = torch.full((2, 2), -1, dtype=dtype)
    fn = DIVISIONS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(fn, codegen=codegen)(a, b)
    if name == "div trunc":
        expected = torch.div(a, b, rounding_mode="floor")  # the quotients are exact
        if dtype in (torch.int8, torch.int16):
            assert torch.equal(fn(a, b), expected)
    else:
        expected = fn(a, b)
    assert torch.equal(got, expected)
