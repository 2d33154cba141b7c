"""The fast OpInfo subset's gradients through the whole compiler, backward kernels included.

Each sample of :data:`.test_opinfo_fast.FAST_OPS` made with ``requires_grad`` (float32
and bfloat16, contiguous and non-contiguous) is compiled with ``torchstrata.runtime.compile``
and differentiated twice (:func:`.gradients.run_gradient_sample`): C++ kernels on the
CPU, Triton kernels on a GPU when there is one. No output or input gradient may differ
from eager's, and most samples must run compiled code rather than fall back.

The full sweep: ``python -m integration_tests.opinfo.sweep --codegen cpp --check grad`` (or
``--codegen triton --device cuda --check grad``).
"""

from __future__ import annotations

import logging

import pytest
import torch

from .compiled import CompiledOutcome
from .sweep import op_label, run_op
from .test_opinfo_fast import DTYPES, FAST_OPS

#: Most samples with a gradient must run generated code (the rest: eager or a fallback).
MIN_COMPILED = 0.9

_DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]
_CODEGEN = {"cpu": "cpp", "cuda": "triton"}
_RESULTS: dict[tuple[str, str], list[tuple[str, CompiledOutcome]]] = {}


@pytest.fixture(scope="module")
def fast_ops() -> dict[str, object]:
    op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db
    logging.getLogger("torchstrata").setLevel(logging.ERROR)
    return {op_label(op): op for op in op_db if op_label(op) in FAST_OPS}


def _outcomes(fast_ops, name: str, device: str) -> list[tuple[str, CompiledOutcome]]:
    if (name, device) not in _RESULTS:
        op = fast_ops[name]
        _RESULTS[name, device] = run_op(op, DTYPES, 1, _CODEGEN[device], device, check="grad")
    return _RESULTS[name, device]


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("name", FAST_OPS)
def test_compiled_gradients_match_eager(fast_ops, name: str, device: str) -> None:
    if name not in fast_ops:
        pytest.skip(f"no OpInfo named {name} in this torch")
    results = _outcomes(fast_ops, name, device)
    mismatches = [f"{where}: {o.reason}" for where, o in results if o.status == "mismatch"]
    assert not mismatches, "\n".join(mismatches)
    assert results


@pytest.mark.parametrize("device", _DEVICES)
def test_compiled_gradient_subset_runs_generated_code(fast_ops, device: str) -> None:
    outcomes = [
        o for name in FAST_OPS if name in fast_ops for _, o in _outcomes(fast_ops, name, device)
    ]
    counted = [o for o in outcomes if o.status != "skip"]
    assert counted
    compiled = [o for o in counted if o.status == "compiled"]
    others = sorted({f"{o.status}: {o.reason}" for o in counted if o.status != "compiled"})
    assert len(compiled) >= MIN_COMPILED * len(counted), others
