"""Tracing graphs for a device this machine lacks (a ``cuda:0`` graph on a CPU-only host).

Fake tensors carry any device, but the autograd engine needs a device guard for the
tensors it differentiates, so a joint trace of a ``cuda`` graph without CUDA runs on
``cpu`` fake tensors; :func:`move_graph` then puts the real device back into every
node's metadata and ``device`` argument.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from torchstrata.core import Graph, Node, TensorMeta

_CPU = torch.device("cpu")
#: Words in torch-level op names whose ATen decomposition depends on the device.
DEVICE_DISPATCHED = (
    "attention",
    "batch_norm",
    "instance_norm",
    "group_norm",
    "lstm",
    "gru",
    "rnn",
    "ctc_loss",
    "embedding_bag",
    "stft",
)


def is_available(device: torch.device) -> bool:
    """True when tensors on ``device`` can be differentiated on this machine."""
    if device.type in ("cpu", "meta"):
        return True
    module = getattr(torch, device.type, None)
    available = getattr(module, "is_available", None)
    return bool(available()) if callable(available) else False


def trace_device(metas: tuple[TensorMeta, ...], training: bool) -> torch.device | None:
    """The device to put back after tracing on ``cpu``, or None to trace as described.

    :raises NotImplementedError: for a training graph mixing an unavailable device with
        other devices (the ``cpu`` stand-in would be ambiguous).
    """
    devices = {meta.device for meta in metas}
    if not training or all(is_available(device) for device in devices):
        return None
    if len(devices) != 1:
        names = ", ".join(sorted(str(device) for device in devices))
        raise NotImplementedError(
            f"cannot trace a training graph over devices {names} without all of them here"
        )
    return devices.pop()


def meta_trace_device(graph: Graph, training: bool) -> torch.device | None:
    """The device of a graph that may be traced on ``meta`` tensors, or None.

    Fake tensors need a ``FakeTensorMode``, whose construction imports Dynamo's config
    (seconds, most of a cold compile); meta tensors need nothing. That is sound for a
    graph (inference, or forward and backward: derivative formulas do not depend on the
    device) whose inputs all live on the CPU (``cpu`` then stands for ``meta``
    in the traced graph, see :func:`move_graph`) and that calls no op in
    :data:`DEVICE_DISPATCHED`, whose ATen form depends on the device (attention picks
    a CPU kernel, batch norm saves nothing on the CPU...). Results that a meta kernel
    lays out otherwise than the CPU kernel get the CPU's layout from the recorder (see
    :mod:`torchstrata.autograd.cpu_layouts`). A graph that mixes devices,
    creates tensors on another device, or reads data fails on meta tensors and is
    traced again on fake ones (the caller's job).
    """
    devices = {meta.device for meta in graph.input_metas}
    if devices != {_CPU}:
        return None
    for node in graph.nodes:
        name = node.op.name if node.op is not None else ""
        if any(word in name for word in DEVICE_DISPATCHED):
            return None
    return _CPU


#: Ops whose CPU kernel returns statistics (outputs 1 and 2: mean and rstd) in the
#: input's dtype where the meta kernel, like the CUDA one, keeps float16/bfloat16
#: statistics in float32. Eager CPU autograd saves them in the input dtype, and the
#: decomposition follows the kernel of the device, so a meta trace standing for the
#: CPU must give them the input dtype too (or forward and backward disagree on it).
CPU_STATISTICS_IN_INPUT_DTYPE = frozenset({"aten::native_layer_norm"})


def cpu_result(func: torch._ops.OpOverload, args: tuple[Any, ...], result: Any) -> Any:
    """``result`` of ``func`` run on meta tensors, with the output dtypes the CPU kernel
    gives where they differ from the meta kernel's (see
    :data:`CPU_STATISTICS_IN_INPUT_DTYPE`); other results are returned as they are.

    Runs inside a dispatch mode's handler: the casts are not recorded.
    """
    if func._overloadpacket._qualified_op_name not in CPU_STATISTICS_IN_INPUT_DTYPE:
        return result
    source = args[0]
    if not isinstance(source, torch.Tensor) or not isinstance(result, tuple):
        return result
    return tuple(
        item.to(source.dtype) if index in (1, 2) and isinstance(item, torch.Tensor) else item
        for index, item in enumerate(result)
    )


def move_graph(graph: Graph, device: torch.device, traced_on: torch.device = _CPU) -> Graph:
    """``graph`` with ``traced_on`` (``cpu`` by default) replaced by ``device`` in metadata
    and device arguments."""
    env: dict[Node, Node] = {}

    def convert(value: Any) -> Any:
        if isinstance(value, Node):
            return env[value]
        if isinstance(value, torch.device) and value == traced_on:
            return device
        if isinstance(value, list | tuple):
            items = [convert(item) for item in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            return {key: convert(item) for key, item in value.items()}
        return value

    for node in graph.all_nodes():
        env[node] = Node(
            node.name,
            node.op,
            convert(node.args),
            convert(dict(node.kwargs)),
            _move_meta(node.meta, device, traced_on),
        )
    return Graph(
        graph.level,
        tuple(env[node] for node in graph.inputs),
        tuple(env[node] for node in graph.nodes),
        tuple(env[node] for node in graph.outputs),
    )


def _move_meta(meta: Any, device: torch.device, traced_on: torch.device) -> Any:
    if isinstance(meta, TensorMeta):
        return attrs.evolve(meta, device=device) if meta.device == traced_on else meta
    if isinstance(meta, tuple):
        return tuple(_move_meta(item, device, traced_on) for item in meta)
    return meta
