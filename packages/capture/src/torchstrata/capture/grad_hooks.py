"""``tensor.register_hook(hook)`` in traced code, without a graph break (decision 0067).

On a tensor the graph computes, the hook becomes a node: the tensor's variable is
rebound to ``aten._torchstrata_grad_hook(tensor, slot)`` (:mod:`.hook_ops`), so every
later use, and the value returned, reads the hooked tensor, and the backward calls
``hook`` on the sum of their gradients, as eager calls it on the tensor's gradient. What
the hook returns replaces the gradient. A second hook on the same tensor makes a node
over the same tensor whose slot runs both in registration order (the first node is left
unread). A tensor the trace read before the hook was
registered is refused (a graph break): its earlier uses would bypass the hook.

On a tensor with a source (an argument, a parameter: a tensor that exists before the
call) the registration itself is the side effect: it is replayed on the real tensor after
the graph (:mod:`.side_effects`), so the hook stays registered, as in eager.

The hook must be a function that is the same on every call: one read by source (a global,
a module attribute, guarded by identity), a function made in the trace whose closure
holds constants and objects read by source (each guarded by identity), or a method of an
object read by source (``self.save_grad``). The handle
``register_hook`` returns cannot be used in the trace.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torchstrata.capture import hook_ops
from torchstrata.capture.tracer import CONSTANT_TYPES, Tracer, Unsupported
from torchstrata.capture.variables import (
    BoundMethodVar,
    ConstVar,
    FunctionVar,
    ObjectVar,
    TensorVar,
    Var,
    describe,
)
from torchstrata.core import OpKind, OpRef

#: The torch-level op of a hook node.
HOOK_OP = OpRef(OpKind.TORCH, f"torch.ops.aten.{hook_ops.FORWARD_NAME}.default")
#: The torch-level op of a hook node over several tensors (module backward hooks).
HOOKS_OP = OpRef(OpKind.TORCH, f"torch.ops.aten.{hook_ops.LIST_FORWARD_NAME}.default")


class HookHandleVar(Var):
    """The ``RemovableHandle`` that ``register_hook`` returned in the trace."""


def register_tensor_hook(
    tracer: Tracer, tensor: TensorVar, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """``tensor.register_hook(hook)`` at capture time (see the module docstring)."""
    if len(args) != 1 or kwargs:
        raise Unsupported("Tensor.register_hook() takes one hook")
    if not tensor.meta.requires_grad:
        raise Unsupported("register_hook on a tensor that does not require grad (eager raises)")
    hook, key = real_hook(tracer, args[0])
    if tensor.source is not None:
        tracer.side_effects.register_hook(tensor, hook)
        return HookHandleVar()
    if not tracer.builder.built_since(tensor.node, 0):
        raise Unsupported("register_hook on a tensor the trace has already used")
    hook_ops.forward_op()  # defined before the graph can run
    base, keys, hooks = tensor.node, (key,), (hook,)
    chain = tracer.hook_chains.get(tensor.node)
    if chain is not None:  # a second hook on the tensor: one node runs both, in order
        base, keys, hooks = chain[0], (*chain[1], key), (*chain[2], hook)
    slot = hook_ops.slot_for(keys, hook if len(hooks) == 1 else _in_order(hooks))
    tensor.node = tracer.builder.call(HOOK_OP, base, slot, meta=tensor.meta)
    tracer.hook_chains[tensor.node] = (base, keys, hooks)
    return HookHandleVar()


def _in_order(hooks: tuple[Callable[..., Any], ...]) -> Callable[[Any], Any]:
    """One hook that runs ``hooks`` as eager runs a tensor's hooks: in registration
    order, each given what the one before returned (or the gradient it was given)."""

    def run(grad: Any) -> Any:
        for hook in hooks:
            result = hook(grad)
            if result is not None:
                grad = result
        return grad

    return run


def real_hook(tracer: Tracer, var: Var) -> tuple[Callable[..., Any], Any]:
    """The real function of hook ``var`` and a key that names it for every call, guarding
    what it depends on; raises :class:`Unsupported` for one that differs per call."""
    if isinstance(var, ObjectVar) and callable(var.value):
        if var.source is not None:
            tracer.guard_identity(var.source, var.value, "a gradient hook")
        return var.value, ("object", id(var.value))
    if isinstance(var, FunctionVar):
        defaults = tuple(_constant(tracer, item) for item in var.defaults)
        contents = []
        for cell in var.closure:
            if cell.var is None:
                raise Unsupported("a gradient hook with an unbound closure variable")
            contents.append(_constant(tracer, cell.var))
        if var.kwdefaults:
            raise Unsupported("a gradient hook with keyword-only defaults")
        function = types.FunctionType(
            var.code,
            var.globals,
            var.code.co_name,
            defaults,
            tuple(types.CellType(value) for value in contents),
        )
        key = ("function", var.code, id(var.globals), *map(_key_part, (*defaults, *contents)))
        return function, key
    if isinstance(var, BoundMethodVar):  # self.save_grad: the method bound to the object
        method, method_key = real_hook(tracer, var.function)
        owner = _constant(tracer, var.self_var)
        return types.MethodType(method, owner), ("method", method_key, _key_part(owner))
    raise Unsupported(f"a gradient hook that is {describe(var)}")


def _constant(tracer: Tracer, var: Var) -> Any:
    """The real value ``var`` has on every call (objects by source are guarded by identity)."""
    if isinstance(var, ConstVar):
        return var.value
    real = tracer.real_object(var)
    if real is None or var.source is None:
        raise Unsupported(f"a gradient hook closing over {describe(var)} made in the trace")
    tracer.guard_identity(var.source, real, "an object a gradient hook reads")
    return real


def _key_part(value: Any) -> Any:
    """A constant by value (a new float each capture is the same hook), an object by
    identity (the slot's function holds it, so its ``id()`` stays its own)."""
    if isinstance(value, CONSTANT_TYPES):
        return (type(value), value)
    return ("id", id(value))
