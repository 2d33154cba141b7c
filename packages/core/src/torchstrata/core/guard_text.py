"""Guards as a reader wants them: the source and the value it is checked against
(``L['x'].shape == (64, 128), ...``, ``L['self'].p == 0.1``), for logs and ``explain()``."""

from __future__ import annotations

import types
from typing import Any

from torchstrata.core.int_arguments import int_argument_source, is_negative_carrier_source
from torchstrata.core.meta import TensorMeta, TensorTraits
from torchstrata.core.results import Guard, GuardKind
from torchstrata.core.symbolic_guards import SizeCheck

_MAX_REPR = 80


def short_repr(value: Any) -> str:
    """A one-line ``repr`` of at most about 80 characters; modules, functions and classes
    by name."""
    if isinstance(value, types.ModuleType):
        return f"<module {value.__name__}>"
    if isinstance(value, type):
        return (
            value.__qualname__
            if value.__module__ == "builtins"
            else (f"{value.__module__}.{value.__qualname__}")
        )
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        name = getattr(value, "__qualname__", getattr(value, "__name__", "?"))
        return f"<function {name}>"
    text = " ".join(repr(value).split())
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def describe_tensor_meta(meta: TensorMeta) -> str:
    """``shape == (64, 128), stride == (128, 1), dtype == torch.float32, ...``."""
    return (
        f"shape == {tuple(meta.shape)}, stride == {tuple(meta.strides)}, "
        f"dtype == {meta.dtype}, device == {meta.device}, "
        f"requires_grad == {bool(meta.requires_grad)}"
    )


def describe_guard(guard: Guard) -> str:
    """``guard`` as the condition it checks, with its expected value, e.g.
    ``L['x']: Tensor, shape == (64, 128), ...`` or ``L['self'].p == 0.1``."""
    source, expected = guard.source, guard.expected
    kind = guard.kind
    check = size_check_of(guard)
    if check is not None:  # its source is the inline lookup of a layout key
        names = (int_argument_source(source) or source for source in check.sources)
        text = f"sizes of {', '.join(names)}"
    elif kind is GuardKind.TENSOR_MATCH and int_argument_source(source) is not None:
        sign = "a negative int, its magnitude" if is_negative_carrier_source(source) else "an int"
        text = f"{int_argument_source(source)}: {sign} as the size of its carrier (symbolic)"
    elif kind is GuardKind.TENSOR_MATCH:
        if isinstance(expected, TensorMeta):
            text = f"{source}: Tensor, {describe_tensor_meta(expected)}"
        elif isinstance(expected, TensorTraits):  # sizes: the entry's size check
            text = (
                f"{source}: Tensor, dtype == {expected.dtype}, device == {expected.device}, "
                f"requires_grad == {expected.requires_grad}"
            )
        else:
            text = f"{source}: a Tensor"
    elif kind is GuardKind.CONSTANT_MATCH:
        same = "is" if expected is None or isinstance(expected, bool) else "=="
        text = f"{source} {same} {short_repr(expected)}"
    elif kind is GuardKind.ID_MATCH:
        referent = guard.referent
        if referent is not None and id(referent) == expected:
            text = f"{source} is {short_repr(referent)}"
        else:
            text = f"id({source}) == {expected}"
    elif kind is GuardKind.TYPE_MATCH:
        text = f"type({source}) is {short_repr(expected)}"
    elif kind is GuardKind.ABSENT_KEY:
        text = f"{expected!r} not in {source}"
    else:
        text = f"{kind.value}: {source} {short_repr(expected)}"
    return f"{text}  # {guard.description}" if guard.description else text


def size_check_of(guard: Guard) -> SizeCheck | None:
    """The :class:`SizeCheck` a symbolic entry's size guard holds, or None."""
    for _, cell in guard.cells:
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(contents, SizeCheck):
            return contents
    return None
