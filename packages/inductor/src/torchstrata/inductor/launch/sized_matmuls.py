"""float32 CPU matmuls of a lowering for many sizes: oneDNN or ATen chosen per call's size
(decision 0466).

A static lowering times ATen's and oneDNN's call at its matmul's shape and calls the faster
(decision 0375, :mod:`.cpu_matmuls`). A lowering shared by many sizes (the runtime's
symbolic lowering, decision 0381) has no one shape to time, and called ATen's ``mm`` at
every size: at 1000 rows of ``x @ w`` (``w [256, 256]``) 2.6 ms a call where oneDNN takes
1.2 on this session's AMD CPU.

So such a matmul is a :class:`SizedMatmul` (launcher globals ``_mm_by_size``,
``_addmm_by_size``): the launcher looks the call's key (a site naming its operands'
layouts, :func:`site_key_source`, and the thread count) up in its memo, about 0.17 us a
call more than the chosen call. A miss checks that oneDNN takes the call's layouts
(:func:`~.cpu_matmuls.onednn_layouts_apply`, the rule the static path applies to metas:
an empty or expanded operand, a strided bias or a large transposed left operand keeps
ATen's call) and takes the choice of the call's size bucket (:func:`size_bucket`: layout
kinds, each of ``M``, ``K``, ``N`` by its power of two, the thread count). A bucket's
first call times both libraries at that call's layouts with the static path's timing
(:func:`~.cpu_matmuls.onednn_faster_at`: in turns, the same in-process timings) and takes
oneDNN below :data:`SIZED_MARGIN` of ATen's time, so a process pays the timing once per
bucket, not per size.

``InductorOptions.onednn_matmuls`` applies as to static matmuls: ``None`` times, ``True``
takes oneDNN wherever its layouts apply, ``False`` (or oneDNN off when the graph is
compiled) keeps ATen's call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import torch

from torchstrata.core import Node, SizeValue, contiguous_strides, same_layout
from torchstrata.inductor.launch.cpu_matmuls import (
    ONEDNN_CALLS,
    Layout,
    float32_matmul,
    onednn_available,
    onednn_faster_at,
    onednn_layouts_apply,
    onednn_matmuls,
)
from torchstrata.inductor.launch.extern_calls import direct_call

#: oneDNN's timed share of ATen's time below which a bucket takes oneDNN (the static
#: path's :data:`~.cpu_matmuls.MARGIN` is 0.95). A bucket's choice serves sizes it was
#: not timed at, and in a training step of the bench's transformer block (lengths
#: 125-133) products timed at 0.75-0.93 of ATen's time made the step 4-6% slower on oneDNN
#: (the static path's choices too); 0375's GPT-step products that gained were timed at
#: 0.52-0.72, ``softmax_gelu``'s at about 0.5.
SIZED_MARGIN = 0.75
#: Keys a memo holds; a full memo starts again (the buckets' choices stay).
MEMO_SIZES = 4096

#: The choices of size buckets: (op, layout kinds, size octaves, threads) -> oneDNN.
_BUCKETS: dict[tuple[Any, ...], bool] = {}
#: Each sized matmul's memo: (site, threads) -> the function it calls.
_MEMOS: list[dict[Hashable, Callable[..., torch.Tensor]]] = []

_MM, _ADDMM = "aten.mm.default", "aten.addmm.default"


def forget_sized_choices() -> None:
    """Forget every bucket's choice and every memo (the static path's timings stay)."""
    _BUCKETS.clear()
    for memo in _MEMOS:
        memo.clear()


def _kind(layout: Layout) -> str:
    shape, strides = layout
    if same_layout(shape, strides, contiguous_strides(shape)):
        return "rows"
    if same_layout(shape, strides, (1, shape[0])):
        return "columns"
    return "strided"


def size_bucket(op: str, layouts: tuple[Layout, ...]) -> tuple[Any, ...]:
    """The bucket of a matmul's call (``layouts``: its arguments' shapes and strides): the
    op, the matrices' layout kinds (row-major, column-major, other), ``M``, ``K`` and ``N``
    each by its bit length (1, 2-3, 4-7, ...) and the thread count."""
    left, right = layouts[-2:]
    (rows, inner), columns = left[0], right[0][1]
    octaves = (rows.bit_length(), inner.bit_length(), columns.bit_length())
    return (op, _kind(left), _kind(right), octaves, torch.get_num_threads())


def _choose(op: str, args: tuple[torch.Tensor, ...], timed: bool) -> bool:
    """Whether oneDNN computes this call: its layouts apply, and it is ``timed`` faster
    in the call's bucket (timed at this call's layouts if the bucket is new) or not
    ``timed``."""
    if not all(arg.dtype == torch.float32 and arg.device.type == "cpu" for arg in args):
        return False
    layouts = tuple((tuple(arg.shape), tuple(arg.stride())) for arg in args)
    if not onednn_layouts_apply(op, layouts):
        return False
    if not timed:
        return True
    bucket = size_bucket(op, layouts)
    if bucket not in _BUCKETS:
        _BUCKETS[bucket] = onednn_faster_at(op, layouts, SIZED_MARGIN)
    return _BUCKETS[bucket]


class SizedMatmul:
    """A matmul op (``aten.mm`` or ``aten.addmm``) by oneDNN or ATen, chosen per call as
    the module says (``timed``: by the bucket's timing; else oneDNN wherever the call's
    layouts apply).

    ``memo``: the function each call key calls, a key being ``(site, thread count)``
    (``site``: :func:`site_key_source`'s, a key that names the operands' shapes and
    strides). The launcher looks a call up itself and calls :meth:`choose` on a miss
    (:meth:`launch_source`), so a call it has seen runs no Python frame of this module
    (0.16-0.17 us a call more than the chosen call)."""

    def __init__(self, op: str, timed: bool) -> None:
        self.op, self.timed = op, timed
        self.memo: dict[Hashable, Callable[..., torch.Tensor]] = {}
        self.aten = direct_call(getattr(torch.ops.aten, op.split(".")[1]).default)
        self.onednn = ONEDNN_CALLS[op][1]
        _MEMOS.append(self.memo)

    def choose(self, key: Hashable, *args: torch.Tensor) -> Callable[..., torch.Tensor]:
        """The function that computes the call ``key`` of operands ``args``, remembered."""
        call = self.onednn if _choose(self.op, args, self.timed) else self.aten
        if len(self.memo) >= MEMO_SIZES:
            self.memo.clear()
        self.memo[key] = call
        return call

    def __call__(self, site: Hashable, *args: torch.Tensor) -> torch.Tensor:
        """The op's result on ``args`` (``site``: as the launcher passes it)."""
        key = (site, torch.get_num_threads())
        return (self.memo.get(key) or self.choose(key, *args))(*args)

    @staticmethod
    def launch_source(name: str, site: str, args: list[str]) -> str:
        """The launcher's expression that calls the global ``name`` (a sized matmul) on
        ``args`` (source) at ``site`` (:func:`site_key_source`): one tuple and one dict
        lookup when the call was seen."""
        operands = ", ".join(args)
        key = f"_key := ({site}, _threads())"
        return f"({name}.memo.get({key}) or {name}.choose(_key, {operands}))({operands})"


