"""Full backward hooks of a module call, inlined as two gradient-hook nodes (decision 0067).

``nn.Module._call_impl`` wraps a module's tensor arguments and its output in identity
autograd nodes (``torch.utils.hooks.BackwardHook``) when the module has full backward
hooks (``register_full_backward_hook``) or backward pre-hooks
(``register_full_backward_pre_hook``). Capture puts a hook node over several tensors
(``aten._torchstrata_grad_hooks``, :mod:`.hook_ops`) at each of the two places instead:
the output's, whose gradients make ``grad_output``, runs the pre-hooks (a tuple they
return replaces ``grad_output``) and keeps ``grad_output``; the arguments', whose
gradients make ``grad_input``, runs the full hooks with both (a tuple they return
replaces ``grad_input``). A module none of whose arguments requires grad runs the full
hooks at the output's node with ``grad_input`` all None, as eager does.

The nodes take the tensors that require grad; the other tensors get zeros in
``grad_input`` and None in ``grad_output``, other values None, as eager gives them. The output
is a tensor or a tuple. Old-style ``register_backward_hook`` hooks and global backward
hooks are graph breaks.

The hooks are read from the module's dicts when the backward runs, in their order; the
keys of those dicts and ``_is_full_backward_hook`` are guarded
(:func:`.module_calls.guard_module_call`), so a hook added or removed later captures
again. Both nodes of one call site share one :class:`ModuleBackward`; the runtime runs a
graph's backward as one autograd node, so the two run one after the other for one call.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from typing import Any

import attrs
import torch

from torchstrata.capture import hook_ops
from torchstrata.capture.grad_hooks import HOOKS_OP
from torchstrata.capture.modes import grad_enabled
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import SequenceVar, TensorVar, Var
from torchstrata.core import GuardKind

#: The state of each call site, by (module id, site, layout): reused when it is captured
#: again, dropped with the module.
_STATES: dict[Any, ModuleBackward] = {}


#: What eager warns when full backward hooks run with no argument requiring grad.
_NO_INPUT_GRAD_WARNING = (
    "Full backward hook is firing when gradients are computed with respect to module "
    "outputs since no inputs require gradients. See "
    "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
    "#torch.nn.Module.register_full_backward_hook for more details."
)


def has_backward_hooks(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` sets up backward hooks of its own."""
    return bool(module._backward_hooks or module._backward_pre_hooks)


class ModuleBackward:
    """The two gradient callbacks of one module call site (see the module docstring).

    Each node's slot holds one of them bound to the :class:`Layout` of its tuples, so a
    site captured again with other tensors gets slots of its own.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = weakref.ref(module)
        self.grad_outputs: tuple[Any, ...] | None = None

    def module(self) -> torch.nn.Module:
        """The module, alive as long as a graph that calls it can run."""
        module = self._module()
        if module is None:
            raise RuntimeError("torchstrata: the module of a backward hook was freed")
        return module

    def _full_hooks(self, module: torch.nn.Module) -> list[Any]:
        return list(module._backward_hooks.values()) if module._is_full_backward_hook else []

    def on_output(
        self, inputs: Layout, outputs: Layout, grads: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """``grad_output`` arrived: run the pre-hooks, keep it for :meth:`on_input`."""
        module = self.module()
        grad_outputs = outputs.pack(grads)
        for hook in module._backward_pre_hooks.values():
            result = hook(module, grad_outputs)
            if result is None:
                continue
            if len(result) != len(grad_outputs):
                raise RuntimeError(
                    "Backward pre hook returned an invalid number of grad_output, "
                    f"got {len(result)}, but expected {len(grad_outputs)}"
                )
            grad_outputs = tuple(result)
        if not inputs.positions:  # no argument requires grad: the hooks run now
            if self._full_hooks(module):
                warnings.warn(_NO_INPUT_GRAD_WARNING, stacklevel=2)  # eager's, word for word
            empty = (None,) * inputs.size
            for hook in self._full_hooks(module):
                result = hook(module, empty, grad_outputs)
                if result is not None and not all(item is None for item in result):
                    raise RuntimeError(
                        "Backward hook for Modules where no input requires gradient should "
                        "always return None or None for all gradients."
                    )
        else:
            self.grad_outputs = grad_outputs
        return outputs.unpack(grad_outputs, grads)

    def on_input(self, inputs: Layout, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """``grad_input`` arrived: run the full hooks with it and ``grad_output``."""
        if self.grad_outputs is None:  # as eager: no grad_output seen, no hook
            return grads
        module = self.module()
        grad_inputs = inputs.pack(grads)
        grad_outputs, self.grad_outputs = self.grad_outputs, None
        for hook in self._full_hooks(module):
            result = hook(module, grad_inputs, grad_outputs)
            if result is None:
                continue
            if len(result) != len(grad_inputs):
                raise RuntimeError(
                    "Backward hook returned an invalid number of grad_input, "
                    f"got {len(result)}, but expected {len(grad_inputs)}"
                )
            grad_inputs = tuple(result)
        return inputs.unpack(grad_inputs, grads)


class Layout:
    """Where the gradients a node takes sit in a ``grad_input`` or ``grad_output`` tuple."""

    def __init__(self, items: list[Var], zeros: bool) -> None:
        self.size = len(items)
        self.positions = [
            index
            for index, item in enumerate(items)
            if isinstance(item, TensorVar) and item.meta.requires_grad
        ]
        self.zeros = {  # eager's grad_input has zeros for them, its grad_output None
            index: item.meta
            for index, item in enumerate(items)
            if zeros and isinstance(item, TensorVar) and not item.meta.requires_grad
        }

    def key(self) -> tuple[Any, ...]:
        """What tells two layouts apart."""
        zeros = tuple((index, meta.shape, meta.dtype) for index, meta in self.zeros.items())
        return (self.size, tuple(self.positions), zeros)

    def pack(self, grads: list[torch.Tensor]) -> tuple[Any, ...]:
        """The tuple a hook gets."""
        packed: list[Any] = [None] * self.size
        for index, meta in self.zeros.items():
            packed[index] = torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)
        for index, grad in zip(self.positions, grads, strict=True):
            packed[index] = grad
        return tuple(packed)

    def unpack(self, packed: tuple[Any, ...], grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """The node's gradients from the tuple a hook returned (None: zeros)."""
        return [
            torch.zeros_like(grad) if packed[index] is None else packed[index]
            for index, grad in zip(self.positions, grads, strict=True)
        ]


