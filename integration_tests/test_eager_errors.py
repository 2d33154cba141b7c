"""Where eager's kernel raises, the compiled function raises eager's error too.

- ``masked_fill(mask, -1e9)`` on float16, ``fill_(300)`` on uint8, ``clamp(max=1e39)``:
  *value cannot be converted to type ... without overflow*. Generated kernels would
  round the constant to infinity (or wrap it). Ops that convert unchecked (``x + 1e39``)
  keep eager's infinity, compiled, without a fallback. ``torch.where(c, x, 1e39)`` on
  float16 converts unchecked on the CPU and raises on CUDA (torch 2.11): compiled, it
  does what the device's kernel does.
- ``x // 0`` and ``x ** -1`` on integers; ``1 - mask``, ``clamp`` and ``argmax`` on bool
  tensors; ``x_int.mul_(1.5)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.runtime import TorchstrataFallbackWarning

RAISING: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "full_like": lambda x: torch.full_like(x, 3.4e38) + x,
    "full": lambda x: torch.full((2,), 1e39, dtype=x.dtype) + x.sum(),
    "fill_": lambda x: x.clone().fill_(1e39) * 2,
    "new_full": lambda x: x.new_full((3,), -1e39) * 2,
    "clamp": lambda x: x.clamp(max=1e39) * 2,
    "masked_fill": lambda x: (x * 2).masked_fill(
        x > 0, -1e9 if x.dtype == torch.float16 else -1e39
    ),
    "hardtanh": lambda x: F.hardtanh(x * 2, -1e39, 1e39),
    "leaky_relu": lambda x: F.leaky_relu(x * 2, 1e39),
    "uint8 fill_": lambda x: (x > 0).to(torch.uint8).fill_(300),
    "int8 full": lambda x: torch.full((2,), -129, dtype=torch.int8) + (x > 0).sum(),
}
#: Raised by the CPU kernel whatever the dtype of ``x`` (integer and bool tensors).
RAISING_INTEGERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "floor_divide by 0": lambda x: (x > 0).to(torch.int32) // 0,
    "div floor by 0": lambda x: torch.div((x > 0).to(torch.int16), 0, rounding_mode="floor"),
    "remainder by 0": lambda x: (x > 0).long() % 0,
    "negative power": lambda x: (x > 0).to(torch.int32) ** -1,
    "bool rsub": lambda x: 1 - (x > 0),
    "bool minus bool": lambda x: (x > 0) - (x > 1),
    "bool clamp": lambda x: torch.clamp(x > 0, min=True),
    "bool argmax": lambda x: (x > 0).argmax(),
    "integer mul_ by a float": lambda x: (x > 0).long().mul_(1.5),
}
UNCHECKED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "add": lambda x: x + 1e39,
    "mul": lambda x: x * 1e39,
    "where": lambda x: torch.where(x > 0, x, 1e39),
    "full_like inf": lambda x: torch.full_like(x, float("-inf")) + x,
    "uint8 add": lambda x: (x > 0).to(torch.uint8) + 300,
    # ATen wraps the Scalar into the tensor's dtype: 300 is 44 for uint8, -129 is 127
    "uint8 lt": lambda x: ((x > 0).to(torch.uint8) * 150 + 50) < 300,
    "int8 gt": lambda x: ((x > 0).to(torch.int8) * 100) > -129,
    "uint8 remainder": lambda x: ((x > 0).to(torch.uint8) * 150 + 50) % 300,
    "int8 fmod": lambda x: torch.fmod((x > 0).to(torch.int8) * 100 + 7, -129),
}
#: codegen, device: the interpreter's Triton on CPU tensors, the compiler's on the GPU
CODEGENS = [
    ("cpp", "cpu"),
    pytest.param("triton", "cpu", marks=pytest.mark.triton),
    pytest.param(
        "triton",
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]


def _eager_error(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> str:
    with pytest.raises(RuntimeError, match="without overflow") as caught:
        fn(x)
    return str(caught.value)


@pytest.mark.parametrize(("codegen", "device"), CODEGENS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", RAISING)
def test_compiled_raises_where_eager_does(
    name: str, dtype: torch.dtype, codegen: str, device: str
) -> None:
    fn = RAISING[name]
    x = torch.randn(3, 5).to(device, dtype)
    message = _eager_error(fn, x)
    compiled = tsr.compile(fn, codegen=codegen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchstrataFallbackWarning)
        with pytest.raises(RuntimeError) as caught:
            compiled(x)
    assert str(caught.value) == message


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
@pytest.mark.parametrize("name", RAISING_INTEGERS)
def test_integer_and_bool_errors_of_the_cpu_kernels(name: str, codegen: str) -> None:
    fn = RAISING_INTEGERS[name]
    x = torch.randn(3, 5)
    with pytest.raises((RuntimeError, ZeroDivisionError)) as expected:
        fn(x)
    compiled = tsr.compile(fn, codegen=codegen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchstrataFallbackWarning)
        with pytest.raises(type(expected.value)) as caught:
            compiled(x)
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize(("codegen", "device"), CODEGENS)
@pytest.mark.parametrize("name", UNCHECKED)
def test_unchecked_conversions_compile_to_eagers_numbers(
    name: str, codegen: str, device: str
) -> None:
    fn = UNCHECKED[name]
    x = torch.randn(3, 5).to(device, torch.float16)
    try:
        expected = fn(x)
    except RuntimeError as error:  # CUDA's where: the device's kernel checks (see above)
        assert name == "where" and device == "cuda", error
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TorchstrataFallbackWarning)
            with pytest.raises(RuntimeError) as caught:
                tsr.compile(fn, codegen=codegen)(x)
        assert str(caught.value) == str(error)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(fn, codegen=codegen)(x)
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_a_one_element_fill_converts_unchecked_as_in_eager() -> None:
    # ATen's fill_ of one element copies the Scalar unchecked: eager gives infinity.
    fn = RAISING["fill_"]
    x = torch.randn(1).to(torch.bfloat16)
    expected = fn(x)
    assert torch.isinf(expected).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(fn, codegen="cpp")(x)
    torch.testing.assert_close(got, expected)


def test_in_range_scalars_compile_without_a_fallback() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).masked_fill(x > 0, -6e4).clamp(max=6e4) + torch.full_like(x, 65504.0)

    x = torch.randn(3, 5).to(torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        got = tsr.compile(fn, codegen="cpp")(x)
    torch.testing.assert_close(got, fn(x))
