"""``assert_close_to_eager``: low-precision results compared element by element."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import assert_close_to_eager


def _softmax_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = 4 * torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    reference = torch.softmax(x.double(), -1)
    eager = torch.softmax(x.bfloat16(), -1)
    return x, eager, reference


def test_a_result_rounded_once_passes():
    _, eager, reference = _softmax_case()
    assert_close_to_eager(reference.bfloat16(), eager, reference=reference)


def test_one_bfloat16_element_50x_off_fails():
    # The smallest softmax value 50x too large is off by less than 3x eager's largest
    # error (at the largest values): a test of the overall max error let it pass.
    _, eager, reference = _softmax_case()
    wrong = eager.clone()
    at = (3, int(reference[3].argmin()))
    wrong[at] = wrong[at] * 50
    overall = (wrong.double() - reference).abs().max()
    assert overall <= 3 * (eager.double() - reference).abs().max()
    with pytest.raises(AssertionError, match=r"1 of 512 elements.*first at \(3,"):
        assert_close_to_eager(wrong, eager, reference=reference)


def test_nan_where_eager_is_finite_fails():
    _, eager, reference = _softmax_case()
    wrong = eager.clone()
    wrong[0, 0] = float("nan")
    with pytest.raises(AssertionError, match="first at"):
        assert_close_to_eager(wrong, eager, reference=reference)


def test_nan_where_eager_has_nan_passes():
    values = torch.tensor([float("nan"), 1.0], dtype=torch.float16)
    assert_close_to_eager(values.clone(), values, reference=values.double())
