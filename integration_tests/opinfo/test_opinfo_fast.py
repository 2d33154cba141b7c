"""A fast OpInfo subset (CI): ~50 common ops, float32 and bfloat16, must not mismatch.

The full sweep is ``python -m integration_tests.opinfo.sweep`` (``nox -s opinfo``).
"""

from __future__ import annotations

import pytest
import torch

from .harness import Outcome
from .sweep import op_label, run_op

FAST_OPS = (
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish", "nn.functional.hardswish",
    "nn.functional.softplus", "nn.functional.relu", "clamp", "where", "masked_fill",
    "sum", "mean", "var", "std", "amax", "argmax", "logsumexp", "linalg.vector_norm",
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.group_norm",
    "nn.functional.batch_norm", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "cat", "stack", "index_select", "gather", "flip", "roll",
    "nn.functional.pad.constant", "nn.functional.pad.reflect", "triu", "cumsum", "repeat", "narrow", "split", "expand",
)  # fmt: skip
DTYPES = (torch.float32, torch.bfloat16)


@pytest.fixture(scope="module")
def fast_ops() -> dict[str, object]:
    op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db
    return {op_label(op): op for op in op_db if op_label(op) in FAST_OPS}


@pytest.mark.parametrize("name", FAST_OPS)
def test_opinfo_samples_match_eager(fast_ops, name: str) -> None:
    op = fast_ops.get(name)
    if op is None:
        pytest.skip(f"no OpInfo named {name} in this torch")
    results: list[tuple[str, Outcome]] = run_op(op, DTYPES, max_samples=1)
    mismatches = [f"{where}: {o.reason}" for where, o in results if o.status == "mismatch"]
    assert not mismatches, "\n".join(mismatches)
    assert any(o.status in ("decomposed", "extern") for _, o in results), results
