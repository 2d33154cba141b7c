"""The frame guards read: ``L``, a call's arguments by parameter name, and ``G``, the
function's globals; and, for the common positional call, guard sources rewritten to read
the argument tuple itself, so a cache hit builds no ``L`` dict.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable
from typing import Any

from torchstrata.core import bind_call
from torchstrata.core.guard_sources import chain_ends

#: The argument tuple in a guard source rewritten by :meth:`FrameBinder.args_source`.
ARGS_NAME = "A"
#: The bound ``self`` in such a source (a constant of the generated check).
SELF_NAME = "_self"


def _unwrap(fn: Callable[..., Any]) -> tuple[Any, Callable[..., Any]]:
    """(bound ``self`` or None, the plain function)."""
    if inspect.ismethod(fn):
        return fn.__self__, fn.__func__
    return None, fn


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature (None when it has none), for the code it runs now."""
    return _signature_of_code(fn, getattr(fn, "__code__", None))


@functools.lru_cache(maxsize=256)
def _signature_of_code(fn: Callable[..., Any], code: Any) -> inspect.Signature | None:
    """Keyed by the code too: a function whose ``__code__`` is reassigned (a hot
    reload) takes the new code's parameters, and its old entry is never read again."""
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
    frame = bind_call(signature, plain, call_args, kwargs)  # the defaults of now
    if bound_self is not None and "self" not in frame:
        frame["self"] = bound_self
    return frame


class _ReadArguments(ast.NodeTransformer):
    """Replaces ``L['name']`` by the expression of that name in ``reads``."""

    def __init__(self, reads: dict[str, str]) -> None:
        self.reads = reads

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        key = node.slice
        if (
            isinstance(node.value, ast.Name)
            and node.value.id == "L"
            and isinstance(key, ast.Constant)
            and isinstance(key.value, str)
            and key.value in self.reads
        ):
            replacement = ast.parse(self.reads[key.value], mode="eval").body
            return ast.copy_location(replacement, node)
        return self.generic_visit(node)


class FrameBinder:
    """:func:`bind_frame` for one function, with a fast path for the common call: only
    positional-or-keyword parameters, called positionally.

    On that path (``len(args) == arity``, no keyword arguments) ``L`` holds exactly the
    parameters (and ``self``), each an element of ``args`` or the bound ``self``: guard
    sources can read them there directly (:meth:`args_source`).
    """

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
        #: The number of positional arguments of a fast-path call (None: there is none).
        self.arity: int | None = len(self.names) - self.offset if self.names is not None else None
        self._reads = self._argument_reads()

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

    def _argument_reads(self) -> dict[str, str]:
        """Each name of a fast-path ``L`` and the expression that reads its value, in
        the order ``__call__`` fills ``L`` (a later entry wins, as it does there)."""
        names = self.names
        if names is None:
            return {}
        if not self.offset:
            return {name: f"{ARGS_NAME}[{index}]" for index, name in enumerate(names)}
        reads = {name: f"{ARGS_NAME}[{index}]" for index, name in enumerate(names[1:])}
        reads[names[0]] = SELF_NAME
        reads["self"] = SELF_NAME
        return reads

    def args_source(self, source: str) -> str | None:
        """``source`` with each ``L['name']`` read from the arguments tuple ``A`` (or the
        bound ``self``) of a fast-path call; None when it reads ``L`` any other way (a
        missing name, a computed key), or already uses the names the rewrite introduces."""
        if self.arity is None:
            return None
        ends = chain_ends(source)
        if ends is not None:  # a read chain: its name, then reads of it
            head = source[: ends[0]]
            if head in (ARGS_NAME, SELF_NAME):
                return None
            if head != "L":
                return source
            first = source[ends[0] : ends[1]] if len(ends) > 1 else ""
            read = self._reads.get(first[2:-2]) if first.startswith("['") else None
            return None if read is None else read + source[ends[1] :]
        tree = ast.parse(source, mode="eval")
        if any(
            isinstance(node, ast.Name) and node.id in (ARGS_NAME, SELF_NAME)
            for node in ast.walk(tree)
        ):
            return None
        rewritten = _ReadArguments(self._reads).visit(tree)
        if any(isinstance(node, ast.Name) and node.id == "L" for node in ast.walk(rewritten)):
            return None
        return ast.unparse(rewritten)


def frame_globals(fn: Callable[..., Any]) -> dict[str, Any]:
    """``G`` for a call: the function's module globals (empty for builtins)."""
    _, plain = _unwrap(fn)
    return getattr(plain, "__globals__", {})
