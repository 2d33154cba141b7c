"""The call of ``print`` that a logged ``print`` makes after the graph (:mod:`.printing`)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

#: The last suffix of a tensor's repr when it has a grad_fn, with what separates it.
_GRAD_FN_SUFFIX = re.compile(r"(,\n *|, )grad_fn=<[^>]*>\)$")

#: Where a suffix that does not fit is indented to: under ``tensor(``'s contents.
_INDENT = len("tensor(")


def print_now(values: Sequence[Any], options: Mapping[str, Any], names: Mapping[int, str]) -> None:
    """Print ``values`` to ``sys.stdout`` as eager printed them: each tensor whose
    ``id()`` is in ``names`` (at the top or in lists, tuples and dicts) shows that
    ``grad_fn`` name, eager's, in place of its own."""
    shown = [_shown(value, names) for value in values]
    print(*shown, **options, file=sys.stdout)  # the stream of now (redirect_stdout)


class _Text:
    """Prints as ``text`` (str and repr): a tensor inside a printed container."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def _shown(value: Any, names: Mapping[int, str]) -> Any:
    if isinstance(value, torch.Tensor):
        name = names.get(id(value))
        if name is None or value.grad_fn is None:
            return value
        return _Text(with_grad_fn(str(value), name))
    if type(value) in (list, tuple):
        return type(value)(_shown(item, names) for item in value)
    if type(value) is dict:
        return {key: _shown(item, names) for key, item in value.items()}
    return value


def with_grad_fn(text: str, name: str) -> str:
    """A tensor's repr ``text`` with its grad_fn named ``name``, the suffix placed as
    ``torch._tensor_str`` places it (on a new line when the last line would pass the
    print options' line width)."""
    match = _GRAD_FN_SUFFIX.search(text)
    if match is None:
        return text
    head = text[: match.start()]
    suffix = f"grad_fn=<{name}>"
    last_line = len(head) - head.rfind("\n") + 1
    options = getattr(torch._tensor_str, "PRINT_OPTS", None)
    width = getattr(options, "linewidth", 80)
    separator = ",\n" + " " * _INDENT if last_line + len(suffix) + 2 > width else ", "
    return f"{head}{separator}{suffix})"