def sized_mm(timed: bool) -> SizedMatmul:
    """``aten.mm`` chosen per call (:class:`SizedMatmul`)."""
    return SizedMatmul(_MM, timed)


def sized_addmm(timed: bool) -> SizedMatmul:
    """``aten.addmm`` (default ``beta``/``alpha``) chosen per call (:class:`SizedMatmul`)."""
    return SizedMatmul(_ADDMM, timed)


#: The launcher globals of a sized matmul, by op: (timed, oneDNN wherever it applies).
SIZED_CALLS: Mapping[str, tuple[tuple[str, SizedMatmul], tuple[str, SizedMatmul]]] = {
    _MM: (("_mm_by_size", sized_mm(True)), ("_onednn_mm_by_size", sized_mm(False))),
    _ADDMM: (("_addmm_by_size", sized_addmm(True)), ("_onednn_addmm_by_size", sized_addmm(False))),
}

#: Every launcher global that calls a matmul by oneDNN (or chooses per call), with the
#: note its launcher line gets and whether it takes a site key first
#: (:func:`site_key_source`).
MATMUL_GLOBALS: Mapping[str, tuple[Callable[..., Any], str, bool]] = {
    **{name: (call, "by oneDNN", False) for name, call in ONEDNN_CALLS.values()},
    **{
        name: (call, "by oneDNN or ATen, timed per size bucket", True)
        for (name, call), _ in SIZED_CALLS.values()
    },
    **{
        name: (call, "by oneDNN where the call's layouts apply", True)
        for _, (name, call) in SIZED_CALLS.values()
    },
}


def _printed(size: Any) -> str:
    return str(size.expr) if type(size) is SizeValue else str(size)


def site_key_source(node: Node) -> str:
    """The source of a sized matmul's site key in the launcher: its op and operands'
    shapes and strides as text, then the value of each symbol in them (launcher locals):
    equal keys are equal layouts, so a call looks its choice up without reading its
    tensors' shapes and strides (0.17 against 0.6 us a call)."""
    text, symbols = [str(node.op)], set()
    for arg in node.args:
        meta = arg.meta
        text.append(
            ",".join(map(_printed, meta.shape)) + "/" + ",".join(map(_printed, meta.strides))
        )
        for size in (*meta.shape, *meta.strides):
            if type(size) is SizeValue:
                symbols |= {str(symbol) for symbol in size.expr.free_symbols}
    return "(" + ", ".join([repr(" ".join(text)), *sorted(symbols)]) + ")"


def _sized(node: Node) -> bool:
    """A :func:`~.cpu_matmuls.float32_matmul` with a symbolic size or stride, each size
    an int or a ``SizeValue`` (whose symbols the launcher binds: its site key names
    them)."""
    if not float32_matmul(node):
        return False
    metas = (*(arg.meta for arg in node.args), node.meta)
    sizes = [size for meta in metas for size in (*meta.shape, *meta.strides)]
    return all(type(size) in (int, SizeValue) for size in sizes) and not all(
        type(size) is int for size in sizes
    )


def matmul_calls(nodes: list[Node], choice: bool | None) -> dict[Node, str]:
    """The launcher global that calls each extern matmul of ``nodes`` that ATen's own call
    does not (``choice``: ``InductorOptions.onednn_matmuls``): with oneDNN available and
    ``choice`` not False, a static one oneDNN applies to and is faster on (or ``True``)
    calls oneDNN (:mod:`.cpu_matmuls`), a symbolic float32 CPU one a function of
    :data:`SIZED_CALLS` that chooses per call."""
    calls = {node: ONEDNN_CALLS[str(node.op)][0] for node in onednn_matmuls(nodes, choice)}
    if choice is False or not onednn_available():
        return calls
    for node in nodes:
        if _sized(node):
            timed, forced = SIZED_CALLS[str(node.op)]
            calls[node] = (forced if choice else timed)[0]
    return calls
