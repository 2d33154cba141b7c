"""The fast OpInfo subset through the whole compiler, generated kernels included.

Each sample of :data:`.test_opinfo_fast.FAST_OPS` (float32 and bfloat16, contiguous and
non-contiguous) is compiled with ``torchstrata.runtime.compile``: C++ kernels on the
CPU, and Triton kernels on a GPU when there is one. Two checks:

* ``outputs``: called twice (:func:`.compiled.run_compiled_sample`);
* ``grad``: made with ``requires_grad`` and differentiated twice through the compiled
  training path, backward kernels included (:func:`.gradients.run_gradient_sample`).

No sample may give a wrong result or gradient, or raise where eager does not, and most
must run compiled code rather than fall back.

The full sweep: ``python -m integration_tests.opinfo.sweep --codegen cpp [--check grad]``
(or ``--codegen triton --device cuda``).
"""

from __future__ import annotations

import pytest

from .compiled import CompiledOutcome
from .sweep import run_op
from .targets import CODEGEN, DEVICES
from .test_opinfo_fast import DTYPES, FAST_OPS

#: Most samples must run generated code (the rest: eager by design or a fallback).
MIN_COMPILED = 0.9
CHECKS = ("outputs", "grad")

_RESULTS: dict[tuple[str, str, str], list[tuple[str, CompiledOutcome]]] = {}


def _outcomes(fast_ops, name: str, device: str, check: str) -> list[tuple[str, CompiledOutcome]]:
    if (name, device, check) not in _RESULTS:
        op = fast_ops[name]
        _RESULTS[name, device, check] = run_op(op, DTYPES, 1, CODEGEN[device], device, check)
    return _RESULTS[name, device, check]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FAST_OPS)
def test_compiled_opinfo_samples_match_eager(fast_ops, name: str, device: str, check: str) -> None:
    if name not in fast_ops:
        pytest.skip(f"no OpInfo named {name} in this torch")
    results = _outcomes(fast_ops, name, device, check)
    mismatches = [f"{where}: {o.reason}" for where, o in results if o.status == "mismatch"]
    assert not mismatches, "\n".join(mismatches)
    assert results


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_opinfo_subset_runs_generated_code(fast_ops, device: str, check: str) -> None:
    outcomes = [
        o
        for name in FAST_OPS
        if name in fast_ops
        for _, o in _outcomes(fast_ops, name, device, check)
    ]
    counted = [o for o in outcomes if o.status != "skip"]
    assert counted
    compiled = [o for o in counted if o.status == "compiled"]
    others = sorted({f"{o.status}: {o.reason}" for o in counted if o.status != "compiled"})
    assert len(compiled) >= MIN_COMPILED * len(counted), others
