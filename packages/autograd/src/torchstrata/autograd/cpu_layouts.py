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
* the pointwise ops whose CPU kernel is one TensorIterator over ``(grad_output, input)``
  (``hardtanh_backward``, ``hardswish_backward``, ``hardsigmoid_backward``,
  ``logit_backward``, ``softplus_backward``, ``elu_backward``), ``(grad_output, mask)``
  (``native_dropout_backward``: ``grad * mask * scale``) or ``(self, other)``
  (``xlogy.Tensor``): TensorIterator's layout for those operands in that order (the
  first operand whose strides order two dimensions decides). Their meta kernels are
  decompositions whose first operand is another: with a row-major tangent and a
  transposed input they answer transposed where the CPU answers row-major.
* ops whose CPU kernel allocates its results row-major whatever the inputs' layouts
  (``pow.Scalar``; ``log_sigmoid_forward``'s result and buffer; the backward ops
  ``_log_softmax_backward_data``, ``glu_backward``, ``mse_loss_backward``,
  ``smooth_l1_loss_backward``, ``huber_loss_backward``): row-major. Their meta kernels
  follow an input.
* ``binary_cross_entropy`` (unreduced) and its backward: ``empty_like(input)``, the
  input's own strides where it is dense (the meta kernels answer row-major).
* ``pixel_shuffle``, ``pixel_unshuffle``, ``channel_shuffle``, ``max_unpool2d``: the
  input's suggested memory format, as for padding (the meta kernels answer row-major).
* LAPACK results the CPU kernel leaves column-major (each matrix of a batch
  Fortran-ordered) where the meta kernels answer as CUDA's solvers do: ``_linalg_svd``'s
  ``Vh``, ``linalg_eig``'s eigenvectors.
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

from torchstrata.core import is_dense
from torchstrata.core.conv_layouts import cpu_convolution_format

#: A layout for :data:`Layout`: each matrix (the last two dimensions) of a batch stored
#: column-major, the batch dimensions row-major around them (LAPACK's results).
COLUMN_MAJOR = "column-major"
#: Where the CPU kernel puts one result: a memory format (dense in it), strides, or
#: :data:`COLUMN_MAJOR`.
Layout = torch.memory_format | tuple[int, ...] | str
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


