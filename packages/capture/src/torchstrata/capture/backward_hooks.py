"""Full backward hooks of a module call, inlined as two gradient-hook nodes (decision 0067).

``nn.Module._call_impl`` wraps a module's tensor arguments and its output in identity
autograd nodes (``torch.utils.hooks.BackwardHook``) when the module has full backward
hooks (``register_full_backward_hook``) or backward pre-hooks
(``register_full_backward_pre_hook``). Capture puts a hook node (:mod:`.hook_ops`) at
each of the two places instead: the output's, whose gradient is ``grad_output``, runs the
pre-hooks (a tuple they return replaces ``grad_output``) and keeps ``grad_output``; the
argument's, whose gradient is ``grad_input``, runs the full hooks with both (a tuple they
return replaces ``grad_input``). A module none of whose arguments requires grad runs the
full hooks at the output's node with ``grad_input`` all None, as eager does.

Supported: at most one positional tensor argument that requires grad (in
``grad_input`` the other tensor arguments get zeros and the other arguments None, as
eager gives them) and one tensor as the output. More tensors, old-style
``register_backward_hook`` hooks and global backward hooks are graph breaks.

The hooks are read from the module's dicts when the backward runs, in their order; the
keys of those dicts and ``_is_full_backward_hook`` are guarded
(:func:`.module_calls.guard_module_call`), so a hook added or removed later captures
again. Both nodes of one call site share one :class:`ModuleBackward`; the runtime runs a
graph's backward as one autograd node, so the two run one after the other for one call.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch

from torchstrata.capture import hook_ops
from torchstrata.capture.grad_hooks import HOOK_OP
from torchstrata.capture.modes import grad_enabled
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import SequenceVar, TensorVar, Var
from torchstrata.core import GuardKind, TensorMeta

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
    """The two gradient callbacks of one module call site (see the module docstring)."""

    def __init__(
        self,
        module: torch.nn.Module,
        n_inputs: int,
        input_index: int | None,
        zero_inputs: dict[int, TensorMeta],
    ) -> None:
        self._module = weakref.ref(module)
        self.n_inputs = n_inputs
        self.input_index = input_index
        #: Tensor arguments that do not require grad: eager's ``grad_input`` holds zeros
        #: for them (its autograd function materializes their gradients).
        self.zero_inputs = zero_inputs
        self.grad_outputs: tuple[Any, ...] | None = None

    def module(self) -> torch.nn.Module:
        """The module, alive as long as a graph that calls it can run."""
        module = self._module()
        if module is None:
            raise RuntimeError("torchstrata: the module of a backward hook was freed")
        return module

    def _full_hooks(self, module: torch.nn.Module) -> list[Any]:
        return list(module._backward_hooks.values()) if module._is_full_backward_hook else []

    def on_output(self, grad: torch.Tensor) -> torch.Tensor:
        """``grad_output`` arrived: run the pre-hooks, keep it for :meth:`on_input`."""
        module = self.module()
        grad_outputs: tuple[Any, ...] = (grad,)
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
        if self.input_index is None:  # no argument requires grad: the hooks run now
            if self._full_hooks(module):
                warnings.warn(_NO_INPUT_GRAD_WARNING, stacklevel=2)  # eager's, word for word
            empty = (None,) * self.n_inputs
            for hook in self._full_hooks(module):
                result = hook(module, empty, grad_outputs)
                if result is not None and not all(item is None for item in result):
                    raise RuntimeError(
                        "Backward hook for Modules where no input requires gradient should "
                        "always return None or None for all gradients."
                    )
        else:
            self.grad_outputs = grad_outputs
        replaced = grad_outputs[0]
        return torch.zeros_like(grad) if replaced is None else replaced

    def on_input(self, grad: torch.Tensor) -> torch.Tensor | None:
        """``grad_input`` arrived: run the full hooks with it and ``grad_output``."""
        if self.grad_outputs is None:  # as eager: no grad_output seen, no hook
            return None
        assert self.input_index is not None
        module = self.module()
        grad_inputs: tuple[Any, ...] = tuple(
            grad if index == self.input_index else self._zeros(index)
            for index in range(self.n_inputs)
        )
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
        replaced = grad_inputs[self.input_index]
        return torch.zeros_like(grad) if replaced is None else replaced

    def _zeros(self, index: int) -> torch.Tensor | None:
        meta = self.zero_inputs.get(index)
        if meta is None:
            return None
        return torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)


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
        self.state: ModuleBackward | None = None
        self._site = len(tracer.builder)

    def wrap_inputs(self, args: SequenceVar) -> SequenceVar:
        """The arguments, the tensor among them replaced by its hooked value."""
        if not self.active:
            return args
        tensors = [item for item in args.items if isinstance(item, TensorVar)]
        if not tensors:
            raise Unsupported(  # eager raises it too
                "Cannot set Module backward hook for a Module with no input Tensors."
            )
        graded = [
            index
            for index, item in enumerate(args.items)
            if isinstance(item, TensorVar) and item.meta.requires_grad
        ]
        if len(graded) > 1:
            raise Unsupported(
                f"backward hooks on a {type(self.module).__name__} call with "
                f"{len(graded)} tensor arguments that require grad are not supported"
            )
        index = graded[0] if graded else None
        zeros = {
            position: item.meta
            for position, item in enumerate(args.items)
            if isinstance(item, TensorVar) and position != index
        }
        self.state = self._state(len(args.items), index, zeros)
        if index is None:
            return args
        tensor = args.items[index]
        assert isinstance(tensor, TensorVar)
        items = list(args.items)
        items[index] = self._hooked(tensor, self.state.on_input, "input")
        return SequenceVar(items, args.is_list, args.field_names, tuple_type=args.tuple_type)

    def wrap_output(self, output: Var) -> Var:
        """The output, hooked (eager hooks only an output that requires grad)."""
        if not self.active or self.state is None:
            return output
        if not isinstance(output, TensorVar):
            raise Unsupported(
                f"backward hooks on a {type(self.module).__name__} whose output is not one tensor"
            )
        if not output.meta.requires_grad:
            return output
        return self._hooked(output, self.state.on_output, "output")

    def _state(
        self, n_inputs: int, input_index: int | None, zeros: dict[int, TensorMeta]
    ) -> ModuleBackward:
        layout = tuple((position, meta.shape, meta.dtype) for position, meta in zeros.items())
        key = (id(self.module), self._site, n_inputs, input_index, layout)
        state = _STATES.get(key)
        if state is None or state._module() is not self.module:
            state = ModuleBackward(self.module, n_inputs, input_index, zeros)
            _STATES[key] = state
            weakref.finalize(self.module, _STATES.pop, key, None)
        return state

    def _hooked(self, tensor: TensorVar, callback: Any, side: str) -> TensorVar:
        hook_ops.forward_op()
        slot = hook_ops.slot_for((id(callback.__self__), side), callback)
        node = self.tracer.builder.call(HOOK_OP, tensor.node, slot, meta=tensor.meta)
        return TensorVar(node, tensor.python_type)
