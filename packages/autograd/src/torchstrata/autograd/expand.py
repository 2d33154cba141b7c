"""Softmax and log-softmax spelled out in the joint graph, before partitioning.

``aten._log_softmax(x)`` is one op at the ATen level, so the partitioner could only save
its full-size output or recompute the whole op (max, sum of exponentials and all) in the
backward. Spelled out as ``amax``, ``sub``, ``exp``, ``sum``, ``log``, ``sub`` (``div`` for
softmax), in float32 for 16-bit inputs and rounded once at the end as the decomposition
does, the min cut can save the row statistics (``[M, 1]`` each) and recompute the
pointwise rest: cross-entropy's backward then reads the logits once instead of a saved
float32 log-softmax twice their size.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from torchstrata.autograd.trace import JointTrace
from torchstrata.core import Node, Transformer, aten, is_dense

_SOFTMAX = {aten("_softmax.default"): False, aten("_log_softmax.default"): True}
_HALF = (torch.float16, torch.bfloat16)


class _SpellOut(Transformer):
    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        is_log = _SOFTMAX.get(node.op) if node.op is not None else None
        x = args[0] if args else None
        if is_log is None or kwargs or not isinstance(x, Node) or not _expandable(x, args[1]):
            return super().transform_node(node, args, kwargs)
        b = self.builder
        dim = [args[1]]
        if x.tensor_meta.dtype in _HALF:
            x = b.call(aten("_to_copy.default"), x, dtype=torch.float32)
        peak = b.call(aten("amax.default"), x, dim, True)
        shifted = b.call(aten("sub.Tensor"), x, peak)
        exps = b.call(aten("exp.default"), shifted)
        total = b.call(aten("sum.dim_IntList"), exps, dim, True)
        if is_log:
            out = b.call(aten("sub.Tensor"), shifted, b.call(aten("log.default"), total))
        else:
            out = b.call(aten("div.Tensor"), exps, total)
        wanted = node.tensor_meta
        if out.tensor_meta.dtype != wanted.dtype:
            out = b.call(aten("_to_copy.default"), out, dtype=wanted.dtype)
        if out.tensor_meta.strides != wanted.strides and is_dense(wanted.shape, wanted.strides):
            # eager's fused kernel returns its own layout (row-major for a channels-last
            # input), where the spelled-out ops follow their input's
            out = b.relayout(out, wanted.strides)
        return out


def _expandable(x: Node, dim: Any) -> bool:
    meta = x.tensor_meta
    if not isinstance(dim, int) or not meta.shape or not meta.dtype.is_floating_point:
        return False
    return meta.numel > 0


def spell_out_softmax(trace: JointTrace) -> JointTrace:
    """``trace`` with every softmax and log-softmax spelled out (see the module docstring)."""
    if not any(node.op in _SOFTMAX for node in trace.graph.nodes):
        return trace
    return attrs.evolve(trace, graph=_SpellOut(trace.graph).run())
