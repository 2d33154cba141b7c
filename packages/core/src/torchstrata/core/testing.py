"""Helpers for testing stages against eager PyTorch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _error(value: torch.Tensor, reference: torch.Tensor) -> float:
    diff = (value.double() - reference.double()).abs()
    diff = torch.where(torch.isnan(value) & torch.isnan(reference), torch.zeros_like(diff), diff)
    return float(diff.max()) if diff.numel() else 0.0


def assert_close_to_eager(
    actual: Any, expected: Any, *, reference: Any = None, what: str = "output"
) -> None:
    """Assert ``actual`` matches eager's ``expected``: same structure, shape, dtype, device;
    integers and bools exactly; floats within torch's default tolerances for the dtype.

    With ``reference`` (eager run in float64), a low-precision result passes when its
    error against the reference is at most three times eager's own (plus 1e-5).
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
        ours, eagers = _error(actual, reference), _error(expected, reference)
        assert ours <= 3 * eagers + 1e-5, (
            f"{what}: error {ours:.3g} vs fp64, eager's is {eagers:.3g}"
        )
        return
    torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}")
