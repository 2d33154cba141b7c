"""Calling an ``nn.Module`` at capture time: what makes ``module(*args)`` run the
``forward`` that is traced, and the guards that keep it so.

``nn.Module.__call__`` runs ``module.forward`` directly when the module has no hooks of
its own and no global module hook is registered. The capture refuses hooks and an
overridden ``__call__`` (:func:`check_module_call`); for a module read from a source
``S`` it guards, on every call of the compiled code:

* ``type(S)`` (``TYPE_MATCH``): the class whose ``forward`` was traced;
* no ``forward`` in ``S.__dict__`` (``ABSENT_KEY``): one assigned to the instance
  later would shadow the class's. It joins the module's other member-shadowing guards,
  which the runtime checks as one ``isdisjoint`` of the instance dict;
* each of its four hook dicts empty, one guard each, read from that instance dict:
  ``S.__dict__['_forward_hooks'] or None`` is None (a dict subscript and a jump, then
  an ``is``). The runtime reads a source's longest prefix that it has read already
  from its variable, so the module and its dict are fetched once. One
  ``bool(S._forward_hooks or S._forward_pre_hooks or ...)`` would walk the access path
  of ``S`` four times (on a module tree, eight dict and attribute reads each);
* the class's ``forward`` by identity (and its ``__code__``, see
  :meth:`Tracer.guard_code`), read through the first instance of the class called in
  the capture (``S1.__class__.forward``): every other instance's type guard says it
  runs that same function, so a class is checked once however many instances it has.

Once per capture it guards that the four global hook dicts of
``torch.nn.modules.module`` are empty (``register_module_forward_hook`` and friends),
reading that module once (``torch`` is a name of every guard function).
"""

from __future__ import annotations

import torch

from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import ObjectVar, Var
from torchstrata.core import GuardKind

#: The dicts of a module's own hooks; ``_global`` + each name is the global one.
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
#: The module that holds the global hook dicts, as guard sources read it.
_HOOKS_MODULE_SOURCE = "torch.nn.modules.module"


def check_module_call(module: torch.nn.Module) -> None:
    """Raise :class:`Unsupported` unless calling ``module`` just runs its ``forward``."""
    hooks = torch.nn.modules.module
    if any(getattr(module, name) for name in HOOK_DICTS) or any(
        getattr(hooks, f"_global{name}") for name in HOOK_DICTS
    ):
        raise Unsupported(f"hooks on {type(module).__name__} are not supported yet")
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
    for name in HOOK_DICTS:
        hooks = f"{source}.__dict__[{name!r}]" if name in instance else f"{source}.{name}"
        tracer.guard(GuardKind.CONSTANT_MATCH, f"{hooks} or None", None, "module hooks")
    return tracer.wrap(forward, function_source)


def _guard_global_hooks(tracer: Tracer) -> None:
    hooks = torch.nn.modules.module
    tracer.guard(GuardKind.ID_MATCH, _HOOKS_MODULE_SOURCE, id(hooks), "the global hooks' module")
    for name in HOOK_DICTS:
        source = f"{_HOOKS_MODULE_SOURCE}._global{name} or None"
        tracer.guard(GuardKind.CONSTANT_MATCH, source, None, "global module hooks")
