"""CPU attention over short sequences as matmuls and fused softmax kernels (decision 0290).

ATen's CPU flash attention (``_scaled_dot_product_flash_attention_for_cpu`` and its
backward) walks blocks of keys with an online softmax, built for long sequences. At the
bench GPT's sizes (``T = 64``, head size 32) a layer's forward and backward took about
twice what the same work takes as batched matmuls around one softmax kernel: the whole
``[T, T]`` score matrix of a head is 16 KB, and both passes are short enough that the
kernel's bookkeeping dominates. Where the sequence is at most :data:`MAX_SHORT_TOKENS`
long, the query, key and value have one shape (no grouped heads, no cross attention), no
mask or dropout is given and the dtype is float32 or float64, each node is rewritten as
the math it computes, in the flash kernels' calling convention (the forward returns the
output and the log-sum-exp per row, the backward recomputes the probabilities from them):

- forward: ``s = scale * q @ k^T`` (causal: ``-inf`` above the diagonal), ``m = max(s)``,
  ``l = sum(exp(s - m))``, ``out = (exp(s - m) / l) @ v``, ``lse = m + log(l)``;
- backward: ``p = exp(s - lse)``, ``dv = p^T @ do``, ``ds = p * (do @ v^T -
  sum(do * out))``, ``dq = scale * ds @ k``, ``dk = scale * ds^T @ q``.

The matmuls stay ATen calls (``aten.matmul`` reads the strided head views as they are);
the rest are prims that the scheduler fuses into row kernels. Each result is stored with
its flash node's strides (the saved output and log-sum-exp, and the views that read the
gradients, keep their layouts).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchstrata.core import GETITEM, Graph, Node, OpKind, TensorMeta, Transformer, aten, prim

_FORWARD = "aten._scaled_dot_product_flash_attention_for_cpu.default"
_BACKWARD = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"
_MATMUL = aten("matmul.default")
#: The longest sequence rewritten (the score matrix of a head: 64 KB of float32 at 128).
MAX_SHORT_TOKENS = 128
_DTYPES = (torch.float32, torch.float64)


def _short_operands(operands: tuple[Any, ...]) -> bool:
    """Whether ``operands`` are ``[b, h, t, d]`` tensors of one shape and a supported
    dtype on the CPU, with ``t <= MAX_SHORT_TOKENS``."""
    metas = [op.meta if isinstance(op, Node) else None for op in operands]
    if not all(isinstance(meta, TensorMeta) for meta in metas):
        return False
    first = metas[0]
    assert isinstance(first, TensorMeta)
    return (
        len(first.shape) == 4
        and first.shape[2] <= MAX_SHORT_TOKENS
        and first.dtype in _DTYPES
        and first.device.type == "cpu"
        and all(m.shape == first.shape and m.dtype == first.dtype for m in metas)  # type: ignore[union-attr]
    )


#: The positions of ``dropout_p`` and ``is_causal`` in each op's arguments.
_FLAG_POSITIONS = {_FORWARD: (3, 4), _BACKWARD: (6, 7)}
_KEYWORDS = {"dropout_p", "is_causal", "attn_mask", "scale"}


def _flag(node: Node, name: str, default: Any) -> Any:
    """``dropout_p`` or ``is_causal`` of an attention node, positional or keyword."""
    position = _FLAG_POSITIONS[str(node.op)][0 if name == "dropout_p" else 1]
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name, default)


def rewritable(node: Node) -> bool:
    """Whether ``node`` is a CPU flash attention (forward or backward) that
    :func:`short_attention` rewrites: see the module docstring."""
    name = str(node.op)
    if name == _FORWARD:
        operands, positional = node.args[:3], 5
    elif name == _BACKWARD:
        operands, positional = node.args[:5], 8
        if not _row_values(node.args[5], node.args[1]):
            return False
    else:
        return False
    if len(node.args) > positional or not set(node.kwargs) <= _KEYWORDS:
        return False
    if node.kwargs.get("attn_mask") is not None:
        return False
    dropout = _flag(node, "dropout_p", 0.0)
    if not isinstance(dropout, (int, float)) or dropout != 0:
        return False
    return isinstance(_flag(node, "is_causal", False), bool) and _short_operands(operands)


def _row_values(lse: Any, query: Any) -> bool:
    """Whether ``lse`` is a ``[b, h, t]`` tensor of ``query``'s dtype (one per row)."""
    if not isinstance(lse, Node) or not isinstance(query, Node):
        return False
    meta, like = lse.meta, query.meta
    if not isinstance(meta, TensorMeta) or not isinstance(like, TensorMeta):
        return False
    return meta.shape == like.shape[:3] and meta.dtype == like.dtype


