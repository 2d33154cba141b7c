"""arange and the uninitialised/``new_*`` creation ops (``prims.iota`` / ``prims.full``).

``empty*`` become zeros (any value is correct for uninitialised memory), except under
``torch.use_deterministic_algorithms(True)`` with
``torch.utils.deterministic.fill_uninitialized_memory`` (the default), where eager fills
them with NaN (floating and complex) or the dtype's largest value, and so do we (the
runtime guards that state, so a graph is decomposed again when it changes).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.deterministic

from torchstrata.core import Node
from torchstrata.decomp.context import DecompContext
from torchstrata.decomp.promotion import is_integral
from torchstrata.decomp.table import NotDecomposable, RuleTable


def _arange(ctx: DecompContext, start: Any, end: Any, step: Any) -> Node:
    meta = ctx.out_meta
    length = meta.shape[0]
    if is_integral(meta.dtype):
        # eager converts start and step to the integer dtype first (truncating):
        # arange(0.5, 9.0, 1.5, dtype=int64) is 0, 1, ..., 8
        # (a symbolic start or step is an integer already: int() would specialise it)
        start, step = (v if isinstance(v, torch.SymInt) else int(v) for v in (start, step))
    integers = all(
        isinstance(v, int | torch.SymInt) and not isinstance(v, bool) for v in (start, step)
    )
    if integers and is_integral(meta.dtype):
        return ctx.prim("iota", length, start, step, meta.dtype, meta.device)
    if not meta.dtype.is_floating_point and not is_integral(meta.dtype):
        raise NotDecomposable(f"arange of {meta.dtype}")
    wide = ctx.prim("convert_element_type", ctx.iota(length), torch.float64)
    values = ctx.prim("add", ctx.prim("mul", wide, float(step)), float(start))
    return ctx.cast(values, meta.dtype)


def arange(ctx: DecompContext, end: Any, **_: Any) -> Node:
    """``arange(end)``."""
    return _arange(ctx, 0, end, 1)


def arange_start(ctx: DecompContext, start: Any, end: Any, **_: Any) -> Node:
    """``arange(start, end)``."""
    return _arange(ctx, start, end, 1)


def arange_start_step(ctx: DecompContext, start: Any, end: Any, step: Any = 1, **_: Any) -> Node:
    """``start + step * i`` computed in float64 for float dtypes, like eager."""
    return _arange(ctx, start, end, step)


def _filled(value_of: Any) -> Any:
    def rule(ctx: DecompContext, *args: Any, **kwargs: Any) -> Node:
        meta = ctx.out_meta
        return ctx.full(list(meta.shape), value_of(args), meta.dtype, meta.device)

    rule.__doc__ = "``prims.full`` with the shape, dtype and device of the ATen node."
    return rule


def _uninitialized_value(dtype: torch.dtype) -> Any:
    """What eager leaves in a new ``empty`` tensor of ``dtype``, where it is defined."""
    fills = torch.are_deterministic_algorithms_enabled() and bool(
        getattr(torch.utils.deterministic, "fill_uninitialized_memory", False)
    )
    if not fills:
        return 0
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def empty(ctx: DecompContext, *args: Any, **kwargs: Any) -> Node:
    """``empty*``: ``prims.full`` of :func:`_uninitialized_value` with the ATen node's
    shape, dtype and device."""
    meta = ctx.out_meta
    return ctx.full(list(meta.shape), _uninitialized_value(meta.dtype), meta.dtype, meta.device)


def eye(ctx: DecompContext, n: int, m: int | None = None, **_: object) -> Node:
    r"""``row == col`` from two ``iota``\s, cast to the dtype."""
    meta = ctx.out_meta
    rows, cols = meta.shape
    r = ctx.prim("broadcast_in_dim", ctx.iota(rows), [rows, cols], [0])
    c = ctx.prim("broadcast_in_dim", ctx.iota(cols), [rows, cols], [1])
    return ctx.cast(ctx.prim("eq", r, c), meta.dtype)


RULES = RuleTable(
    {
        "aten.arange.default": arange,
        "aten.eye.default": eye,
        "aten.eye.m": eye,
        "aten.arange.start": arange_start,
        "aten.arange.start_step": arange_start_step,
        "aten.empty_like.default": empty,
        "aten.empty.memory_format": empty,
        "aten.empty_strided.default": empty,
        "aten.empty_permuted.default": empty,
        "aten.new_empty.default": empty,
        "aten.new_empty_strided.default": empty,
        "aten.new_zeros.default": _filled(lambda args: 0),
        "aten.new_ones.default": _filled(lambda args: 1),
        "aten.new_full.default": _filled(lambda args: args[2]),
    }
)
