"""float32 CPU matmuls called through oneDNN where it is the faster library (decision 0375).

ATen's ``mm``/``addmm`` on a CPU call MKL's ``sgemm``, which dispatches by CPU vendor: on an
AMD Zen 5 it runs at about 105 GFLOP/s on one thread, where oneDNN's matmul (the library
behind ``torch.ops.mkldnn._linear_pointwise``, the op Inductor's CPU linear fusions call)
reaches 190-250 on the same shapes. Neither wins everywhere: oneDNN copies a transposed
left operand to rows first, which loses on the tied LM head's weight gradient
(``[8192, 128]^T`` read), and costs more per call on tiny products.

So the launcher times both, once per shape, layout and thread count in a process, on
operands of the extern call's exact layout, and calls the faster (decision 0375;
``InductorOptions.onednn_matmuls``: ``None`` times, ``True`` takes oneDNN wherever it
applies, ``False`` never). Both are float32 GEMMs accumulating in float32: results differ
from ATen's by rounding only, as any other BLAS's would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import Node, TensorMeta, contiguous_strides, random_tensor, same_layout

#: Extern ops a oneDNN call may replace: ``aten.mm`` and ``aten.addmm`` (default
#: ``beta`` and ``alpha``, a contiguous 1-D bias over the result's columns).
ONEDNN_OPS = frozenset({"aten.mm.default", "aten.addmm.default"})
#: The largest left operand (bytes) that oneDNN's op may copy to row-major first: a larger
#: copy is a fresh buffer each step (page faults, memory traffic) that the timing, whose
#: copies reuse one hot buffer, does not see. The GPT's tied-head weight gradient
#: (``[8192, 128]^T``, 4 MB) took 0.8-1.5 ms less a step on ATen's call though timed
#: faster on oneDNN; its layers' 192-512 KB copies are worth oneDNN's call.
COPIED_LEFT_MAX_BYTES = 1 << 20
#: oneDNN must beat ATen's time by this factor to be chosen (noise never flips a tie).
MARGIN = 0.95
#: Timed calls of each library per shape, in turns (after one warm-up call each); the
#: minimum counts.
REPEATS = 5

#: A tensor's shape and strides.
Layout = tuple[tuple[int, ...], tuple[int, ...]]

_LINEAR = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)


def onednn_available() -> bool:
    """Whether this torch has oneDNN and its linear op, and oneDNN is not switched off
    (``torch.backends.mkldnn.enabled``, read when a graph is compiled)."""
    return (
        _LINEAR is not None
        and torch.backends.mkldnn.is_available()
        and bool(torch.backends.mkldnn.enabled)
    )


def _linear(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``a @ b (+ bias)`` by oneDNN's linear op, recording no autograd history (a
    launcher's results carry none)."""
    if torch.is_grad_enabled():
        with torch.no_grad():
            return _LINEAR.default(a, b.t(), bias, "none", [], "")  # type: ignore[union-attr]
    return _LINEAR.default(a, b.t(), bias, "none", [], "")  # type: ignore[union-attr]


def onednn_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (2-D float32 CPU tensors of any strides) by oneDNN: a fresh row-major
    result."""
    return _linear(a, b, None)


def onednn_addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``bias + a @ b`` (``bias`` 1-D and contiguous over the columns: oneDNN ignores a
    bias's strides) by oneDNN, as :func:`onednn_mm`."""
    return _linear(a, b, bias)


#: The launcher globals of the two calls, by op.
ONEDNN_CALLS: Mapping[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "aten.mm.default": ("_onednn_mm", onednn_mm),
    "aten.addmm.default": ("_onednn_addmm", onednn_addmm),
}


def _cpu_f32(meta: Any) -> bool:
    return (
        isinstance(meta, TensorMeta) and meta.device.type == "cpu" and meta.dtype == torch.float32
    )


def _static(meta: TensorMeta) -> bool:
    return all(isinstance(size, int) for size in (*meta.shape, *meta.strides))


def float32_matmul(node: Node) -> bool:
    """Whether ``node`` is an ``aten.mm`` or an ``aten.addmm`` without ``beta``/``alpha``
    whose operands and result are float32 CPU tensors, its matrices 2-D and an ``addmm``
    bias 1-D: the calls a oneDNN call may replace where its layouts allow
    (:func:`onednn_layouts_apply`). Decides nothing on a symbolic size."""
    if node.op is None or str(node.op) not in ONEDNN_OPS or node.kwargs:
        return False
    if not all(isinstance(arg, Node) for arg in node.args):
        return False
    metas = [arg.meta for arg in node.args]
    if not all(_cpu_f32(meta) for meta in (*metas, node.meta)):
        return False
    ranks = [len(meta.shape) for meta in metas]
    return ranks == ([1, 2, 2] if str(node.op) == "aten.addmm.default" else [2, 2])


