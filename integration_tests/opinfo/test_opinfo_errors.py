"""Bad input through the whole compiler: the fast subset's OpInfo error inputs.

Each error input of :data:`.test_opinfo_fast.FAST_OPS` (an index out of range, shapes
that do not match, a bad dtype...) is compiled with ``torchstrata.runtime.compile`` and
called twice (:func:`.errors.run_error_input`): C++ kernels on the CPU, Triton kernels
on a GPU when there is one. Each call must raise eager's exception type; none may return
a value.

The full sweep: ``python -m integration_tests.opinfo.sweep --codegen cpp --check errors``.
"""

from __future__ import annotations

import logging

import pytest

from .errors import BAD_ERROR_STATUSES
from .sweep import op_label, run_op
from .targets import CODEGEN, DEVICES
from .test_opinfo_fast import FAST_OPS


@pytest.fixture(scope="module")
def ops_with_error_inputs() -> dict[str, object]:
    op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db
    logging.getLogger("torchstrata").setLevel(logging.ERROR)
    return {
        op_label(op): op
        for op in op_db
        if op_label(op) in FAST_OPS and getattr(op, "error_inputs_func", None) is not None
    }


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_code_raises_on_every_error_input(ops_with_error_inputs, device: str) -> None:
    results = [
        (name, where, outcome)
        for name, op in ops_with_error_inputs.items()
        for where, outcome in run_op(op, (), 0, CODEGEN[device], device, check="errors")
    ]
    bad = [
        f"{n} [{w}] {o.status}: {o.reason}" for n, w, o in results if o.status in BAD_ERROR_STATUSES
    ]
    assert not bad, "\n".join(bad)
    assert sum(outcome.status == "raised" for _, _, outcome in results) >= 30
