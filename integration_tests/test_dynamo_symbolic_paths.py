"""Programs that ``torch.compile(fn, backend="torchstrata")`` hands over with symbolic
sizes and that the Dynamo path lowered once per size where the runtime's own capture
lowered them once (issue 33, decision 0490): ``F.pad`` (Dynamo's graph calls the builtin
behind it). Every call is compared with eager and lowered once for many sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata.runtime.dynamo_record import recording

pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback", "size_counts_no_fallback")


def _run_all(fn, calls, **compile_kwargs):
    """Each call's arguments through ``torch.compile(fn, backend="torchstrata")``,
    compared with eager on copies (a program may write its inputs)."""
    compiled = torch.compile(fn, backend="torchstrata", **compile_kwargs)
    for args in calls:
        want = fn(*(a.clone() for a in args))
        with recording() as ran:
            got = compiled(*args)
        torch.testing.assert_close(got, want, msg=lambda m, a=args: f"{a[-1].shape}: {m}")
        assert ran and all(graph.is_compiled for graph in ran)
    return compiled


def pad_time(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 2, 0), value=-1.0) * 2


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_pad_through_dynamo_is_lowered_once(codegen):
    # Dynamo traces F.pad to torch._C._nn.pad; the import names it F.pad (was: per size)
    sizes = (4, 5, 7, 12, 3, 33, 9)
    _run_all(pad_time, [(torch.randn(2, 3, n),) for n in sizes], options={"codegen": codegen})
    stats = tsr.size_lowering_stats()
    # 4 is Dynamo's static graph; the six others share one lowering
    assert stats == {"symbolic": 1, "reused": 5}, stats
