"""The program of a capture: fetch graph inputs, run the compiled graph, rebuild the result.

Inputs are fetched by their guard sources (``L['x']``, ``L['self'].fc1.weight``),
compiled once into one function over ``L`` and ``G``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    ObjectVar,
    SequenceVar,
    TensorVar,
    Var,
    describe,
)
from torchstrata.core import Node, Program


def entry_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable whose frame is captured: an ``nn.Module`` means its bound ``forward``."""
    if isinstance(fn, torch.nn.Module):
        return fn.forward
    return fn


@functools.lru_cache(maxsize=512)
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


@functools.lru_cache(maxsize=512)
def _positional_names(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """Parameter names when every parameter is plain positional-or-keyword, else None."""
    parameters = _signature(fn).parameters.values()
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return None
    return tuple(p.name for p in parameters)


def frame_locals(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``L`` for a call of ``fn``: arguments by parameter name with defaults applied, the
    bound ``self`` of a method, and the values of the function's free (closure) variables.

    Raises ``TypeError`` when the arguments do not match the signature.
    """
    fn = entry_function(fn)
    bound_self = fn.__self__ if inspect.ismethod(fn) else None
    plain = fn.__func__ if inspect.ismethod(fn) else fn
    call_args = (bound_self, *args) if bound_self is not None else tuple(args)
    names = _positional_names(plain)
    if names is not None and not kwargs and len(call_args) == len(names):
        frame = dict(zip(names, call_args))  # the common case, without Signature.bind
    else:
        bound = _signature(plain).bind(*call_args, **kwargs)
        bound.apply_defaults()
        frame = dict(bound.arguments)
    if bound_self is not None:
        frame.setdefault("self", bound_self)
    code = getattr(plain, "__code__", None)
    for name, cell in zip(
        code.co_freevars if code else (), getattr(plain, "__closure__", None) or ()
    ):
        try:
            frame.setdefault(name, cell.cell_contents)
        except ValueError:  # an empty cell: the name is not bound yet
            continue
    return frame


@attrs.frozen
class OutputSpec:
    """How to rebuild one part of the return value.

    ``kind`` is ``tensor`` (``value`` indexes the graph outputs), ``const``, ``source``
    (re-read ``value`` over L and G at call time), ``tuple``, ``list`` or ``dict``
    (``children``, with ``keys`` for dicts).
    """

    kind: str
    value: Any = None
    children: tuple[OutputSpec, ...] = ()
    keys: tuple[Any, ...] = ()


def flatten_result(var: Var) -> tuple[OutputSpec, list[Node]]:
    """The output spec of a returned variable and the graph outputs it reads."""
    outputs: list[Node] = []

    def visit(item: Var) -> OutputSpec:
        if isinstance(item, TensorVar):
            for index, node in enumerate(outputs):
                if node is item.node:
                    return OutputSpec("tensor", index)
            outputs.append(item.node)
            return OutputSpec("tensor", len(outputs) - 1)
        if isinstance(item, ConstVar):
            return OutputSpec("const", item.value)
        if isinstance(item, SequenceVar):
            kind = "list" if item.is_list else "tuple"
            return OutputSpec(kind, children=tuple(visit(child) for child in item.items))
        if isinstance(item, DictVar):
            return OutputSpec(
                "dict",
                children=tuple(visit(v) for v in item.items.values()),
                keys=tuple(item.items),
            )
        if isinstance(item, ObjectVar):
            return (
                OutputSpec("source", item.source)
                if item.source
                else OutputSpec("const", item.value)
            )
        raise Unsupported(f"returning {describe(item)} is not supported")

    return visit(var), outputs


def rebuild(
    spec: OutputSpec, outputs: Sequence[Any], frame: dict[str, Any], globals_: dict[str, Any]
) -> Any:
    """The return value described by ``spec``, from the compiled graph's outputs."""
    if spec.kind == "tensor":
        return outputs[spec.value]
    if spec.kind == "const":
        return spec.value
    if spec.kind == "source":
        return eval(spec.value, {"L": frame, "G": globals_})
    children = [rebuild(child, outputs, frame, globals_) for child in spec.children]
    if spec.kind == "tuple":
        return tuple(children)
    if spec.kind == "list":
        return children
    return dict(zip(spec.keys, children))


def make_program(
    fn: Callable[..., Any], globals_: dict[str, Any], input_sources: Sequence[str], spec: OutputSpec
) -> Program:
    """The :data:`~torchstrata.core.Program` of a single-graph capture of ``fn``."""
    text = "lambda L, G: (" + "".join(f"{source}, " for source in input_sources) + ")"
    fetch_inputs = eval(compile(text, "<torchstrata capture inputs>", "eval"), {})

    def program(
        compiled_graphs: Sequence[Callable[..., Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        frame = frame_locals(fn, args, kwargs)
        outputs = compiled_graphs[0](*fetch_inputs(frame, globals_))
        return rebuild(spec, outputs, frame, globals_)

    program.input_sources = tuple(input_sources)  # type: ignore[attr-defined]
    return program
