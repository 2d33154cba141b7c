"""Graphs split at DDP bucket boundaries, in one process: the pieces compute what the
whole graph computes, for any bucket layout (a first bucket smaller than one parameter,
one bucket per parameter, per-bucket caps, one bucket for all)."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import interpret
from torchstrata.runtime.api import resolve_options
from torchstrata.runtime.distributed import (
    BucketCaps,
    BucketedPipeline,
    bucket_cuts,
    bucket_layout,
    split_graph,
    valid_cuts,
)
from torchstrata.runtime.distributed.install import install_compiled_forward, uninstall
from torchstrata.runtime.pipeline import Pipeline

from .models import TinyLM, batch, loss_of

LAYOUTS = {
    "small-first-bucket": (64, 1 << 20),
    "bucket-per-parameter": (1,),
    "per-bucket-caps": (3000, 9000, 5000),
    "one-bucket": (1 << 30,),
}


@pytest.fixture(scope="module")
def graph():
    """The torch-level training graph of the tiny transformer."""
    torch.manual_seed(0)
    model = TinyLM(layers=1)
    tokens, _ = batch(0, 0)
    report = rt.explain(model, tokens)
    assert report.graph_count == 1 and not report.graph_breaks
    return model, tokens, report.graphs[0]


def _inputs(model: torch.nn.Module, tokens: torch.Tensor, graph) -> list[torch.Tensor]:
    """The values of the graph's inputs: the tokens, then parameters by name."""
    named = {name.replace(".", "_"): p for name, p in model.named_parameters()}
    values = []
    for node in graph.inputs:
        values.append(tokens if node.name == "tokens" else named[node.name.removeprefix("self_")])
    return values


@pytest.mark.parametrize("caps", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_pieces_compute_the_graph(graph, caps):
    model, tokens, whole = graph
    allowed = valid_cuts(whole)
    cuts = bucket_cuts(whole, BucketCaps(caps), allowed)
    assert set(cuts) <= set(allowed) and 0 not in cuts
    layout = bucket_layout(whole, BucketCaps(caps))
    assert sum(len(bucket) for bucket in layout) == len(list(model.parameters()))
    pieces = split_graph(whole, cuts)
    assert len(pieces) == len(cuts) + 1
    values = _inputs(model, tokens, whole)
    env = dict(zip(whole.inputs, values))
    for piece in pieces:
        env.update(zip(piece.writes, interpret(piece.graph, *[env[n] for n in piece.reads])))
    (want,) = interpret(whole, *values)
    torch.testing.assert_close(env[whole.outputs[0]], want, atol=0, rtol=0)


def test_bucket_per_parameter_cuts_before_each_first_read(graph):
    _, _, whole = graph
    cuts = bucket_cuts(whole, BucketCaps((1,)), valid_cuts(whole))
    assert len(cuts) > 5


@pytest.mark.parametrize("caps", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_split_training_matches_eager(caps):
    """Gradients of every parameter through the split, compiled graph (ATen graphs in the
    reference interpreter: the split is what is tested) equal eager's."""
    torch.manual_seed(0)
    model = TinyLM(layers=1)
    tokens, targets = batch(0, 0)
    loss_of(model(tokens), targets).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    pipeline = BucketedPipeline(Pipeline(), BucketCaps(caps))
    options = resolve_options(None, codegen="eager")
    install_compiled_forward(model, options, pipeline)
    try:
        loss_of(model(tokens), targets).backward()
    finally:
        assert uninstall(model) == 1
    expected_pieces = 1 if caps == (1 << 30,) else 2
    assert pipeline.piece_counts and min(pipeline.piece_counts) >= expected_pieces
    for parameter, grad in zip(model.parameters(), want):
        torch.testing.assert_close(parameter.grad, grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("caps", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_bucket_layout_is_ddps(graph, caps):
    """The layout is what DDP's reducer computes for the parameters in the same order
    (``_compute_bucket_assignment_by_size``, the function it rebuilds buckets with)."""
    _, _, whole = graph
    layout = bucket_layout(whole, BucketCaps(caps))
    ready = [param for bucket in layout for param in bucket]
    tensors = [torch.empty(p.tensor_meta.shape, dtype=p.tensor_meta.dtype) for p in ready]
    ddp_buckets, _ = torch.distributed._compute_bucket_assignment_by_size(
        tensors, list(caps), [False] * len(tensors), list(range(len(tensors)))
    )
    assert [[ready[i] for i in bucket] for bucket in ddp_buckets] == layout


class _OldDDP:
    """What torch < 2.13's DDP exposes of its bucket caps (no ``_bucket_config``)."""

    def __init__(self, cap_mb: float | None) -> None:
        self.bucket_bytes_cap_default = cap_mb is None
        self.bucket_bytes_cap = int((25 if cap_mb is None else cap_mb) * 1024 * 1024)


@pytest.mark.parametrize("cap_mb", [None, 0.006])
def test_bucket_caps_of_a_ddp_without_a_bucket_config(cap_mb):
    """Older DDP (seen on torch 2.11) rebuilds with a small first bucket only when no
    ``bucket_cap_mb`` was given; with one given, every bucket has that cap (as torch 2.13
    says through ``_bucket_config``)."""
    from torchstrata.runtime.distributed.ddp import ddp_bucket_caps

    caps = ddp_bucket_caps(_OldDDP(cap_mb))  # type: ignore[arg-type]
    if cap_mb is None:
        assert caps.limits == (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, 25 * 1024 * 1024)
    else:
        assert caps.limits == (int(cap_mb * 1024 * 1024),)