def onednn_layouts_apply(op: str, layouts: Sequence[Layout]) -> bool:
    """Whether :func:`onednn_mm` / :func:`onednn_addmm` compute ``op`` (a
    :func:`float32_matmul`'s) on operands of ``layouts`` (each argument's static shape and
    strides, in order): no empty operand, none expanded (a stride 0 over a size above
    one: oneDNN's strided views are not broadcasts), an ``addmm`` bias contiguous over the
    result's columns, a left operand row-major or of at most :data:`COPIED_LEFT_MAX_BYTES`.
    The code generator asks it of static metas, a lowering for many sizes of each call's
    tensors (:mod:`.sized_matmuls`)."""
    for shape, strides in layouts:
        if not all(size > 0 for size in shape):
            return False
        if not all(stride > 0 or size == 1 for size, stride in zip(shape, strides, strict=True)):
            return False
    matrices = layouts
    if op == "aten.addmm.default":
        (bias_shape, bias_strides), *matrices = layouts
        # oneDNN reads the bias densely whatever its strides: only a contiguous one
        columns = matrices[1][0][1]
        if tuple(bias_shape) != (columns,) or not same_layout(bias_shape, bias_strides, (1,)):
            return False
    (left_shape, left_strides), _ = matrices
    row_major = same_layout(left_shape, left_strides, contiguous_strides(left_shape))
    return row_major or math.prod(left_shape) * 4 <= COPIED_LEFT_MAX_BYTES


def _layouts(node: Node) -> tuple[Layout, ...]:
    return tuple((tuple(arg.meta.shape), tuple(arg.meta.strides)) for arg in node.args)


def onednn_applies(node: Node) -> bool:
    """Whether ``node`` is a matmul that :func:`onednn_mm` / :func:`onednn_addmm` compute
    as its sizes are: a :func:`float32_matmul` of static sizes and strides whose layouts
    oneDNN takes (:func:`onednn_layouts_apply`)."""
    if not float32_matmul(node):
        return False
    if not all(_static(meta) for meta in (*(arg.meta for arg in node.args), node.meta)):
        return False
    return onednn_layouts_apply(str(node.op), _layouts(node))


def _best_times(calls: list[Callable[[], Any]]) -> list[float]:
    """Each call's fastest of :data:`REPEATS` timed runs, after a warm-up run each. The
    calls take turns (in reversed order every other round), so a burst of load on a shared
    machine falls on both libraries, not on the one timed during it (timed one after the
    other, at load 7-8 a GPT step's choices sent 8 more layer products to ATen; not
    re-measured with turns)."""
    for call in calls:
        call()
    best = [float("inf")] * len(calls)
    order = list(range(len(calls)))
    for _ in range(REPEATS):
        for index in order:
            start = time.perf_counter()
            calls[index]()
            best[index] = min(best[index], time.perf_counter() - start)
        order.reverse()
    return best


#: In-process timings: (op, operand shapes and strides, threads) -> oneDNN's time over
#: ATen's.
_CHOICES: dict[tuple[Any, ...], float] = {}


def onednn_faster_at(op: str, layouts: tuple[Layout, ...], margin: float = MARGIN) -> bool:
    """Whether oneDNN computes ``op`` (a :func:`float32_matmul`'s, on operands of
    ``layouts`` that :func:`onednn_layouts_apply` accepts) in less than ``margin`` of
    ATen's time, both timed on random operands of those layouts (once per shapes, strides
    and thread count in a process)."""
    key = (op, layouts, torch.get_num_threads())
    if key not in _CHOICES:
        generator = torch.Generator().manual_seed(0)
        metas = [TensorMeta(shape, torch.float32, strides=strides) for shape, strides in layouts]
        args = [random_tensor(meta, generator) for meta in metas]
        aten = getattr(torch, op.split(".")[1])
        onednn = ONEDNN_CALLS[op][1]
        with torch.no_grad():
            aten_time, onednn_time = _best_times([lambda: aten(*args), lambda: onednn(*args)])
        _CHOICES[key] = onednn_time / aten_time
    return _CHOICES[key] < margin


def onednn_faster(node: Node) -> bool:
    """Whether oneDNN computes ``node`` (one :func:`onednn_applies` accepts) faster than
    ATen (:func:`onednn_faster_at` its layouts)."""
    return onednn_faster_at(str(node.op), _layouts(node))


def onednn_matmuls(nodes: list[Node], choice: bool | None) -> frozenset[Node]:
    """The extern ``nodes`` that the launcher computes through oneDNN: none with
    ``choice=False`` or without oneDNN, each one it applies to with ``True``, those it
    computes faster with ``None`` (:func:`onednn_faster`)."""
    if choice is False or not onednn_available():
        return frozenset()
    eligible = [node for node in nodes if onednn_applies(node)]
    if choice:
        return frozenset(eligible)
    return frozenset(node for node in eligible if onednn_faster(node))
