"""Ops of a joint graph that call Python when they run: they must run where eager runs them.

Capture records a gradient hook registered in traced code as a node whose derivative is
``aten._torchstrata_call_grad_hook(grad, slot)``: it calls the user's hook on the gradient
when the backward runs (decision 0067). Tracing puts it in the backward like any op; what
must not happen is a rewrite that runs it elsewhere or another number of times. The one
such rewrite is the unit-gradient forward (:mod:`.unit_grads`), which would copy the
tangent-dependent nodes into the forward and call the hook there, before the backward and
with a tangent of 1: a graph with a Python call gets no unit gradients. Nor does the
trace repeat such an op on probe tensors to learn eager's errors (:mod:`.kernel_checks`):
that would call the hook at compile time.

Such ops are recognised by name (``aten._torchstrata_call_*``), the contract with capture:
this stage defines none of them and imports nothing of capture.
"""

from __future__ import annotations

import torch

from torchstrata.core import Node, OpKind

#: The prefix of the ATen names of ops that call Python when they run.
PYTHON_CALL_PREFIX = "_torchstrata_call_"


def calls_python(node: Node) -> bool:
    """Whether running ``node`` calls a Python function of the user's (a gradient hook)."""
    op = node.op
    if op is None or op.kind is not OpKind.ATEN:
        return False
    return op.name.split(".")[1].startswith(PYTHON_CALL_PREFIX)


def overload_calls_python(func: torch._ops.OpOverload) -> bool:
    """:func:`calls_python` for an ATen overload about to run in the trace."""
    namespace, _, name = func.name().partition("::")
    return namespace == "aten" and name.startswith(PYTHON_CALL_PREFIX)
