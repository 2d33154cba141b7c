"""Golden text tests: ``golden/<name>.aten.txt`` decomposes to ``golden/<name>.prims.txt``.

A missing expected file is written from the current output (and the test fails), so a
new case is added by dropping in its ATen listing and reviewing the printed result.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchstrata.core import interpret, parse, random_inputs, verify
from torchstrata.decomp import decompose

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(path.name.removesuffix(".aten.txt") for path in GOLDEN.glob("*.aten.txt"))


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str) -> None:
    source = parse((GOLDEN / f"{name}.aten.txt").read_text())
    verify(source)
    result = decompose(source)
    verify(result)
    expected_path = GOLDEN / f"{name}.prims.txt"
    if not expected_path.exists():
        expected_path.write_text(str(result) + "\n")
        pytest.fail(f"wrote {expected_path.name}; review it and rerun")
    assert str(result) == expected_path.read_text().strip()
    assert str(parse(str(result))) == str(result)
    inputs = random_inputs(source)
    for got, want in zip(interpret(result, *inputs), interpret(source, *inputs), strict=True):
        assert got.dtype == want.dtype
        assert (got.double() - want.double()).abs().max() <= 1e-2
