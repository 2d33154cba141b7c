"""The Dynamo backend's graphs with symbolic sizes traced by autograd once for every
size (decision 0256): Dynamo's ``s77`` placeholders and size nodes imported as sizes of
input dimensions, one symbolic trace, each size partitioned and lowered from it; every
loss and gradient equal to eager's. Dynamo is the harness (tests may call torch.compile)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.runtime import dynamo_backend
from torchstrata.runtime.dynamo_record import recording

from .test_dynamic_symbolic_aot import MeanLoss, _count_stage_calls, _train
from .training.models import TwoBlocks

#: Sizes of the dynamic dimension: odd, even, small and large (never 0 or 1).
SIZES = (16, 17, 5, 33, 2, 9)


pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback")


def _compiled(model, **kwargs):
    compiled = torch.compile(model, backend="torchstrata", **kwargs)
    graphs: list = []

    def run(*args):
        with recording() as ran:
            result = compiled(*args)
        assert ran and all(graph.is_compiled for graph in ran), "a graph ran eagerly"
        graphs.extend(graph for graph in ran if all(graph is not g for g in graphs))
        return result

    return run, graphs


@pytest.mark.parametrize(
    ("make", "shape", "args", "codegen"),
    [
        (MeanLoss, lambda n: (n, 16), lambda s: (torch.randn(s),), "cpp"),
        (TwoBlocks, lambda n: (2, n, 32), lambda s: (torch.randn(s), torch.randn(s)), "eager"),
    ],
    ids=["mean_loss", "two_blocks"],
)
def test_dynamo_training_graph_traced_once_for_every_size(monkeypatch, make, shape, args, codegen):
    calls = _count_stage_calls(monkeypatch, dynamo_backend._PIPELINE)
    model = make()
    # each size lowered on its own (the lowering once of 0455 has tests of its own)
    run, graphs = _compiled(model, options={"codegen": codegen, "symbolic_lowering": False})
    _train(run, model, [shape(n) for n in SIZES], args)
    # automatic dynamic: a static graph for the first size, then one with symbolic sizes
    assert len(graphs) == 2
    assert calls.count(("autograd", False)) == 1, calls  # the static graph's trace
    assert calls.count(("autograd", True)) == 1, calls  # one trace for the other sizes
    if codegen != "eager":  # each size lowered and its kernels generated
        assert calls.count(("codegen", False)) >= len(SIZES)
