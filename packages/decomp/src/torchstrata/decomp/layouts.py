"""Layouts through the decomposition: results in the layout eager gives them.

The ATen graph's metadata was traced by eager's own meta kernels on the inputs' device,
so each ATen node knows eager's strides. Prims' meta functions answer row-major. The
driver gives each rule's result its ATen node's dense layout (:func:`eager_layout`), and
an op kept extern the strides the trace gave it (:func:`traced_strides`) where its
operands kept theirs (:func:`same_operand_layouts`).
"""

from __future__ import annotations

from typing import Any

import attrs

from torchstrata.core import GraphBuilder, Node, OpKind, TensorMeta, get_prim, is_dense, same_layout


def traced_strides(inferred: Any, traced: Any) -> Any:
    """``inferred`` with ``traced``'s strides wherever the two agree on shape and dtype."""
    if isinstance(inferred, tuple) and isinstance(traced, tuple) and len(inferred) == len(traced):
        return tuple(traced_strides(a, b) for a, b in zip(inferred, traced, strict=True))
    if (
        isinstance(inferred, TensorMeta)
        and isinstance(traced, TensorMeta)
        and (inferred.shape, inferred.dtype) == (traced.shape, traced.dtype)
    ):
        return attrs.evolve(inferred, strides=traced.strides)
    return inferred


def same_operand_layouts(node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the new operands (``args``, ``kwargs``) of ATen ``node`` have the shapes,
    strides and dtypes its own operands had in the ATen graph."""
    before = [*node.args, *node.kwargs.values()]
    after = [*args, *kwargs.values()]
    pairs: list[tuple[Any, Any]] = []
    for old, new in zip(before, after, strict=True):
        if isinstance(old, list | tuple) and isinstance(new, list | tuple):
            pairs += zip(old, new, strict=False)
        else:
            pairs.append((old, new))
    for old, new in pairs:
        if isinstance(old, Node) != isinstance(new, Node):
            return False
        if isinstance(old, Node):
            was, now = old.meta, new.meta
            if not isinstance(was, TensorMeta) or not isinstance(now, TensorMeta):
                return False
            if (was.shape, was.strides, was.dtype) != (now.shape, now.strides, now.dtype):
                return False
    return True


def eager_layout(builder: GraphBuilder, node: Node, result: Any, built: int) -> Any:
    """``result`` (what a rule built for ATen ``node``) laid out as eager lays ``node``
    out; for a multi-output node, each output the rule built.

    Prims' meta functions answer row-major; ATen's elementwise ops (and ``*_like``
    creations) follow their inputs' layout (channels-last in, channels-last out; a
    transposed input gives a transposed result). Kernels then store in that layout,
    outputs come back with eager's strides, and the next extern op (a convolution) gets
    the layout it expects. Only a non-view prim that the rule built (after the builder's
    first ``built`` calls) and that no later call reads changes: the metadata of its
    readers derives from it."""
    if isinstance(result, tuple) and isinstance(node.meta, tuple):
        pairs = zip(node.meta, result, strict=False)
        return tuple(_relaid(builder, want, value, built) for want, value in pairs) + tuple(
            result[len(node.meta) :]
        )
    return _relaid(builder, node.meta, result, built)


def _relaid(builder: GraphBuilder, want: Any, value: Any, built: int) -> Any:
    if not isinstance(value, Node) or value.op is None or value.op.kind is not OpKind.PRIMS:
        return value
    have = value.meta
    if (
        not isinstance(want, TensorMeta)
        or not isinstance(have, TensorMeta)
        or want.shape != have.shape
        or same_layout(want.shape, want.strides, have.strides)
        or not is_dense(want.shape, want.strides)
        or not get_prim(value.op.name.removeprefix("prims.")).any_dense_layout
        or not builder.built_since(value, built)
    ):
        return value
    return builder.relayout(value, want.strides)