def column_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a dense tensor of ``shape`` whose matrices (last two dimensions)
    are stored column-major, one after the other (ATen's batched Fortran-contiguous
    strides); fewer than two dimensions: row-major."""
    if len(shape) < 2:
        return _strides(list(shape), tuple(range(len(shape))))
    rank = len(shape)
    stored = [*shape[:-2], shape[-1], shape[-2]]
    return _strides(stored, (*range(rank - 2), rank - 1, rank - 2))


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


def _tensor_iterator(*positions: int) -> LayoutRule:
    """A rule: the result in the layout TensorIterator gives an op over the tensor
    arguments at ``positions``, in that order (broadcast to one shape; the first operand
    whose strides order two dimensions decides, as in ATen)."""

    def rule(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
        operands = [args[p] for p in positions if p < len(args)]
        if len(operands) != len(positions) or not all(
            isinstance(t, torch.Tensor) for t in operands
        ):
            return {}
        first = operands[0]
        if is_dense(first.shape, first.stride()) and all(
            t.shape == first.shape and t.stride() == first.stride() for t in operands
        ):
            return {0: tuple(first.stride())}  # one dense layout in, that layout out
        return {0: _iterator_strides(operands)}

    return rule


def _iterator_strides(operands: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """The strides TensorIterator gives the result of a binary op over ``operands`` (two
    tensors, broadcast): ATen's own structured meta function computes them, on storage-less
    meta tensors of the operands' shapes and strides (the layout logic is shared by every
    backend; dtypes do not enter it)."""
    with _disable_current_modes():
        a, b = (
            torch.empty_strided(tuple(t.shape), tuple(t.stride()), device="meta") for t in operands
        )
        return tuple(torch.add(a, b).stride())


def _preserve(position: int) -> LayoutRule:
    """A rule: the result as ``empty_like`` lays out argument ``position``'s shape: its
    strides where it is dense, else its suggested memory format."""

    def rule(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
        source = args[position] if len(args) > position else None
        if not isinstance(source, torch.Tensor):
            return {}
        if is_dense(source.shape, source.stride()):
            return {0: tuple(source.stride())}
        return {0: suggest_memory_format(source.shape, source.stride())}

    return rule


def _row_major(outputs: tuple[int, ...] = (0,)) -> LayoutRule:
    """A rule: the listed outputs row-major."""
    layouts: dict[int, Layout] = dict.fromkeys(outputs, torch.contiguous_format)

    def rule(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
        return layouts

    return rule


def _column_major(*outputs: int) -> LayoutRule:
    """A rule: the listed outputs :data:`COLUMN_MAJOR`."""
    layouts: dict[int, Layout] = dict.fromkeys(outputs, COLUMN_MAJOR)

    def rule(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int, Layout]:
        return layouts

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
    with _disable_current_modes():
        cpu_input, cpu_weight = _cpu_empty(input_), _cpu_empty(weight)
        cpu_bias = _cpu_empty(bias) if isinstance(bias, torch.Tensor) else None
        return cpu_convolution_format(cpu_input, cpu_weight, cpu_bias, settings, bias_sizes)


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
#: Pointwise ops whose CPU kernel is one TensorIterator over their first two
#: arguments, in order: ``(grad_output, input)``, ``(grad_output, mask)``, ``(self, other)``.
_FIRST_TWO_OPERANDS = (
    "aten::hardtanh_backward",
    "aten::hardswish_backward",
    "aten::hardsigmoid_backward",
    "aten::logit_backward",
    "aten::softplus_backward",
    "aten::native_dropout_backward",
    "aten::xlogy.Tensor",
)
#: Ops whose CPU kernel allocates its (first) result row-major.
_ROW_MAJOR = (
    "aten::pow.Scalar",
    "aten::_log_softmax_backward_data",
    "aten::glu_backward",
    "aten::mse_loss_backward",
    "aten::smooth_l1_loss_backward",
    "aten::huber_loss_backward",
)
#: Ops whose CPU kernel allocates its result in the input's suggested memory format.
_SHUFFLES = ("aten::pixel_shuffle", "aten::pixel_unshuffle", "aten::channel_shuffle")

#: Rules for results on the CPU, traced on meta or on fake CPU tensors, by overload
#: (``aten::div.Tensor_mode``) or by op (``aten::roll``: every overload).
CPU_RULES: dict[str, LayoutRule] = {
    **{name: _like_input(0) for name in _PADS},
    **{f"{name}_backward": _like_input(1) for name in _PADS},
    "aten::roll": _roll,
    **{name: _like_input(0) for name in _BATCH_NORMS},
    "aten::native_batch_norm_backward": _like_input(1),
    "aten::div.Tensor_mode": _rounding_division,
    **dict.fromkeys(_FIRST_TWO_OPERANDS, _tensor_iterator(0, 1)),
    # elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
    "aten::elu_backward": _tensor_iterator(0, 5),
    **dict.fromkeys(_ROW_MAJOR, _row_major()),
    "aten::log_sigmoid_forward": _row_major((0, 1)),
    "aten::binary_cross_entropy": _preserve(0),
    "aten::binary_cross_entropy_backward": _preserve(1),
    **dict.fromkeys(_SHUFFLES, _like_input(0)),
    "aten::max_unpool2d": _like_input(0),
    "aten::_linalg_svd": _column_major(2),
    "aten::linalg_eig": _column_major(1),
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
        if isinstance(layout, tuple):
            strides = layout
        elif isinstance(layout, torch.memory_format):
            strides = dense_strides(item.shape, layout)
        else:
            strides = column_major_strides(item.shape)
        if len(strides) != item.dim():
            continue  # a reduced result (binary_cross_entropy's mean): no layout question
        if tuple(item.stride()) != strides:
            items[index] = item.new_empty_strided(item.shape, strides)
    return tuple(items) if isinstance(result, tuple) else items[0]