class BackwardHookSite:
    """Puts the hook nodes of one module call into the trace."""

    def __init__(self, tracer: Tracer, module: torch.nn.Module, source: str | None) -> None:
        if module._backward_hooks and module._is_full_backward_hook is not True:
            raise Unsupported(
                f"register_backward_hook (not full) on {type(module).__name__} is not supported"
            )
        if source is not None:
            tracer.guard(
                GuardKind.CONSTANT_MATCH,
                f"{source}._is_full_backward_hook",
                module._is_full_backward_hook,
                "module hooks",
            )
        self.tracer = tracer
        self.module = module
        self.active = grad_enabled(tracer)
        self.inputs: Layout | None = None
        self.state: ModuleBackward | None = None
        self._site = len(tracer.builder)

    def wrap_inputs(self, args: SequenceVar) -> SequenceVar:
        """The arguments, those that require grad replaced by their hooked values."""
        if not self.active:
            return args
        if not any(isinstance(item, TensorVar) for item in args.items):
            raise Unsupported(  # eager raises it too
                "Cannot set Module backward hook for a Module with no input Tensors."
            )
        self.inputs = inputs = Layout(list(args.items), zeros=True)
        self.state = state = self._state()
        if not inputs.positions:
            return args
        callback = functools.partial(state.on_input, inputs)
        hooked = self._hooked(list(args.items), inputs.positions, callback, inputs.key())
        return attrs.evolve(args, items=hooked, source=None)

    def wrap_output(self, output: Var) -> Var:
        """The output, hooked (eager hooks only outputs when some tensor requires grad)."""
        if not self.active or self.inputs is None or self.state is None:
            return output
        is_tuple = isinstance(output, SequenceVar) and not output.is_list
        if not is_tuple and not isinstance(output, TensorVar):
            raise Unsupported(
                f"backward hooks on a {type(self.module).__name__} whose output is "
                "neither a tensor nor a tuple"
            )
        items = list(output.items) if isinstance(output, SequenceVar) else [output]
        outputs = Layout(items, zeros=False)
        if not outputs.positions:
            return output  # no gradient reaches the module: eager runs no hook
        callback = functools.partial(self.state.on_output, self.inputs, outputs)
        key = (self.inputs.key(), outputs.key())
        hooked = self._hooked(items, outputs.positions, callback, key)
        if isinstance(output, SequenceVar):
            return attrs.evolve(output, items=hooked, source=None)
        return hooked[0]

    def _state(self) -> ModuleBackward:
        key = (id(self.module), self._site)
        state = _STATES.get(key)
        if state is None or state._module() is not self.module:
            state = ModuleBackward(self.module)
            _STATES[key] = state
            weakref.finalize(self.module, _STATES.pop, key, None)
        return state

    def _hooked(
        self, items: list[Var], positions: list[int], callback: Any, layout: Any
    ) -> list[Var]:
        """``items`` with those at ``positions`` replaced by one node's outputs."""
        hook_ops.forward_op()
        slot = hook_ops.slot_for(
            (id(callback.func.__self__), callback.func.__name__, layout), callback
        )
        tensors = [item for index in positions if isinstance(item := items[index], TensorVar)]
        assert len(tensors) == len(positions)
        node = self.tracer.builder.call(
            HOOKS_OP,
            [tensor.node for tensor in tensors],
            slot,
            meta=tuple(tensor.meta for tensor in tensors),
        )
        hooked = list(items)
        for number, (index, tensor) in enumerate(zip(positions, tensors, strict=True)):
            value = self.tracer.builder.getitem(node, number)
            hooked[index] = TensorVar(value, tensor.python_type)
        return hooked
