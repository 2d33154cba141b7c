"""``module.parameters()``, ``named_modules()``, ``children()``... at capture time.

They are run for real (they only walk the module tree) and each member is read through
a source, so parameters and buffers become graph inputs fetched at call time:
``L['self'].fc1.weight``, ``getattr(L['self'].layers, '0').bias``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    IteratorVar,
    NotConstant,
    ObjectVar,
    SequenceVar,
    Var,
    python_value,
)
from torchstrata.core import GuardKind

Module = nn.Module

#: Member iterators -> (their named form, whether they yield (name, member) pairs).
MEMBER_METHODS: dict[Any, tuple[Any, bool]] = {
    Module.parameters: (Module.named_parameters, False),
    Module.named_parameters: (Module.named_parameters, True),
    Module.buffers: (Module.named_buffers, False),
    Module.named_buffers: (Module.named_buffers, True),
    Module.children: (Module.named_children, False),
    Module.named_children: (Module.named_children, True),
    Module.modules: (Module.named_modules, False),
    Module.named_modules: (Module.named_modules, True),
}


def member_source(owner: str, name: str) -> str:
    """The source of member ``name`` (dotted, as ``named_*`` give it) below ``owner``."""
    source = owner
    for part in filter(None, name.split(".")):
        source = f"{source}.{part}" if part.isidentifier() else f"getattr({source}, {part!r})"
    return source


def call_member_method(
    tracer: Tracer, method: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var | None:
    """``module.<method>(...)`` for :data:`MEMBER_METHODS`, or None when not applicable."""
    if not args or not isinstance(args[0], ObjectVar) or args[0].source is None:
        return None
    module = args[0].value
    if not isinstance(module, Module):
        return None
    named, with_names = MEMBER_METHODS[method]
    try:
        values = [python_value(arg) for arg in args[1:]]
        keywords = {key: python_value(value) for key, value in kwargs.items()}
    except NotConstant:
        raise Unsupported(f"{method.__name__}() with non-constant arguments") from None
    if named is not method:  # parameters(recurse=...) -> named_parameters(recurse=...)
        keywords = {**dict(zip(("recurse",), values)), **keywords} if values else keywords
        values = []
        if method is Module.modules:
            keywords = {}
    items: list[Var] = []
    names = []
    for name, member in named(module, *values, **keywords):
        wrapped = tracer.wrap(member, member_source(args[0].source, name))
        items.append(SequenceVar([ConstVar(name), wrapped]) if with_names else wrapped)
        names.append(name)
    # The loop saw these members: one added or removed later must recompile.
    listing = f"{args[0].source}.{named.__name__}(*{values!r}, **{keywords!r})"
    tracer.guard(GuardKind.CONSTANT_MATCH, f"tuple(n for n, _ in {listing})", tuple(names))
    return IteratorVar(items)
