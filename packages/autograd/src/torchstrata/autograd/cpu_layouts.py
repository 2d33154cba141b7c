"""The memory layouts the CPU kernels give where the meta kernels answer otherwise.

A CPU graph is traced on ``meta`` tensors (see
:func:`~torchstrata.autograd.devices.meta_trace_device`) or, for the ops whose ATen form
depends on the device, on fake CPU tensors. Either way each result's strides come from
torch's meta kernels, and a few of those give another device's answer or none in
particular: the ATen graph then records strides eager never gives, and the compiled
results come back in another layout than eager's. :func:`cpu_layout` gives those
results the CPU kernel's layout, by rules that follow the CPU kernels:

* reflection and replication padding, ``roll`` over given dimensions, batch norm (and
  their backward ops): a result in the layout ``suggest_memory_format`` picks for the
  input (channels-last for a 4-D channels-last input, channels-last-3d for 5-D, else
  row-major). The meta kernels give reflection/replication padding CUDA's row-major
  answer, ``roll`` a row-major one and batch norm the input's own strides.
* division with a rounding mode (``div.Tensor_mode``): TensorIterator's layout, as
  plain division gets (the meta kernel of floor division answers row-major).
* convolution and its backward, on meta tensors only (the fake CPU kernel already
  asks the same question): the layout torch's own convolution backend selection gives
  for CPU tensors of those shapes and strides (a channels-last weight makes a
  channels-last result on the CPU; the meta kernel answers row-major).

Only results that are fresh tensors of the listed ops change; each keeps its shape,
dtype and device. A training graph for a device this machine lacks is traced on fake
CPU tensors (see :mod:`~torchstrata.autograd.devices`): it gets these CPU layouts too,
as it gets the fake CPU convolution's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

#: Where the CPU kernel puts one result: a memory format (dense in it) or strides.
Layout = torch.memory_format | tuple[int, ...]
#: A rule: (args, kwargs) -> per result index, the layout the CPU kernel gives it.
LayoutRule = Callable[[tuple[Any, ...], dict[str, Any]], dict[int, Layout]]


def suggest_memory_format(shape: Sequence[int], strides: Sequence[int]) -> torch.memory_format:
    """What ATen's ``Tensor::suggest_memory_format()`` answers for a strided tensor of
    ``shape`` and ``strides``: ``channels_last`` for 4-D strides like NHWC,
    ``channels_last_3d`` for 5-D strides like NDHWC, else ``contiguous_format``
    (ambiguous size-one cases count as row-major, as in ATen)."""
    if len(shape) == 4 and _strides_like_channels_last(shape, strides, (1, 3, 2, 0)):
        return torch.channels_last
    if len(shape) == 5 and _strides_like_channels_last(shape, strides, (1, 4, 3, 2, 0)):
        return torch.channels_last_3d
    return torch.contiguous_format


def _strides_like_channels_last(
    shape: Sequence[int], strides: Sequence[int], order: tuple[int, ...]
) -> bool:
    # c10's is_channels_last_strides_2d_s4 / _3d_s5, line for line.
    if strides[1] == 0:
        return False
    smallest = 0
    for dim in order:
        if shape[dim] == 0 or strides[dim] < smallest:
            return False
        if dim == 0 and smallest == strides[1]:
            return False
        smallest = strides[dim] * (shape[dim] if shape[dim] > 1 else 1)
    return True


def dense_strides(shape: Sequence[int], memory_format: torch.memory_format) -> tuple[int, ...]:
    """The strides of a dense tensor of ``shape`` in ``memory_format`` (a 3-D tensor in
    ``channels_last``: the 4-D layout with a size-one height, squeezed)."""
    if memory_format is torch.channels_last and len(shape) == 3:
        return _strides([shape[0], shape[2], shape[1]], (0, 2, 1))
    if memory_format is torch.channels_last and len(shape) == 4:
        return _strides([shape[0], shape[2], shape[3], shape[1]], (0, 3, 1, 2))
    if memory_format is torch.channels_last_3d and len(shape) == 5:
        dims = [shape[0], shape[2], shape[3], shape[4], shape[1]]
        return _strides(dims, (0, 4, 1, 2, 3))
    return _strides(list(shape), tuple(range(len(shape))))


def _strides(stored: list[int], where: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of the dimensions in storage order ``stored``; ``where[d]``:
    the position of dimension ``d`` in that order."""
    row_major = [1] * len(stored)
    for index in range(len(stored) - 2, -1, -1):
        row_major[index] = row_major[index + 1] * max(stored[index + 1], 1)
    return tuple(row_major[where[dim]] for dim in range(len(stored)))


