"""Helpers for testing stages against eager PyTorch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _errors(value: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``|value - reference|`` per element in float64: 0 where both are NaN or the same
    infinity, infinite where only one is NaN."""
    value, reference = value.double(), reference.double()
    same = (value == reference) | (value.isnan() & reference.isnan())
    return torch.where(same, 0.0, (value - reference).abs().nan_to_num(nan=float("inf")))


def assert_close_to_eager(
    actual: Any, expected: Any, *, reference: Any = None, what: str = "output"
) -> None:
    """Assert ``actual`` matches eager's ``expected``: same structure, shape, dtype, device;
    integers and bools exactly; floats within torch's default tolerances for the dtype.

    With ``reference`` (eager run in float64), a low-precision result passes when, element
    by element, its error against the reference is at most three times eager's own there
    plus one ulp of the dtype (and 1e-5): one element far off fails however accurate the
    others are.
    """
    if isinstance(expected, Mapping):
        assert isinstance(actual, Mapping) and actual.keys() == expected.keys(), (
            f"{what}: expected a mapping with keys {list(expected)}, got {actual!r}"
        )
        for key in expected:
            ref = reference[key] if reference is not None else None
            assert_close_to_eager(
                actual[key], expected[key], reference=ref, what=f"{what}[{key!r}]"
            )
        return
    if isinstance(expected, Sequence) and not isinstance(expected, torch.Tensor | str):
        assert isinstance(actual, Sequence) and len(actual) == len(expected), (
            f"{what}: expected a sequence of {len(expected)} values, got {actual!r}"
        )
        refs = reference if reference is not None else [None] * len(expected)
        for index, (got, want, ref) in enumerate(zip(actual, expected, refs, strict=True)):
            assert_close_to_eager(got, want, reference=ref, what=f"{what}[{index}]")
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{what}: expected {expected!r}, got {actual!r}"
        return
    assert isinstance(actual, torch.Tensor), (
        f"{what}: expected a tensor, got {type(actual).__name__}"
    )
    assert actual.shape == expected.shape, (
        f"{what}: shape {tuple(actual.shape)} != eager {tuple(expected.shape)}"
    )
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != eager {expected.dtype}"
    assert actual.device == expected.device, (
        f"{what}: device {actual.device} != eager {expected.device}"
    )
    if reference is not None and expected.dtype in _LOW_PRECISION:
        _assert_as_close_as_eager(actual, expected, reference, what)
        return
    torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}")


def _assert_as_close_as_eager(
    actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor, what: str
) -> None:
    """Each element of ``actual`` within 3x eager's error at that element of the float64
    ``reference``, plus one ulp of the dtype there (a result rounded once where eager
    rounds after every op may land one ulp away where eager happened to be exact)."""
    ours, eagers = _errors(actual, reference), _errors(expected, reference)
    ulp = torch.finfo(expected.dtype).eps * reference.double().abs().nan_to_num(posinf=0.0)
    bad = ours > 3 * eagers + ulp + 1e-5
    if bad.any():
        at = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements further from fp64 than "
            f"eager; first at {at}: {actual[at].item()!r}, eager {expected[at].item()!r}, "
            f"fp64 {reference[at].item()!r}"
        )