class _ShortAttention(Transformer):
    def __init__(self, graph: Graph, nodes: set[Node]) -> None:
        super().__init__(graph)
        self.nodes = nodes
        self._name = ""  # the attention node being rewritten: its prims are named after it

    # ------------------------------------------------------------------ helpers
    def _prim(self, name: str, *args: Any) -> Node:
        return self.builder.call(prim(name), *args, name=f"{self._name}_{name}")

    def _matmul(self, a: Node, b: Node) -> Node:
        return self.builder.call(_MATMUL, a, b, name=f"{self._name}_matmul")

    def _transposed(self, x: Node) -> Node:
        return self._prim("permute", x, [0, 1, 3, 2])

    def _rows(self, x: Node, shape: tuple[int, ...]) -> Node:
        """A per-row value ``[b, h, t]`` broadcast along the last dim of ``shape``."""
        return self._prim("broadcast_in_dim", x, list(shape), [0, 1, 2])

    def _scores(self, q: Node, k: Node, scale: float, causal: bool) -> Node:
        """``scale * q @ k^T``, ``-inf`` above the diagonal where ``causal``."""
        scores = self._prim("mul", self._matmul(q, self._transposed(k)), scale)
        if not causal:
            return scores
        meta = scores.tensor_meta
        b, h, t, _ = meta.shape
        rows = self._prim("iota", t, 0, 1, torch.int64, meta.device)
        shape = [b, h, t, t]
        row = self._prim("broadcast_in_dim", rows, shape, [2])
        column = self._prim("broadcast_in_dim", rows, shape, [3])
        below = self._prim("ge", row, column)
        minus_inf = self._prim("full", shape, -math.inf, meta.dtype, meta.device)
        return self._prim("where", below, scores, minus_inf)

    def _laid_out(self, value: Node, want: TensorMeta, factor: float = 1.0) -> Node:
        """``factor * value`` stored with ``want``'s strides: a prim this pass just built
        is relaid, an ATen call's result scaled (or copied exactly) into them."""
        if factor == 1.0 and value.tensor_meta.strides == want.strides:
            return value
        if factor != 1.0 or value.op is None or value.op.kind is not OpKind.PRIMS:
            value = self._prim("mul", value, factor if factor != 1.0 else 1)
        if value.tensor_meta.strides == want.strides:
            return value
        return self.builder.relayout(value, want.strides)

    # ------------------------------------------------------------------ rewrites
    def _forward(
        self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Node, ...]:
        q, k, v = args[:3]
        causal = _flag(node, "is_causal", False)
        scale = _scale(node, kwargs)
        scores = self._scores(q, k, scale, causal)
        shape = scores.tensor_meta.shape
        top = self._prim("amax", scores, [3])
        exps = self._prim("exp", self._prim("sub", scores, self._rows(top, shape)))
        total = self._prim("sum", exps, [3])
        probs = self._prim("div", exps, self._rows(total, shape))
        out = self._laid_out(self._matmul(probs, v), _result_meta(node, 0))
        lse = self._laid_out(
            self._prim("add", top, self._prim("log", total)), _result_meta(node, 1)
        )
        return (out, lse)

    def _backward(
        self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Node, ...]:
        grad, q, k, v, out, lse = args[:6]
        causal = _flag(node, "is_causal", False)
        scale = _scale(node, kwargs)
        scores = self._scores(q, k, scale, causal)
        shape = scores.tensor_meta.shape
        probs = self._prim("exp", self._prim("sub", scores, self._rows(lse, shape)))
        grad_v = self._laid_out(self._matmul(self._transposed(probs), grad), _result_meta(node, 2))
        grad_probs = self._matmul(grad, self._transposed(v))
        row_dot = self._prim("sum", self._prim("mul", grad, out), [3])
        centred = self._prim("sub", grad_probs, self._rows(row_dot, shape))
        grad_scores = self._prim("mul", probs, centred)  # the scale goes on dq and dk
        grad_q = self._laid_out(self._matmul(grad_scores, k), _result_meta(node, 0), scale)
        grad_k = self._laid_out(
            self._matmul(self._transposed(grad_scores), q), _result_meta(node, 1), scale
        )
        return (grad_q, grad_k, grad_v)

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if node.op == GETITEM and isinstance(args[0], tuple):
            return args[0][args[1]]
        if node not in self.nodes:
            return super().transform_node(node, args, kwargs)
        self._name = node.name
        with self.builder.tagged(node.tags):
            if str(node.op) == _FORWARD:
                return self._forward(node, args, kwargs)
            return self._backward(node, args, kwargs)


def _result_meta(node: Node, index: int) -> TensorMeta:
    """The metadata of result ``index`` of a multi-output attention node."""
    metas = node.meta
    meta = metas[index] if isinstance(metas, tuple) else None
    if not isinstance(meta, TensorMeta):
        raise ValueError(f"%{node.name} has no tensor result {index}")
    return meta


def _scale(node: Node, kwargs: dict[str, Any]) -> float:
    scale = kwargs.get("scale")
    if scale is not None:
        return float(scale)
    return 1.0 / math.sqrt(node.args[1].tensor_meta.shape[-1])


def short_attention(graph: Graph) -> Graph:
    """``graph`` with its CPU flash attentions over short sequences as matmuls and prims
    (see the module docstring)."""
    nodes = {node for node in graph.nodes if rewritable(node)}
    if not nodes:
        return graph
    return _ShortAttention(graph, nodes).run()
