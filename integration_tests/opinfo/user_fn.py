"""An OpInfo sample as the Python function a user would write: ``fn(x0, x1, ...)``.

The function's source calls the OpInfo's ``op`` directly, e.g.
``def fn(x0, x1): return target(x0, 0.5, [x1, x0], dim=-1)``: tensors (also inside lists
and tuples) are parameters, plain literals (int, bool, finite float, str, None) are
written into the source, every other value (dtypes, ``torch.Size``, ``inf``, callables)
is a closure constant. That function is what capture sees.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Callable
from typing import Any

import torch

_LITERALS = (bool, int, str, type(None))


class _Source:
    """Collects parameters and closure constants while writing argument expressions."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.constants: dict[str, Any] = {}
        self._names: dict[int, str] = {}

    def expr(self, value: Any) -> str:
        """The Python expression for ``value`` inside the call."""
        if isinstance(value, torch.Tensor):
            if id(value) not in self._names:
                self._names[id(value)] = f"x{len(self.tensors)}"
                self.tensors.append(value)
            return self._names[id(value)]
        if type(value) is list:
            return "[" + ", ".join(self.expr(v) for v in value) + "]"
        if type(value) is tuple:
            inner = ", ".join(self.expr(v) for v in value)
            return f"({inner},)" if value else "()"
        if type(value) is dict and all(isinstance(k, str) for k in value):
            return "{" + ", ".join(f"{k!r}: {self.expr(v)}" for k, v in value.items()) + "}"
        if type(value) in _LITERALS or (type(value) is float and math.isfinite(value)):
            return repr(value)
        name = f"c{len(self.constants)}"
        self.constants[name] = value
        return name


def _identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return f"opinfo_{name}"


def user_function(
    target: Callable[..., Any], sample: Any, name: str = "op"
) -> tuple[Callable[..., Any], list[torch.Tensor], str]:
    """``(fn, tensors, source)``: ``fn(*tensors)`` calls ``target`` on ``sample``'s arguments.

    :param target: the OpInfo's ``op``.
    :param sample: a ``SampleInput`` (``input``, ``args``, ``kwargs``).
    :param name: the OpInfo's name (names the generated function).
    """
    source = _Source()
    parts = [source.expr(sample.input), *(source.expr(a) for a in sample.args)]
    extra: dict[str, Any] = {}
    for key, value in sample.kwargs.items():
        if key.isidentifier() and not keyword.iskeyword(key):
            parts.append(f"{key}={source.expr(value)}")
        else:
            extra[key] = value
    if extra:
        parts.append(f"**{source.expr(extra)}")
    params = ", ".join(f"x{i}" for i in range(len(source.tensors)))
    fn_name = _identifier(name)
    free = ", ".join(["target", *source.constants])
    text = (
        f"def make({free}):\n"
        f"    def {fn_name}({params}):\n"
        f"        return target({', '.join(parts)})\n"
        f"    return {fn_name}\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(text, f"<opinfo {name}>", "exec"), namespace)
    fn = namespace["make"](target, *source.constants.values())
    return fn, source.tensors, text
