"""The OpInfo tests' shared fixture."""

from __future__ import annotations

import logging

import pytest

from .sweep import op_label
from .test_opinfo_fast import FAST_OPS


@pytest.fixture(scope="module")
def fast_ops() -> dict[str, object]:
    """The OpInfos of :data:`.test_opinfo_fast.FAST_OPS` by label (skips without
    ``expecttest``, which ``torch.testing._internal`` imports)."""
    op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db
    logging.getLogger("torchstrata").setLevel(logging.ERROR)
    return {op_label(op): op for op in op_db if op_label(op) in FAST_OPS}
