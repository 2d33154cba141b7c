"""A fast OpInfo subset (CI): ~50 common ops, float32, bfloat16 and complex64, through
capture.

Every sample must match eager (no mismatch, captured or via the closure fallback: the
same result structure, ``torch.return_types`` included, dtypes and values), and
at least 80% of the samples that reach capture must be captured (with or without graph
breaks) rather than declined or failed.

The full sweep is ``python -m integration_tests.opinfo.sweep`` (``nox -s opinfo``).
"""

from __future__ import annotations

import pytest
import torch

from .harness import Outcome
from .sweep import run_op

FAST_OPS = (
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish", "nn.functional.hardswish",
    "nn.functional.softplus", "nn.functional.relu", "clamp", "where", "masked_fill",
    "sum", "mean", "var", "std", "amax", "argmax", "logsumexp", "linalg.vector_norm",
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.group_norm",
    "nn.functional.batch_norm", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "cat", "stack", "index_select", "gather", "flip", "roll",
    "nn.functional.pad.constant", "nn.functional.pad.reflect", "triu", "cumsum", "repeat", "narrow", "split", "expand",
    "max.reduction_with_dim", "topk", "angle", "view_as_real",
)  # fmt: skip
#: complex64 runs on the ops of the subset that support it: complex values stay ATen calls
#: (docs/decisions/0070-complex-stays-aten.md), whose result dtypes must be eager's.
DTYPES = (torch.float32, torch.bfloat16, torch.complex64)


#: Most of the subset's samples that reach capture must be captured.
MIN_CAPTURED = 0.8

_RESULTS: dict[str, list[tuple[str, Outcome]]] = {}


@pytest.mark.parametrize("name", FAST_OPS)
def test_opinfo_samples_match_eager(fast_ops, name: str) -> None:
    op = fast_ops.get(name)
    if op is None:
        pytest.skip(f"no OpInfo named {name} in this torch")
    results: list[tuple[str, Outcome]] = run_op(op, DTYPES, max_samples=1)
    _RESULTS[name] = results
    mismatches = [f"{where}: {o.reason}" for where, o in results if o.status == "mismatch"]
    assert not mismatches, "\n".join(mismatches)
    assert any(o.status in ("decomposed", "extern") for _, o in results), results


def test_opinfo_fast_subset_is_mostly_captured(fast_ops) -> None:
    missing = [name for name in FAST_OPS if name in fast_ops and name not in _RESULTS]
    for name in missing:  # when run alone (-k), run the subset here
        _RESULTS[name] = run_op(fast_ops[name], DTYPES, max_samples=1)
    outcomes = [o for results in _RESULTS.values() for _, o in results if o.capture]
    assert outcomes
    captured = [o for o in outcomes if o.capture in ("full", "breaks")]
    failed = sorted({o.capture_reason for o in outcomes if o.capture not in ("full", "breaks")})
    assert len(captured) >= MIN_CAPTURED * len(outcomes), failed
