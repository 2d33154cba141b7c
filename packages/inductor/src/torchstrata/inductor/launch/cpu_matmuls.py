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

import time
from collections.abc import Callable, Mapping
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


def _static_cpu_f32(meta: Any) -> bool:
    """A float32 CPU tensor of static sizes whose elements are all distinct in memory
    (no expanded dimension: oneDNN's strided views are not broadcasts)."""
    return (
        isinstance(meta, TensorMeta)
        and meta.device.type == "cpu"
        and meta.dtype == torch.float32
        and all(isinstance(size, int) and size > 0 for size in meta.shape)
        and all(
            isinstance(stride, int) and (stride > 0 or size == 1)
            for size, stride in zip(meta.shape, meta.strides, strict=True)
        )
    )


def onednn_applies(node: Node) -> bool:
    """Whether ``node`` is a matmul that :func:`onednn_mm` / :func:`onednn_addmm` compute:
    ``aten.mm`` or ``aten.addmm`` without ``beta``/``alpha``, static float32 CPU 2-D
    operands with no expanded dimension, an ``addmm`` bias 1-D and contiguous over the
    result's columns, a left operand row-major or of at most :data:`COPIED_LEFT_MAX_BYTES`."""
    if node.op is None or str(node.op) not in ONEDNN_OPS or node.kwargs:
        return False
    if not all(isinstance(arg, Node) for arg in node.args):
        return False
    metas = [arg.meta for arg in node.args] + [node.meta]
    if not all(_static_cpu_f32(meta) for meta in metas):
        return False
    *operands, result = metas
    if str(node.op) == "aten.addmm.default":
        bias, operands = operands[0], operands[1:]
        # oneDNN reads the bias densely whatever its strides: only a contiguous one
        if bias.shape != (result.shape[1],) or not same_layout(bias.shape, bias.strides, (1,)):
            return False
    if len(operands) != 2 or not all(len(meta.shape) == 2 for meta in operands):
        return False
    left = operands[0]
    row_major = same_layout(left.shape, left.strides, contiguous_strides(left.shape))
    return row_major or left.nbytes <= COPIED_LEFT_MAX_BYTES


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


#: In-process choices: (op, operand shapes and strides, threads) -> oneDNN is faster.
_CHOICES: dict[tuple[Any, ...], bool] = {}


def _key(node: Node) -> tuple[Any, ...]:
    layouts = tuple((arg.meta.shape, arg.meta.strides) for arg in node.args)
    return (str(node.op), layouts, torch.get_num_threads())


def onednn_faster(node: Node) -> bool:
    """Whether oneDNN computes ``node`` (one :func:`onednn_applies` accepts) in less than
    :data:`MARGIN` of ATen's time, both timed on random operands of its layouts (once per
    shape, layout and thread count in a process)."""
    key = _key(node)
    if key not in _CHOICES:
        generator = torch.Generator().manual_seed(0)
        args = [random_tensor(arg.meta, generator) for arg in node.args]
        aten = getattr(torch, str(node.op).split(".")[1])
        onednn = ONEDNN_CALLS[str(node.op)][1]
        with torch.no_grad():
            aten_time, onednn_time = _best_times([lambda: aten(*args), lambda: onednn(*args)])
        _CHOICES[key] = onednn_time < MARGIN * aten_time
    return _CHOICES[key]


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
