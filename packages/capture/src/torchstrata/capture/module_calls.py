"""Calling an ``nn.Module`` at capture time: what makes ``module(*args)`` run the
``forward`` that is traced, and the guards that keep it so.

``nn.Module.__call__`` runs ``module.forward`` directly when the module has no hooks of
its own and no global module hook is registered; forward hooks (pre and post, global
ones first) are inlined around it by :mod:`.module_hooks`, full backward hooks as hook
nodes by :mod:`.backward_hooks`. The capture refuses global backward hooks and an
overridden ``__call__`` (:func:`check_module_call`); for a module read from
a source ``S`` it guards, on every call of the compiled code:

* ``type(S)`` (``TYPE_MATCH``): the class whose ``forward`` was traced;
* no ``forward`` in ``S.__dict__`` (``ABSENT_KEY``): one assigned to the instance
  later would shadow the class's. It joins the module's other member-shadowing guards,
  which the runtime checks as one test of the instance dict (``'forward' not in D and
  'weight' not in D ...``);
* its four hook dicts empty (those that are not: their keys, see below), as ONE guard
  over that instance dict:
  ``S.__dict__['_forward_hooks'] or S.__dict__['_forward_pre_hooks'] or ... or None``
  is None (a dict subscript and a jump per dict, then one ``is``). The runtime reads
  every subexpression of a source that it has fetched already from its variable
  (``core/guard_sources.py``), so the module and its dict are fetched once, not once
  per hook dict;
* the class's ``forward`` by identity (and its ``__code__``, see
  :meth:`Tracer.guard_code`), read through the first instance of the class called in
  the capture (``S1.__class__.forward``): every other instance's type guard says it
  runs that same function, so a class is checked once however many instances it has.

Once per capture it guards, the same way in one guard, that the four global hook dicts
of ``torch.nn.modules.module`` are empty (``register_module_forward_hook`` and friends),
reading that module once (``torch`` is a name of every guard function).
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import ObjectVar, Var
from torchstrata.core import GuardKind

#: The dicts of a module's own hooks; ``_global`` + each name is the global one.
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
BACKWARD_HOOK_DICTS = HOOK_DICTS[2:]
#: The module that holds the global hook dicts, as guard sources read it.
_HOOKS_MODULE_SOURCE = "torch.nn.modules.module"


def check_module_call(module: torch.nn.Module) -> None:
    """Raise :class:`Unsupported` unless calling ``module`` runs its ``forward``, its
    forward hooks (inlined by :mod:`.module_hooks`) and its own backward hooks
    (:mod:`.backward_hooks`): global backward hooks are not traced."""
    hooks = torch.nn.modules.module
    if any(getattr(hooks, f"_global{name}") for name in BACKWARD_HOOK_DICTS):
        raise Unsupported(f"global module backward hooks (calling {type(module).__name__})")
    if type(module).__call__ is not torch.nn.Module.__call__:
        raise Unsupported(f"{type(module).__name__} overrides __call__, which is not supported")


def guard_module_call(tracer: Tracer, module: torch.nn.Module, source: str | None) -> Var:
    """Guard a call of ``module`` (read from ``source``; None: unguarded) and return the
    variable of the ``forward`` function it runs (see the module docstring)."""
    forward = type(module).forward
    _guard_global_hooks(tracer)
    if source is None:
        return ObjectVar(forward)
    tracer.guard(GuardKind.TYPE_MATCH, source, type(module))
    instance = vars(module)
    if "forward" in instance:  # the class's forward, bound on the instance (checked by the caller)
        function_source = f"{source}.forward.__func__"
    else:
        tracer.guard(GuardKind.ABSENT_KEY, f"{source}.__dict__", "forward")
        function_source = tracer.forward_sources.setdefault(
            type(module), f"{source}.__class__.forward"
        )
    hooks = {
        f"{source}.__dict__[{name!r}]" if name in instance else f"{source}.{name}": getattr(
            module, name
        )
        for name in HOOK_DICTS
    }
    _guard_hook_dicts(tracer, hooks, "module hooks")
    return tracer.wrap(forward, function_source)


def _guard_hook_dicts(tracer: Tracer, dicts: dict[str, dict[Any, Any]], what: str) -> None:
    """Hook dicts by source: the empty ones (all four, when no hook is registered) in one
    guard; of each other, its keys (:mod:`.module_hooks` guards each hook by identity
    where it reads it, and which of them take keyword arguments)."""
    empty = []
    for source, registered in dicts.items():
        if registered:
            tracer.guard(
                GuardKind.CONSTANT_MATCH, f"tuple({source}.keys())", tuple(registered), what
            )
        else:
            empty.append(source)
    if empty:
        tracer.guard(GuardKind.CONSTANT_MATCH, _no_hooks_source(empty), None, what)


def _no_hooks_source(hook_dicts: list[str]) -> str:
    """One source over the sources of hook dicts: ``A or B or ... or None``, None exactly
    when every dict is empty (an ``or`` stops at the first non-empty one)."""
    return " or ".join([*hook_dicts, "None"])


def _guard_global_hooks(tracer: Tracer) -> None:
    hooks = torch.nn.modules.module
    tracer.guard_identity(_HOOKS_MODULE_SOURCE, hooks, "the global hooks' module")
    sources = {
        f"{_HOOKS_MODULE_SOURCE}._global{name}": getattr(hooks, f"_global{name}")
        for name in HOOK_DICTS
    }
    _guard_hook_dicts(tracer, sources, "global module hooks")
