"""A :class:`~torchstrata.runtime.pipeline.Pipeline` that compiles each training graph as
a chain of sub-graphs cut at DDP's gradient-bucket boundaries (see :mod:`.buckets`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    CompileOptions,
    Graph,
    Level,
    Node,
    TensorMeta,
    same_layout,
)
from torchstrata.runtime.artifacts import AotSource, GraphArtifacts
from torchstrata.runtime.distributed.buckets import BucketCaps, bucket_cuts, gradient_inputs
from torchstrata.runtime.distributed.region_pipeline import RegionPipeline
from torchstrata.runtime.distributed.split import Piece, has_in_place_ops, split_graph, valid_cuts
from torchstrata.runtime.pipeline import Pipeline
from torchstrata.runtime.runners import GraphRunner


@attrs.frozen
class SplitArtifacts(GraphArtifacts):
    """A graph compiled as ``pieces`` run one after another; the inherited fields
    describe the first piece, except ``torch_graph`` (the whole graph) and ``runner``
    (the chain)."""

    pieces: tuple[GraphArtifacts, ...] = ()


class BucketedPipeline(RegionPipeline):
    """Compiles like ``base``, except that a graph that computes gradients is split
    before the first read of each of DDP's buckets (none when it holds one bucket).

    :param base: the pipeline whose plugin manager (stages, passes) is used.
    :param caps: DDP's bucket size caps.
    """

    def __init__(self, base: Pipeline, caps: BucketCaps) -> None:
        super().__init__(base)
        self.caps = caps
        #: The number of pieces of each training graph compiled so far (1: not split).
        self.piece_counts: list[int] = []

    def cuts(self, graph: Graph) -> list[int]:
        """Where :meth:`compile_graph` cuts ``graph`` (empty: compiled whole)."""
        if graph.level is not Level.TORCH or not torch.is_grad_enabled():
            return []  # no backward, nothing to overlap
        if not gradient_inputs(graph) or has_in_place_ops(graph):
            return []
        return bucket_cuts(graph, self.caps, valid_cuts(graph))

    def compile_graph(
        self,
        graph: Graph,
        options: CompileOptions,
        aot: AotSource | None = None,
    ) -> GraphArtifacts:
        """The graph compiled whole, or as a chain of pieces (:class:`SplitArtifacts`;
        ``aot``, a result for the whole graph, serves no piece)."""
        cuts = self.cuts(graph)
        if graph.level is Level.TORCH and torch.is_grad_enabled():
            self.piece_counts.append(len(cuts) + 1)
        if not cuts:
            return super().compile_graph(graph, options, aot)
        pieces = split_graph(graph, cuts)
        compiled = [super(BucketedPipeline, self).compile_graph(p.graph, options) for p in pieces]
        runner = chained_runner(graph, pieces, [c.runner for c in compiled])
        missing = tuple(dict.fromkeys(s for c in compiled for s in c.missing_stages))
        return SplitArtifacts(
            graph,
            compiled[0].aten_graph,
            compiled[0].prims_graph,
            compiled[0].aot,
            compiled[0].compiled,
            runner,
            missing,
            tuple(r for c in compiled for r in c.pass_records),
            any(c.interpreted for c in compiled),
            backward_fn=compiled[0].backward_fn,
            pieces=tuple(compiled),
        )


def _check_handed_on(node: Node, value: Any) -> None:
    """A value handed from one piece to the next must be what the next was compiled
    for; a mismatch raises (on the first call: the frame then runs eagerly)."""
    meta = node.meta
    assert isinstance(meta, TensorMeta)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"split graph: %{node.name} is {type(value).__name__}, not a tensor")
    have = (tuple(value.shape), value.dtype, value.requires_grad)
    want = (tuple(meta.shape), meta.dtype, meta.requires_grad)
    if have != want or not same_layout(meta.shape, value.stride(), meta.strides):
        raise RuntimeError(
            f"split graph: %{node.name} handed on as {have} with strides {value.stride()}, "
            f"its piece expects {want} with strides {meta.strides}"
        )


def chained_runner(
    graph: Graph, pieces: Sequence[Piece], runners: Sequence[GraphRunner]
) -> GraphRunner:
    """Runs ``pieces`` in order (each through its runner) as ``graph`` would run. The
    values handed from piece to piece are checked on the first call."""
    inputs = graph.inputs
    outputs = graph.outputs
    plan = [(runner, piece.reads, piece.writes) for piece, runner in zip(pieces, runners)]
    handed_on = [node for piece in pieces for node in piece.reads if not node.is_input]
    checked = False

    def run(*values: Any) -> tuple[Any, ...]:
        nonlocal checked
        env: dict[Node, Any] = dict(zip(inputs, values))
        for runner, reads, writes in plan:
            env.update(zip(writes, runner(*[env[node] for node in reads])))
        if not checked:
            for node in handed_on:
                _check_handed_on(node, env[node])
            checked = True
        return tuple(env[node] for node in outputs)

    return run
