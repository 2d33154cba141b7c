"""Binding a call with the defaults a function has now.

Capture and the runtime cache ``inspect.signature`` per function (it is slow to make),
but a ``Signature`` keeps the defaults of when it was made: after ``fn.__defaults__`` or
``fn.__kwdefaults__`` is rewritten, its ``apply_defaults`` would bind the old values and
a graph traced for them would pass its guards and run for the new ones.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any


def current_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    """The default of each parameter of the plain function ``fn`` as it is now (empty
    for other callables, and for wrappers whose signature is another function's)."""
    if type(fn) is not types.FunctionType or hasattr(fn, "__wrapped__"):
        return {}
    code = fn.__code__
    positional = code.co_varnames[: code.co_argcount]
    defaults = fn.__defaults__ or ()
    found = dict(zip(positional[len(positional) - len(defaults) :], defaults))
    found.update(fn.__kwdefaults__ or {})
    return found


def bind_call(
    signature: inspect.Signature,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """The arguments of a call of ``fn`` by parameter name, with ``fn``'s current
    defaults applied (``signature``: a possibly cached ``inspect.signature(fn)``).

    Raises ``TypeError`` when the call does not match the signature."""
    bound = signature.bind(*args, **kwargs)
    live = current_defaults(fn)
    for name in signature.parameters:
        if name not in bound.arguments and name in live:
            bound.arguments[name] = live[name]
    bound.apply_defaults()  # ``*args`` and ``**kwargs`` left empty
    return dict(bound.arguments)
