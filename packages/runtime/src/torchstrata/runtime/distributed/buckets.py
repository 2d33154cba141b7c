"""Where to cut a training graph so that DDP's gradient buckets can be all-reduced
while the backward of the rest of the graph still runs.

DDP fills buckets in the order gradients become ready (after its first iteration it
rebuilds them in the order it saw), which is the reverse of the order in which the
forward first reads the parameters. This module lays out buckets the same way, from the
graph alone, with DDP's own size caps: the first bucket up to ``first_bucket_bytes``,
every later one up to ``bucket_bytes``. A bucket is complete once the backward has gone
back past the earliest read of any of its parameters, so the graph is cut just before
that read: the piece that starts there hands the bucket's last gradients to autograd when
its backward ends.

Unlike Dynamo's DDPOptimizer, no layout is refused: a bucket smaller than one
parameter, a small first bucket, a parameter read in several places, or a cut that
falls where the graph cannot be split (a tuple-valued value crosses it) only moves the
cut to the nearest valid position before it, or drops it. The split never changes what
is computed, only when gradients reach DDP.
"""

from __future__ import annotations

import bisect

import attrs

from torchstrata.core import Graph, Node, TensorMeta


@attrs.frozen
class BucketCaps:
    """DDP's bucket size caps in bytes: bucket ``i`` holds up to ``limits[i]``, every
    bucket past the last limit up to ``limits[-1]`` (``(first_bucket, bucket_cap)`` by
    default; one per bucket with ``bucket_cap_mb_list``)."""

    limits: tuple[int, ...]

    def __attrs_post_init__(self) -> None:
        if not self.limits or min(self.limits) <= 0:
            raise ValueError(f"bucket caps must be positive, got {self.limits}")

    def cap(self, bucket: int) -> int:
        """The cap of bucket number ``bucket`` (0: the first filled)."""
        return self.limits[min(bucket, len(self.limits) - 1)]


def _nbytes(meta: TensorMeta) -> int:
    count = 1
    for size in meta.shape:
        count *= int(size)
    return count * meta.dtype.itemsize


def gradient_inputs(graph: Graph) -> list[Node]:
    """The inputs that get a gradient: floating tensors that require grad."""
    return [
        node
        for node in graph.inputs
        if isinstance(node.meta, TensorMeta)
        and node.meta.requires_grad
        and (node.meta.dtype.is_floating_point or node.meta.dtype.is_complex)
    ]


def bucket_layout(graph: Graph, caps: BucketCaps) -> list[list[Node]]:
    """The gradient inputs of ``graph`` in buckets, in the order their gradients become
    ready (the last-read parameter first), each bucket filled up to its cap (a bucket
    always takes at least one parameter)."""
    first_read: dict[Node, int] = {}
    for index, node in enumerate(graph.nodes):
        for arg in node.input_nodes():
            first_read.setdefault(arg, index)
    params = [p for p in gradient_inputs(graph) if p in first_read]
    # ready order: latest first read first; ties by input order, reversed (as DDP's
    # initial layout, the reverse of ``parameters()``)
    params.sort(key=lambda p: (first_read[p], graph.inputs.index(p)), reverse=True)
    # as DDP's ``_compute_bucket_assignment_by_size``: a bucket closes once it holds at
    # least its cap (the parameter that crosses the cap stays in it)
    buckets: list[list[Node]] = [[]]
    filled = 0
    for param in params:
        buckets[-1].append(param)
        filled += _nbytes(param.tensor_meta)
        if filled >= caps.cap(len(buckets) - 1):
            buckets.append([])
            filled = 0
    if not buckets[-1]:
        buckets.pop()
    return buckets


def bucket_cuts(graph: Graph, caps: BucketCaps, allowed: list[int]) -> list[int]:
    """The positions to cut ``graph.nodes`` at (each one of ``allowed``, sorted): one
    before the earliest read of each bucket's parameters, moved back to the nearest
    allowed position (a cut at 0 or one that repeats another is dropped)."""
    first_read: dict[Node, int] = {}
    for index, node in enumerate(graph.nodes):
        for arg in node.input_nodes():
            first_read.setdefault(arg, index)
    cuts: set[int] = set()
    for bucket in bucket_layout(graph, caps):
        wanted = min(first_read[p] for p in bucket)
        at = bisect.bisect_right(allowed, wanted) - 1
        if at >= 0 and allowed[at] > 0:
            cuts.add(allowed[at])
    return sorted(cuts)
