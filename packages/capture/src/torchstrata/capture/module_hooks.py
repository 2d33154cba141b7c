"""Forward hooks of a module call, inlined around its ``forward`` as
``nn.Module._call_impl`` runs them.

Pre-hooks (global ones first, then the module's, each dict in its order) get
``(module, args)`` or, registered ``with_kwargs``, ``(module, args, kwargs)``; a result
that is not None replaces the arguments (a non-tuple is wrapped in one; a ``with_kwargs``
hook must return ``(args, kwargs)``). Post-hooks get ``(module, args, result)`` or
``(module, args, kwargs, result)``; a result that is not None replaces the result.

Guards: the keys of every non-empty hook dict (:func:`.module_calls.guard_module_call`),
each hook by identity (and its code) as it is read here, and the keys of the
``*_with_kwargs`` dicts that decide how each is called. A hook added, removed or
replaced later fails one of them and the call is traced again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from torchstrata.capture.backward_hooks import BackwardHookSite
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import ConstVar, DictVar, ObjectVar, SequenceVar, Var, describe
from torchstrata.core import GuardKind

#: ``call(fn, args, kwargs)``: the capture-time call.
Call = Callable[[Var, list[Var], Mapping[str, Var]], Var]

_GLOBAL_SOURCE = "torch.nn.modules.module"


def has_forward_hooks(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` runs a forward hook of its own or a global one."""
    hooks = torch.nn.modules.module
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or hooks._global_forward_hooks
        or hooks._global_forward_pre_hooks
    )


def call_with_hooks(
    tracer: Tracer,
    call: Call,
    module: ObjectVar,
    forward: Var,
    args: Sequence[Var],
    kwargs: Mapping[str, Var],
    backward: BackwardHookSite | None = None,
) -> Var:
    """``module(*args, **kwargs)`` with its forward hooks (see the module docstring) and
    the hook nodes of its backward hooks, where ``_call_impl`` sets them up: on the
    arguments after the pre-hooks, on the result after the forward hooks."""
    real: torch.nn.Module = module.value
    hooks = torch.nn.modules.module
    source = module.source
    args_var = SequenceVar(list(args))
    kwargs_var = DictVar(dict(kwargs))
    pre_kwargs = _keys(
        tracer, real._forward_pre_hooks_with_kwargs, source, "_forward_pre_hooks_with_kwargs"
    )
    for hook, hook_id in _hooks(tracer, real, source, "_forward_pre_hooks"):
        if hook_id in pre_kwargs:
            result = call(hook, [module, args_var, kwargs_var], {})
            if _is_none(result):
                continue
            if not (isinstance(result, SequenceVar) and len(result.items) == 2):
                raise Unsupported("a with_kwargs forward pre-hook must return (args, kwargs)")
            new_args, new_kwargs = result.items
            if not isinstance(new_args, SequenceVar) or not isinstance(new_kwargs, DictVar):
                raise Unsupported(f"a forward pre-hook returned {describe(new_args)} arguments")
            args_var, kwargs_var = new_args, new_kwargs
        else:
            result = call(hook, [module, args_var], {})
            if _is_none(result):
                continue
            is_tuple = isinstance(result, SequenceVar) and not result.is_list
            args_var = result if is_tuple else SequenceVar([result])  # type: ignore[assignment]
    if backward is not None:
        args_var = backward.wrap_inputs(args_var)
    output = call(forward, list(args_var.items), {str(k): v for k, v in kwargs_var.items.items()})
    post_kwargs = _keys(
        tracer, real._forward_hooks_with_kwargs, source, "_forward_hooks_with_kwargs"
    )
    post_kwargs |= _keys(
        tracer,
        hooks._global_forward_hooks_with_kwargs,
        _GLOBAL_SOURCE,
        "_global_forward_hooks_with_kwargs",
    )
    for hook, hook_id in _hooks(tracer, real, source, "_forward_hooks"):
        if hook_id in post_kwargs:
            result = call(hook, [module, args_var, kwargs_var, output], {})
        else:
            result = call(hook, [module, args_var, output], {})
        if not _is_none(result):
            output = result
    if backward is not None:
        output = backward.wrap_output(output)
    return output


def _is_none(var: Var) -> bool:
    return isinstance(var, ConstVar) and var.value is None


def _keys(tracer: Tracer, registered: Any, owner: str | None, name: str) -> set[Any]:
    """The keys of a ``*_with_kwargs`` dict, guarded."""
    if owner is not None:
        source = f"{owner}.{name}" if owner == _GLOBAL_SOURCE else f"{owner}.__dict__[{name!r}]"
        tracer.guard(GuardKind.CONSTANT_MATCH, f"tuple({source}.keys())", tuple(registered))
    return set(registered)


def _hooks(
    tracer: Tracer, module: torch.nn.Module, source: str | None, name: str
) -> list[tuple[Var, Any]]:
    """The global hooks then the module's of dict ``name``, each read by its source."""
    found = []
    hooks = torch.nn.modules.module
    for owner, owner_source, dict_name in (
        (hooks, _GLOBAL_SOURCE, f"_global{name}"),
        (module, source, name),
    ):
        registered = getattr(owner, dict_name)
        if owner_source is None:
            dict_source = None
        elif owner is hooks:
            dict_source = f"{owner_source}.{dict_name}"
        else:
            dict_source = f"{owner_source}.__dict__[{dict_name!r}]"
        for hook_id, hook in registered.items():
            hook_source = f"{dict_source}[{hook_id!r}]" if dict_source else None
            found.append((tracer.wrap(hook, hook_source), hook_id))
    return found
