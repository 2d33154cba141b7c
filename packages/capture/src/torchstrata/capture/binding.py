"""Binding call arguments to a code object's parameters, as CPython does on a call."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.variables import DictVar, SequenceVar, Var


def bind_arguments(
    code: object,
    args: Sequence[Var],
    kwargs: Mapping[str, Var],
    defaults: Sequence[Var] = (),
    kwdefaults: Mapping[str, Var] | None = None,
) -> dict[str, Var]:
    """Map parameter names of ``code`` to argument variables (defaults filled in).

    A call that does not match the signature is a graph break: eager raises the error.
    """
    name = code.co_name  # type: ignore[attr-defined]
    varnames: tuple[str, ...] = code.co_varnames  # type: ignore[attr-defined]
    flags: int = code.co_flags  # type: ignore[attr-defined]
    positional_count: int = code.co_argcount  # type: ignore[attr-defined]
    keyword_only_count: int = code.co_kwonlyargcount  # type: ignore[attr-defined]
    positional_only_count: int = code.co_posonlyargcount  # type: ignore[attr-defined]
    positional = varnames[:positional_count]
    keyword_only = varnames[positional_count : positional_count + keyword_only_count]
    next_index = positional_count + keyword_only_count
    varargs_name = varkw_name = None
    if flags & inspect.CO_VARARGS:
        varargs_name = varnames[next_index]
        next_index += 1
    if flags & inspect.CO_VARKEYWORDS:
        varkw_name = varnames[next_index]

    bound: dict[str, Var] = dict(zip(positional, args))
    extra_positional = list(args[positional_count:])
    if extra_positional and varargs_name is None:
        raise Unsupported(
            f"{name}() takes {positional_count} positional arguments but {len(args)} were given"
        )
    extra_keywords: dict[str, Var] = {}
    for key, value in kwargs.items():
        if key in positional[positional_only_count:] or key in keyword_only:
            if key in bound:
                raise Unsupported(f"{name}() got multiple values for argument {key!r}")
            bound[key] = value
        elif varkw_name is not None:
            extra_keywords[key] = value
        else:
            raise Unsupported(f"{name}() got an unexpected keyword argument {key!r}")
    first_default = positional_count - len(defaults)
    for index, parameter in enumerate(positional):
        if parameter not in bound and index >= first_default:
            bound[parameter] = defaults[index - first_default]
    for parameter in keyword_only:
        if parameter not in bound and kwdefaults and parameter in kwdefaults:
            bound[parameter] = kwdefaults[parameter]
    missing = [p for p in (*positional, *keyword_only) if p not in bound]
    if missing:
        raise Unsupported(f"{name}() missing required arguments: {', '.join(missing)}")
    if varargs_name is not None:
        bound[varargs_name] = SequenceVar(extra_positional)
    if varkw_name is not None:
        bound[varkw_name] = DictVar(extra_keywords)
    return bound
