"""Guards compiled into one generated Python function, and the frame they read.

A guard's ``source`` is a Python expression over ``L`` (the call's arguments bound by
parameter name, defaults included, plus ``self`` for a bound method) and ``G`` (the
function's globals). All guards of one cache entry become ONE function, generated as
source text and compiled once; each source expression is evaluated once per check.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import Guard, GuardKind, TensorMeta

#: Checks a frame: ``check(L, G)`` is -1 when every guard holds, else the failing index.
GuardCheck = Callable[[dict[str, Any], dict[str, Any]], int]


@attrs.frozen
class GuardFailure:
    """The first guard that did not hold for a call."""

    guard: Guard

    def __str__(self) -> str:
        text = f"{self.guard.kind.value} on {self.guard.source}"
        expected = self.guard.expected
        if self.guard.kind is GuardKind.TENSOR_MATCH and isinstance(expected, TensorMeta):
            text += f" (expected {_describe_meta(expected)})"
        elif self.guard.kind is not GuardKind.ID_MATCH:
            text += f" (expected {expected!r})"
        if self.guard.description:
            text += f": {self.guard.description}"
        return text


def _describe_meta(meta: TensorMeta) -> str:
    grad = ", requires_grad" if meta.requires_grad else ""
    return f"{meta.dtype} {list(meta.shape)} strides {list(meta.strides)} on {meta.device}{grad}"


def _unwrap(fn: Callable[..., Any]) -> tuple[Any, Callable[..., Any]]:
    """(bound ``self`` or None, the plain function)."""
    if inspect.ismethod(fn):
        return fn.__self__, fn.__func__
    return None, fn


@functools.lru_cache(maxsize=256)
def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def bind_frame(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``L`` for a call: arguments by parameter name (defaults applied; ``self`` for a
    bound method). Raises ``TypeError`` when the call does not match the signature."""
    bound_self, plain = _unwrap(fn)
    signature = _signature(plain)
    if signature is None:
        frame = {f"arg{index}": value for index, value in enumerate(args)}
        frame.update(kwargs)
        return frame
    call_args = (bound_self, *args) if bound_self is not None else args
    bound = signature.bind(*call_args, **kwargs)
    bound.apply_defaults()
    frame = dict(bound.arguments)
    if bound_self is not None and "self" not in frame:
        frame["self"] = bound_self
    return frame


class FrameBinder:
    """:func:`bind_frame` for one function, with a fast path for the common call: only
    positional-or-keyword parameters, called positionally."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.bound_self, plain = _unwrap(fn)
        signature = _signature(plain)
        parameters = list(signature.parameters.values()) if signature is not None else []
        simple = signature is not None and all(
            p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters
        )
        self.names: tuple[str, ...] | None = tuple(p.name for p in parameters) if simple else None
        self.offset = 1 if self.bound_self is not None else 0

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        names = self.names
        if names is not None and not kwargs and len(args) + self.offset == len(names):
            if self.offset:
                frame = dict(zip(names[1:], args))
                frame[names[0]] = self.bound_self
                if names[0] != "self":
                    frame["self"] = self.bound_self
                return frame
            return dict(zip(names, args))
        return bind_frame(self.fn, args, kwargs)


def frame_globals(fn: Callable[..., Any]) -> dict[str, Any]:
    """``G`` for a call: the function's module globals (empty for builtins)."""
    _, plain = _unwrap(fn)
    return getattr(plain, "__globals__", {})


class _SourceWriter:
    """Accumulates the generated check function and the constants it closes over."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.value_of_source: dict[str, str] = {}

    def constant(self, value: Any) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def fetch(self, source: str, index: int) -> str:
        """Emit code that evaluates ``source`` once; a failing expression fails guard ``index``."""
        if source in self.value_of_source:
            return self.value_of_source[source]
        compile(source, "<guard>", "eval")  # a malformed source is the capture stage's bug
        var = f"_v{len(self.value_of_source)}"
        self.value_of_source[source] = var
        self.lines += [
            "    try:",
            f"        {var} = {self._reuse(source)}",
            "    except Exception:",
            f"        return {index}",
        ]
        return var

    def _reuse(self, source: str) -> str:
        """``source`` with its longest already-fetched prefix read from that variable
        (``L['self'][0].weight`` after ``L['self'][0]``: one container lookup, not two)."""
        for end in range(len(source) - 1, 0, -1):
            if source[end] in ".[" and source[:end] in self.value_of_source:
                return self.value_of_source[source[:end]] + source[end:]
        return source

    def check(self, condition: str, index: int) -> None:
        self.lines += [f"    if not ({condition}):", f"        return {index}"]


def _condition(writer: _SourceWriter, guard: Guard, var: str) -> str:
    kind, expected = guard.kind, guard.expected
    if kind is GuardKind.TENSOR_MATCH:
        if not isinstance(expected, TensorMeta):
            return f"isinstance({var}, _Tensor)"
        shape = writer.constant(torch.Size(expected.shape))
        strides = writer.constant(tuple(expected.strides))
        dtype = writer.constant(expected.dtype)
        device = writer.constant(expected.device)
        grad = writer.constant(bool(expected.requires_grad))
        return (
            f"isinstance({var}, _Tensor) and {var}.shape == {shape} and {var}.dtype is {dtype}"
            f" and {var}.stride() == {strides} and {var}.device == {device}"
            f" and {var}.requires_grad is {grad}"
        )
    if kind is GuardKind.CONSTANT_MATCH:
        if expected is None or isinstance(expected, bool):
            return f"{var} is {writer.constant(expected)}"
        value_type = writer.constant(type(expected))
        return f"type({var}) is {value_type} and {var} == {writer.constant(expected)}"
    if kind is GuardKind.ID_MATCH:
        return f"id({var}) == {writer.constant(expected)}"
    if kind is GuardKind.TYPE_MATCH:
        return f"type({var}) is {writer.constant(expected)}"
    raise ValueError(f"unknown guard kind {kind!r}")


class GuardSet:
    """A cache entry's guards, compiled into one fast check.

    :param guards: the guards to check, in order (the first failing one is reported).
    """

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = tuple(guards)
        writer = _SourceWriter()
        writer.lines.append("def check_guards(L, G):")
        for index, guard in enumerate(self.guards):
            var = writer.fetch(guard.source, index)
            writer.check(_condition(writer, guard, var), index)
        writer.lines.append("    return -1")
        self.source = "\n".join(writer.lines) + "\n"
        namespace: dict[str, Any] = {"_Tensor": torch.Tensor, "torch": torch, **writer.constants}
        exec(compile(self.source, "<torchstrata guards>", "exec"), namespace)
        self.check: GuardCheck = namespace["check_guards"]

    def failure(self, frame: dict[str, Any], globals_: dict[str, Any]) -> GuardFailure | None:
        """The first guard that fails for this frame, or None when all hold."""
        index = self.check(frame, globals_)
        return None if index < 0 else GuardFailure(self.guards[index])

    def __len__(self) -> int:
        return len(self.guards)
