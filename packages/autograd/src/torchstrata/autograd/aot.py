"""``aot``: a torch-level graph to functional ATen forward (and backward) graphs."""

from __future__ import annotations

from torchstrata.autograd.expand import spell_out_softmax
from torchstrata.autograd.factored_sums import factor_joint_sums
from torchstrata.autograd.materialised import MATERIALISED_SAVED
from torchstrata.autograd.offsets import offset_inputs
from torchstrata.autograd.partition import RESULT_DISCOUNT, partition
from torchstrata.autograd.trace import JointTrace, trace_graph
from torchstrata.autograd.unit_grads import unit_grad_forward, unit_grads_enabled
from torchstrata.core import AotResult, CompileOptions, Graph, verify


def aot(graph: Graph, options: CompileOptions | None = None) -> AotResult:
    """Trace ``graph`` (torch level) into functional ATen graphs.

    When no input requires grad (or no output depends on one), the result is the
    inference forward graph alone. Otherwise forward and backward are traced together
    through PyTorch's derivative formulas and split by a min-cut partitioner that
    recomputes cheap ops in the backward rather than saving their outputs. A scalar
    loss's forward also computes its gradients for a unit tangent
    (:mod:`torchstrata.autograd.unit_grads`). In-place
    ops are functionalized; writes to graph inputs come back as extra forward outputs
    (see :class:`~torchstrata.core.AotResult` for the calling convention). Tensors made
    in the graph (``torch.tensor([...])``) become hidden inputs, ``constants``.

    :param graph: a torch-level graph whose inputs describe the call's tensors
        (``requires_grad`` marks the inputs to differentiate).
    :param options: compile options (``debug``: verify the graphs; the autograd stage
        option ``unit_grads``).
    :raises AotTraceError: if a torch node fails on fake tensors; the message names it.
    :raises NotImplementedError: for what the package README lists as unsupported.
    """
    training = any(node.tensor_meta.requires_grad for node in graph.inputs)
    return aot_from_trace(trace_graph(graph, training=training), options)


def aot_from_trace(trace: JointTrace, options: CompileOptions | None = None) -> AotResult:
    """What :func:`aot` makes of a trace (static sizes): the inference forward, or the
    joint graph partitioned into forward and backward."""
    if not trace.grad_inputs:
        result = _inference(trace)
    else:
        trace = factor_joint_sums(spell_out_softmax(trace))
        blocked = options.blocked_plugins if options is not None else frozenset()
        parts = partition(
            trace,
            discount_results=RESULT_DISCOUNT not in blocked,
            save_materialised=MATERIALISED_SAVED not in blocked,
        )
        unit = unit_grad_forward(trace, parts) if unit_grads_enabled(options) else None
        result = AotResult(
            forward=parts.forward if unit is None else unit,
            backward=parts.backward,
            num_user_outputs=trace.num_user_outputs,
            mutated_inputs=trace.mutated_inputs,
            num_saved=len(parts.saved),
            output_aliases=trace.output_aliases,
            output_views=trace.output_views,
            num_hidden_outputs=trace.num_hidden_outputs,
            tangent_outputs=trace.tangent_outputs,
            grad_inputs=trace.grad_inputs,
            num_unit_grads=0 if unit is None else len(trace.grad_inputs),
            offset_inputs=offset_inputs(trace.graph, trace.num_primals - len(trace.constants)),
            constants=trace.constants,
        )
    if options is not None and options.debug:
        verify(result.forward)
        if result.backward is not None:
            verify(result.backward)
    return result


def aot_forward(graph: Graph, options: CompileOptions | None = None) -> AotResult:
    """The inference graph of ``graph`` (``requires_grad`` on inputs is ignored).

    Runs under ``torch.no_grad()``, so composite ops decompose as they do at dispatch
    in inference (``torch.softmax`` records ``aten._softmax``).
    """
    result = _inference(trace_graph(graph, training=False))
    if options is not None and options.debug:
        verify(result.forward)
    return result


def _inference(trace: JointTrace) -> AotResult:
    joint = trace.graph
    forward = type(joint)(
        joint.level,
        joint.inputs[: trace.num_primals],
        joint.nodes,
        joint.outputs[: trace.num_forward_outputs],
    )
    return AotResult(
        forward=forward,
        backward=None,
        num_user_outputs=trace.num_user_outputs,
        mutated_inputs=trace.mutated_inputs,
        output_aliases=trace.output_aliases,
        output_views=trace.output_views,
        num_hidden_outputs=trace.num_hidden_outputs,
        constants=trace.constants,
    )
