"""``aot_forward``: a torch-level graph to a functional ATen inference graph."""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from torchstrata.autograd.recorder import AotTraceError, AtenRecorder
from torchstrata.core import (
    AotResult,
    CompileOptions,
    Graph,
    Level,
    Node,
    TensorMeta,
    eliminate_dead_code,
    map_nodes,
    verify,
)

TRAINING_NOT_SUPPORTED = "training graphs need the AOT autograd issue"


def aot_forward(graph: Graph, options: CompileOptions | None = None) -> AotResult:
    """Trace ``graph`` (torch level) through the dispatcher into a functional ATen graph.

    The graph runs on fake tensors under ``torch.no_grad()``, so composite ops decompose
    exactly as they do at dispatch (``torch.softmax`` records ``aten._softmax``), and every
    ATen call is recorded. Node metadata carries the inputs' real devices. Dead nodes are
    dropped; with ``options.debug`` the result is verified.

    :param graph: a torch-level graph whose inputs describe the call's tensors.
    :param options: compile options (only ``debug`` is read).
    :return: ``AotResult(forward=aten_graph, backward=None, num_user_outputs=len(outputs))``.
    :raises NotImplementedError: if an input requires grad (training), an input is
        mutated, or a value needs functionalization (see the package README).
    :raises AotTraceError: if a torch node fails on fake tensors; the message names it.
    """
    if graph.level is not Level.TORCH:
        raise ValueError(f"aot_forward takes a torch-level graph, not {graph.level.value}")
    grads = [node.name for node in graph.inputs if node.tensor_meta.requires_grad]
    if grads:
        raise NotImplementedError(
            f"{TRAINING_NOT_SUPPORTED} (inputs requiring grad: {', '.join(grads)})"
        )
    recorder = AtenRecorder()
    fake_mode = FakeTensorMode()
    with fake_mode:
        fake_inputs = [_fake_input(node.tensor_meta) for node in graph.inputs]
    for node, tensor in zip(graph.inputs, fake_inputs, strict=True):
        recorder.add_input(node.name, tensor)
    with fake_mode, recorder, torch.no_grad():
        values = _run(graph, fake_inputs)
    outputs = [_output_node(recorder, output, values[output]) for output in graph.outputs]
    forward = eliminate_dead_code(recorder.builder.build(outputs))
    if options is not None and options.debug:
        verify(forward)
    return AotResult(forward=forward, backward=None, num_user_outputs=len(outputs))


def _fake_input(meta: TensorMeta) -> torch.Tensor:
    return torch.empty_strided(meta.shape, meta.strides, dtype=meta.dtype, device=meta.device)


def _run(graph: Graph, inputs: list[torch.Tensor]) -> dict[Node, Any]:
    """Evaluate the torch graph node by node (like ``interpret``, naming the failing node)."""
    env: dict[Node, Any] = dict(zip(graph.inputs, inputs, strict=True))
    for node in graph.nodes:
        assert node.op is not None
        call_args = map_nodes(node.args, env.__getitem__)
        call_kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        try:
            env[node] = node.op.resolve()(*call_args, **call_kwargs)
        except NotImplementedError as error:
            raise NotImplementedError(f"%{node.name} = {node.op.name}(...): {error}") from error
        except Exception as error:
            raise AotTraceError(f"%{node.name} = {node.op.name}(...) failed: {error}") from error
    return env


def _output_node(recorder: AtenRecorder, output: Node, value: Any) -> Node:
    if not isinstance(value, torch.Tensor):
        raise NotImplementedError(
            f"output %{output.name} is a {type(value).__name__}, not a tensor; "
            "graph outputs must be tensors"
        )
    try:
        return recorder.node_of(value)
    except NotImplementedError as error:
        raise NotImplementedError(f"output %{output.name}: {error}") from error
