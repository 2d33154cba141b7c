"""Size carriers of int arguments (decision 0330)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    int_argument_source,
    int_size_carrier,
    int_size_source,
    is_int_size_carrier,
    readable_source,
)


@pytest.mark.parametrize("n", [0, 1, 2, 17, 10**12])
def test_a_carrier_has_the_int_as_its_size_and_no_storage_of_its_own(n):
    carrier = int_size_carrier(n)
    assert carrier.shape == (n,) and carrier.stride() == (0,)
    assert carrier.untyped_storage().nbytes() == 1


@pytest.mark.parametrize("value", [True, False, 2.0, -1, "3", None])
def test_what_is_not_an_int_of_zero_or_more_carries_no_size(value):
    assert int_size_carrier(value).dim() == 0


def test_sources_name_the_argument():
    source = int_size_source("L['pos']")
    assert int_argument_source(source) == "L['pos']"
    assert int_argument_source("L['x']") is None
    text = f"{source}.size()[0] + 1 <= L['x'].size()[1]"
    assert readable_source(text) == "L['pos'] + 1 <= L['x'].size()[1]"


def test_a_carrier_is_told_from_other_tensors():
    assert is_int_size_carrier(int_size_carrier(5))
    assert not is_int_size_carrier(int_size_carrier(2.0))  # 0-dim: not a size
    assert not is_int_size_carrier(torch.empty(5, dtype=torch.uint8))
    assert not is_int_size_carrier(torch.zeros(1, dtype=torch.uint8).expand(5))
    assert not is_int_size_carrier(5)
