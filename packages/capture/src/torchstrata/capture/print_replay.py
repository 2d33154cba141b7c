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


def print_now(
    values: Sequence[Any], options: Mapping[str, Any], grad_fns: Mapping[int, str]
) -> None:
    """Print ``values`` to ``sys.stdout`` as eager printed them: a tensor at a position of
    ``grad_fns`` shows that ``grad_fn`` name, eager's, in place of its own."""
    shown: list[Any] = list(values)
    for position, name in grad_fns.items():
        tensor = shown[position]
        if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
            shown[position] = with_grad_fn(str(tensor), name)
    print(*shown, **options, file=sys.stdout)  # the stream of now (redirect_stdout)


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