def _like_input(position: int, outputs: tuple[int, ...] = (0,)) -> LayoutRule:
    """A rule: the listed outputs in the layout suggested for argument ``position``."""

    def rule(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
        source = args[position] if len(args) > position else None
        if not isinstance(source, torch.Tensor):
            return {}
        layout = suggest_memory_format(source.shape, source.stride())
        return dict.fromkeys(outputs, layout)

    return rule


def _roll(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
    # With no dims the CPU kernel rolls the flattened tensor: row-major, as the meta says.
    dims = args[2] if len(args) > 2 else kwargs.get("dims", ())
    if not dims:
        return {}
    return _like_input(0)(args, kwargs)


def _convolution(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
    input_, weight, bias, *settings = args[:9]
    layout = _convolution_format(input_, weight, bias, settings, None)
    return {} if layout is None else {0: layout}


def _convolution_backward(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
    _, input_, weight, bias_sizes, *settings = args[:10]
    layout = _convolution_format(input_, weight, None, settings, bias_sizes)
    return {} if layout is None else {0: layout, 1: layout}


def _rounding_division(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
    # The CPU kernel is TensorIterator's, as for plain division; the meta kernel of
    # floor division, composed of other ops, answers row-major for a strided input.
    dividend = args[0]
    divisor = args[1] if len(args) > 1 else kwargs.get("other")
    if not isinstance(dividend, torch.Tensor) or not isinstance(divisor, torch.Tensor):
        return {}
    return {0: tuple(torch.ops.aten.div.Tensor(dividend, divisor).stride())}


def _convolution_format(
    input_: Any, weight: Any, bias: Any, settings: Sequence[Any], bias_sizes: Any
) -> torch.memory_format | None:
    """The layout ATen's CPU convolution gives its result for operands of these shapes,
    strides and dtypes (as torch's fake CPU kernel asks it: backend selection on CPU
    tensors, 1-D convolutions as 2-D), or None when that cannot be asked. ``settings``:
    stride, padding, dilation, transposed, output padding and groups."""
    if not isinstance(input_, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return None
    try:
        with _disable_current_modes():
            cpu_input, cpu_weight = _cpu_empty(input_), _cpu_empty(weight)
            cpu_bias = _cpu_empty(bias) if isinstance(bias, torch.Tensor) else None
            stride, padding, dilation, transposed, output_padding, groups = settings
            backend = torch._C._select_conv_backend(
                cpu_input,
                cpu_weight,
                cpu_bias,
                list(stride),
                list(padding),
                list(dilation),
                bool(transposed),
                list(output_padding),
                int(groups),
                bias_sizes,
            )
            if cpu_weight.dim() == 3:
                cpu_input = torch.empty(cpu_input.shape, dtype=cpu_input.dtype).unsqueeze(2)
                cpu_weight = cpu_weight.unsqueeze(2)
            layout = torch._C._conv_determine_backend_memory_format(cpu_input, cpu_weight, backend)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # not askable here
        return None
    return layout if isinstance(layout, torch.memory_format) else None


def _cpu_empty(tensor: torch.Tensor) -> torch.Tensor:
    # Uninitialised memory is never touched: only its shape and strides are asked about.
    return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype)


_PADS = [f"aten::{kind}_pad{n}d" for kind in ("reflection", "replication") for n in (1, 2, 3)]
_BATCH_NORMS = (
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_no_update",
    "aten::_native_batch_norm_legit_functional",
    "aten::_batch_norm_with_update_functional",
)

#: Rules for results on the CPU, traced on meta or on fake CPU tensors, by overload
#: (``aten::div.Tensor_mode``) or by op (``aten::roll``: every overload).
CPU_RULES: dict[str, LayoutRule] = {
    **{name: _like_input(0) for name in _PADS},
    **{f"{name}_backward": _like_input(1) for name in _PADS},
    "aten::roll": _roll,
    **{name: _like_input(0) for name in _BATCH_NORMS},
    "aten::native_batch_norm_backward": _like_input(1),
    "aten::div.Tensor_mode": _rounding_division,
}
#: Rules for meta tensors standing for the CPU only (fake CPU tensors answer these).
META_CPU_RULES: dict[str, LayoutRule] = {
    "aten::convolution": _convolution,
    "aten::convolution_backward": _convolution_backward,
}


def cpu_layout(
    func: torch._ops.OpOverload,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    result: Any,
    *,
    on_meta: bool,
) -> Any:
    """``result`` of ``func`` (traced for the CPU: on meta tensors with ``on_meta``,
    else on fake CPU tensors, which the caller checks) with the strides the CPU kernel gives its results where a
    rule above knows them; results of other ops, and results already laid out so, are
    returned as they are.

    Runs inside a dispatch mode's handler: the new tensors are not recorded.
    """
    name = func._overloadpacket._qualified_op_name
    rule = CPU_RULES.get(func.name()) or CPU_RULES.get(name)
    if rule is None and on_meta:
        rule = META_CPU_RULES.get(name)
    if rule is None:
        return result
    layouts = rule(args, kwargs)
    if not layouts:
        return result
    items = list(result) if isinstance(result, tuple) else [result]
    for index, layout in layouts.items():
        item = items[index] if index < len(items) else None
        if not isinstance(item, torch.Tensor) or item.layout is not torch.strided:
            continue
        strides = layout if isinstance(layout, tuple) else dense_strides(item.shape, layout)
        if tuple(item.stride()) != strides:
            items[index] = item.new_empty_strided(item.shape, strides)
    return tuple(items) if isinstance(result, tuple) else items[0]
