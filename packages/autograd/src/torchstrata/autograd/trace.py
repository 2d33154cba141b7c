"""Tracing a torch-level graph into one functional ATen graph, optionally with its backward.

The torch graph runs node by node on fake tensors under :class:`AtenRecorder`. For a
*joint* trace the inputs that require grad are fake leaves with ``requires_grad``, the
graph runs with autograd on, and ``torch.autograd.grad(outputs, inputs, tangents)`` is
called under the same recorder, so PyTorch's own derivative formulas record the
backward ATen ops into the same graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import attrs
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from torchstrata.autograd.constants import hoist_constants, place_index_constants
from torchstrata.autograd.devices import meta_trace_device, move_graph, trace_device
from torchstrata.autograd.recompute import classify, recording
from torchstrata.autograd.recorder import AotTraceError, AtenRecorder
from torchstrata.autograd.shared_outputs import OutputAlias, output_views
from torchstrata.autograd.written_inputs import TracedInputs
from torchstrata.core import (
    Graph,
    Level,
    Node,
    SymbolicSizes,
    TensorMeta,
    aten,
    eliminate_dead_code,
    map_nodes,
    rebind_graph,
    size_or_int,
)

_DETACH = aten("detach.default")
_CPU = torch.device("cpu")
_META = torch.device("meta")


@attrs.frozen
class JointTrace:
    """A traced graph before partitioning.

    ``graph`` inputs: the torch graph's inputs, then one per lifted constant (a tensor
    made in the graph, whose real tensor ``constants`` holds; together the
    ``num_primals`` primals), then one tangent per entry of ``tangent_outputs``.
    Outputs: ``num_user_outputs`` user outputs (the last ``num_hidden_outputs`` of them
    hidden bases of ``output_views``), one write-back per entry of
    ``mutated_inputs``, then one gradient per entry of ``grad_inputs``. The entries of
    ``tangent_outputs`` index the user outputs and write-backs together (a write-back's
    index is ``num_user_outputs`` plus its position): a written input's new value that
    the graph made differentiable gets a tangent too (decision 0520).
    """

    graph: Graph
    num_primals: int
    num_user_outputs: int
    mutated_inputs: tuple[int, ...] = ()
    output_aliases: tuple[OutputAlias | None, ...] = ()
    tangent_outputs: tuple[int, ...] = ()
    grad_inputs: tuple[int, ...] = ()
    #: See ``AotResult.output_views``.
    output_views: tuple[OutputAlias | None, ...] = ()
    #: See ``AotResult.num_hidden_outputs`` (the last of the ``num_user_outputs``).
    num_hidden_outputs: int = 0
    #: See ``AotResult.constants``.
    constants: tuple[torch.Tensor, ...] = attrs.field(default=(), eq=False)
    #: The names of the joint nodes recorded for torch nodes tagged ``recompute`` (a
    #: checkpointed region), less the region outputs: the partition never saves them
    #: (:mod:`torchstrata.autograd.recompute`).
    recompute: frozenset[str] = frozenset()
    #: The names of the region outputs: computed in the forward, saved where needed.
    region_outputs: frozenset[str] = frozenset()

    @property
    def num_forward_outputs(self) -> int:
        """User outputs plus write-backs."""
        return self.num_user_outputs + len(self.mutated_inputs)


def trace_graph(graph: Graph, *, training: bool) -> JointTrace:
    """Trace ``graph`` (torch level); with ``training``, trace its backward as well.

    An inference trace of a graph on one device first runs on ``meta`` tensors (see
    :func:`~torchstrata.autograd.devices.meta_trace_device`); if that fails, and for
    every other graph, it runs on fake tensors.

    :raises AotTraceError: if a torch node fails on fake tensors (the message names it).
    :raises NotImplementedError: for outputs that are not tensors and unsupported
        mutations (see the package README).
    """
    if graph.level is not Level.TORCH:
        raise ValueError(f"aot takes a torch-level graph, not {graph.level.value}")
    device = meta_trace_device(graph, training)
    if device is not None:
        try:
            return _trace(graph, training, contextlib.nullcontext(), device)
        except Exception:  # noqa: BLE001 - any failure on meta tensors: retry on fake ones
            pass
    return _trace(graph, training, FakeTensorMode(), None)


def trace_symbolic(
    graph: Graph, *, training: bool, hints: Mapping[str, int] | None = None
) -> tuple[JointTrace, tuple[Any, ...]]:
    """Trace ``graph`` (torch level, sizes symbolic) once for every size: fake tensors
    of a ``ShapeEnv`` of this trace's own (:func:`~torchstrata.core.rebind_graph`: the
    capture's symbols by name), under torch's Python dispatcher (as capture's meta
    inference, decision 0212). The trace's sizes and node arguments stay ``SymInt`` values;
    where it decides on a size, it decides for ``hints`` (symbol name -> size; default:
    the sizes the capture saw).

    :return: the trace and the sympy conditions on the symbols it relied on (each is
        to be checked for a call's sizes before the trace serves it).
    :raises ValueError: if a symbol is not the size of an input dimension.
    """
    trace, sizes = trace_symbolic_sizes(graph, training=training, hints=hints)
    return trace, sizes.guard_exprs()


def trace_symbolic_sizes(
    graph: Graph, *, training: bool, hints: Mapping[str, int] | None = None
) -> tuple[JointTrace, SymbolicSizes]:
    """:func:`trace_symbolic`, returning the trace's own :class:`SymbolicSizes` (its
    ``ShapeEnv``) rather than its conditions so far: what runs on the symbolic trace
    afterwards (the partition, :func:`~torchstrata.autograd.aot_symbolic`) adds its own
    conditions there, under ``symbolic_scope(sizes)``."""
    if graph.level is not Level.TORCH:
        raise ValueError(f"aot takes a torch-level graph, not {graph.level.value}")
    sizes = SymbolicSizes({})
    rebound = rebind_graph(graph, sizes, hints)
    mode = _SymbolicMode(FakeTensorMode(shape_env=sizes.shape_env))
    return _trace(rebound, training, mode, None), sizes


class _SymbolicMode:
    """A fake mode entered with torch's Python dispatcher, any number of times (the
    trace enters its fake mode again for each phase)."""

    def __init__(self, fake_mode: FakeTensorMode) -> None:
        self.fake_mode = fake_mode
        self._stacks: list[contextlib.ExitStack] = []

    def __enter__(self) -> FakeTensorMode:
        from torch._dispatch.python import enable_python_dispatcher

        stack = contextlib.ExitStack()
        stack.enter_context(self.fake_mode)
        stack.enter_context(enable_python_dispatcher())
        self._stacks.append(stack)
        return self.fake_mode

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stacks.pop().__exit__(*exc)


def _trace(
    graph: Graph,
    training: bool,
    fake_mode: contextlib.AbstractContextManager[Any],
    meta_for: torch.device | None,
) -> JointTrace:
    """The trace under ``fake_mode``; with ``meta_for``, on meta tensors standing for it."""
    stand_in = meta_for if meta_for is not None else trace_device(graph.input_metas, training)
    tracing_on = _META if meta_for is not None else _CPU if stand_in is not None else None
    cudnn = torch.backends.cudnn.enabled and torch.backends.cudnn.is_available()
    recorder = AtenRecorder(meta_for, cudnn_layouts=cudnn)
    with fake_mode:
        primals = [_fake_input(node.tensor_meta, training, tracing_on) for node in graph.inputs]
        traced = TracedInputs(primals)
    for node, tensor in zip(graph.inputs, traced.tensors, strict=True):
        recorder.add_input(node.name, tensor)
    grad_mode = torch.enable_grad() if training else torch.no_grad()
    # cuDNN batch norm writes running stats with no functional variant: trace natively.
    with fake_mode, recorder, grad_mode, torch.backends.cudnn.flags(enabled=False):
        values = _run(graph, traced.tensors, recorder)
    results = [_tensor_output(output, values[output]) for output in graph.outputs]
    aliases = tuple(_alias(recorder, value) for value in results)
    views, hidden = output_views(recorder, results, aliases)
    with fake_mode, torch.no_grad():
        user_nodes = [
            _output_node(recorder, out, value)
            for out, value in zip(graph.outputs, results, strict=True)
        ]
        user_nodes += [recorder.output_node(base) for base in hidden]
        mutations = recorder.mutated_inputs()
    results += hidden  # the hidden bases are user outputs to the graphs
    aliases += (None,) * len(hidden)
    views += (None,) * len(hidden)
    forward_count = len(recorder.builder)  # the nodes after these are the backward's
    # user outputs, then the written inputs' new values (differentiable write-backs)
    differentiable = [value.requires_grad for value in results]
    differentiable += [traced.has_new_history(index) for index, _ in mutations]
    results += [traced.tensors[index] for index, _ in mutations]
    tangent_outputs = tuple(i for i, wanted in enumerate(differentiable) if wanted)
    wanted = traced.wanted
    grad_nodes: list[Node] = []
    grad_inputs: list[int] = []
    if tangent_outputs and wanted:
        with fake_mode:
            tangents = [
                torch.empty(results[i].shape, dtype=results[i].dtype, device=results[i].device)
                for i in tangent_outputs
            ]
        for i, tangent in zip(tangent_outputs, tangents, strict=True):
            recorder.add_input(f"tangent_{i}", tangent)
        with fake_mode, recorder, torch.backends.cudnn.flags(enabled=False):
            grads = torch.autograd.grad(
                [results[i] for i in tangent_outputs],
                [traced.leaves[i] for i in wanted],
                grad_outputs=tangents,
                allow_unused=True,
            )
        with fake_mode, torch.no_grad():
            for index, grad in zip(wanted, grads, strict=True):
                if grad is not None:
                    grad_inputs.append(index)
                    grad_nodes.append(recorder.node_of(grad))
        primal_writes = [item for item in recorder.mutated_inputs() if item[0] < len(primals)]
        if primal_writes != mutations:
            raise NotImplementedError("the backward pass mutates a graph input")
    else:
        tangent_outputs = ()
    outputs = [*user_nodes, *(node for _, node in mutations), *grad_nodes]
    recorded = recorder.builder.build(outputs)
    recompute, region_outputs = classify(recorded, forward_count)
    joint = eliminate_dead_code(_drop_detach(recorded))
    joint, constants = hoist_constants(joint, len(graph.inputs), recorder.constants)
    if stand_in is not None:
        joint = move_graph(joint, stand_in, tracing_on or _CPU)
    joint, constants = place_index_constants(joint, len(graph.inputs), constants)
    return JointTrace(
        graph=joint,
        num_primals=len(graph.inputs) + len(constants),
        num_user_outputs=len(user_nodes),
        mutated_inputs=tuple(index for index, _ in mutations),
        output_aliases=aliases,
        output_views=views,
        num_hidden_outputs=len(hidden),
        tangent_outputs=tangent_outputs,
        grad_inputs=tuple(grad_inputs),
        constants=constants,
        recompute=recompute,
        region_outputs=region_outputs,
    )


def _drop_detach(graph: Graph) -> Graph:
    """Replace ``aten.detach`` nodes by their input (a no-op on functional values).

    Autograd records them when it saves tensors for the backward.
    """
    env: dict[Node, Node] = {node: node for node in graph.inputs}
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op == _DETACH:
            env[node] = env[node.args[0]]
            continue
        args = map_nodes(node.args, env.__getitem__)
        kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        env[node] = Node(node.name, node.op, args, kwargs, node.meta)
        nodes.append(env[node])
    outputs = tuple(env[node] for node in graph.outputs)
    return Graph(graph.level, graph.inputs, tuple(nodes), outputs)


def _fake_input(meta: TensorMeta, training: bool, tracing_on: torch.device | None) -> torch.Tensor:
    device = tracing_on if tracing_on is not None else meta.device
    tensor = torch.empty_strided(meta.shape, meta.strides, dtype=meta.dtype, device=device)
    differentiable = meta.dtype.is_floating_point or meta.dtype.is_complex
    if training and meta.requires_grad and differentiable:
        tensor.requires_grad_(True)
    return tensor


def _run(graph: Graph, inputs: list[torch.Tensor], recorder: AtenRecorder) -> dict[Node, Any]:
    """Evaluate the torch graph node by node (like ``interpret``, naming the failing node);
    the ATen nodes recorded for a tagged node get its tags."""
    env: dict[Node, Any] = dict(zip(graph.inputs, inputs, strict=True))
    for node in graph.nodes:
        assert node.op is not None
        call_args = map_nodes(node.args, env.__getitem__)
        call_kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        try:
            with recording(recorder.builder, node):
                env[node] = node.op.resolve()(*call_args, **call_kwargs)
        except NotImplementedError as error:
            raise NotImplementedError(f"%{node.name} = {node.op.name}(...): {error}") from error
        except Exception as error:
            raise AotTraceError(f"%{node.name} = {node.op.name}(...) failed: {error}") from error
    return env


def _tensor_output(output: Node, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise NotImplementedError(
            f"output %{output.name} is a {type(value).__name__}, not a tensor; "
            "graph outputs must be tensors"
        )
    return value


def _output_node(recorder: AtenRecorder, output: Node, value: torch.Tensor) -> Node:
    try:
        return recorder.output_node(value)
    except NotImplementedError as error:
        raise NotImplementedError(f"output %{output.name}: {error}") from error


def _alias(recorder: AtenRecorder, value: torch.Tensor) -> OutputAlias | None:
    index = recorder.input_alias(value)
    if index is None:
        return None
    return (index, tuple(value.shape), tuple(value.stride()), size_or_int(value.storage_offset()))
