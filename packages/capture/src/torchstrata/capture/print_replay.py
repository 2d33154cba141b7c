"""The call of ``print`` that a logged ``print`` makes after the graph (:mod:`.printing`)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

_GRAD_FN = re.compile(r"grad_fn=<\w+>")


def print_now(
    values: Sequence[Any], options: Mapping[str, Any], grad_fns: Mapping[int, str]
) -> None:
    """Print ``values`` to ``sys.stdout`` as eager printed them: a tensor at a position of
    ``grad_fns`` shows that ``grad_fn`` name, eager's, in place of its own."""
    shown: list[Any] = list(values)
    for position, name in grad_fns.items():
        tensor = shown[position]
        if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
            shown[position] = _GRAD_FN.sub(f"grad_fn=<{name}>", str(tensor), count=1)
    print(*shown, **options, file=sys.stdout)  # the stream of now (redirect_stdout)
