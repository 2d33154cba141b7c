"""Op references: what a node calls, at each level of the IR.

An :class:`OpRef` names its target by a string so that graphs print and parse back:

* ``torch`` level: the dotted path of a public torch callable (``torch.add``,
  ``torch.nn.functional.gelu``, ``torch.Tensor.softmax``, ``operator.add``).
* ``aten`` level: an ATen overload, ``aten.add.Tensor``.
* ``prims`` level: a torchstrata primitive, ``prims.add``.
* ``builtin``: structural ops valid at every level (``builtin.getitem``).
"""

from __future__ import annotations

import enum
import functools
import importlib
import math
import operator
from collections.abc import Callable
from typing import Any

import attrs
import torch

from torchstrata.core.prims import get_prim


class Level(enum.Enum):
    """The level a graph is at; each stage lowers one level to the next."""

    TORCH = "torch"
    ATEN = "aten"
    PRIMS = "prims"


class OpKind(enum.Enum):
    """Which namespace an :class:`OpRef` lives in."""

    TORCH = "torch"
    ATEN = "aten"
    PRIMS = "prims"
    BUILTIN = "builtin"


BUILTIN_OPS = frozenset({"getitem"})


@attrs.frozen
class OpRef:
    """A reference to the callable a node applies.

    ``name`` is the printed form: ``aten.add.Tensor``, ``prims.add``,
    ``builtin.getitem`` or a torch dotted path.
    """

    kind: OpKind
    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def short_name(self) -> str:
        """A readable base name for values produced by this op (``add``, ``gelu``)."""
        parts = self.name.split(".")
        if self.kind is OpKind.ATEN:
            base = parts[1]
        else:
            base = parts[-1]
        return base.strip("_") or "v"

    def resolve(self) -> Callable[..., Any]:
        """The Python callable this op refers to (for prims, the reference implementation)."""
        return _resolve(self)

    @property
    def is_view(self) -> bool:
        """True for an ATen overload that returns a view of an argument (its schema says
        so); False for every other op."""
        if self.kind is not OpKind.ATEN:
            return False
        target = self.resolve()
        return isinstance(target, torch._ops.OpOverload) and target.is_view


def aten(qualified: str) -> OpRef:
    """``aten("add.Tensor")`` or ``aten("aten.add.Tensor")``: an ATen overload reference."""
    name = qualified if qualified.startswith("aten.") else f"aten.{qualified}"
    if name.count(".") == 1:
        name += ".default"
    return OpRef(OpKind.ATEN, name)


def aten_from_overload(overload: torch._ops.OpOverload) -> OpRef:
    """The :class:`OpRef` of a ``torch.ops.aten.*`` overload object."""
    namespace, rest = overload.name().split("::")
    if namespace != "aten":
        return OpRef(OpKind.TORCH, f"torch.ops.{namespace}.{rest.replace('.', '.')}")
    packet, _, overload_name = rest.partition(".")
    return OpRef(OpKind.ATEN, f"aten.{packet}.{overload_name or 'default'}")


def prim(name: str) -> OpRef:
    """``prim("add")``: a reference to a torchstrata primitive."""
    return OpRef(OpKind.PRIMS, name if name.startswith("prims.") else f"prims.{name}")


GETITEM = OpRef(OpKind.BUILTIN, "builtin.getitem")


def parse_op(text: str) -> OpRef:
    """Turn the printed form of an op back into an :class:`OpRef`."""
    if text.startswith("aten."):
        return OpRef(OpKind.ATEN, text)
    if text.startswith("prims."):
        return OpRef(OpKind.PRIMS, text)
    if text.startswith("builtin."):
        if text.removeprefix("builtin.") not in BUILTIN_OPS:
            raise ValueError(f"unknown builtin op {text!r}")
        return OpRef(OpKind.BUILTIN, text)
    return OpRef(OpKind.TORCH, text)


# Modules whose public callables are torch-level ops, searched in this order when
# naming a callable. The first name found wins, so ``torch.add`` beats ``torch.Tensor.add``.
_TORCH_NAMESPACES: tuple[tuple[str, Any], ...] = (
    ("torch", torch),
    ("torch.nn.functional", torch.nn.functional),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
    ("torch.Tensor", torch.Tensor),
    ("operator", operator),
    ("math", math),
)


# Private builtins that Dynamo's graphs call in place of a public wrapper with the same
# signature and meaning, named by that wrapper: Dynamo traces through ``F.pad`` (a Python
# function) to the builtin ``torch._C._nn.pad`` it calls. Only exact equivalents belong
# here: most other ``torch._C._nn`` builtins take arguments unlike their ``F`` namesakes'.
_PRIVATE_ALIASES: tuple[tuple[str, str], ...] = (("torch._C._nn.pad", "torch.nn.functional.pad"),)


@functools.cache
def _torch_callable_index() -> dict[int, tuple[str, Any]]:
    index: dict[int, tuple[str, Any]] = {}
    for prefix, namespace in _TORCH_NAMESPACES:
        for attr in dir(namespace):
            if attr.startswith("__"):
                continue
            try:
                value = getattr(namespace, attr)
            except Exception:  # noqa: BLE001 - some torch attributes raise on access
                continue
            if callable(value) and not isinstance(value, type):
                index.setdefault(id(value), (f"{prefix}.{attr}", value))
    for private, public in _PRIVATE_ALIASES:
        try:
            value = _resolve_dotted(private)
        except (AttributeError, LookupError):  # not in this torch: nothing to name
            continue
        index.setdefault(id(value), (public, value))
    return index


def torch_op(fn: Callable[..., Any]) -> OpRef | None:
    """The torch-level :class:`OpRef` of a public torch/operator/math callable, or None.

    ``torch_op(torch.nn.functional.gelu)`` gives ``OpRef(TORCH, "torch.nn.functional.gelu")``.
    Bound tensor methods are not accepted; pass ``torch.Tensor.<name>`` instead.
    """
    entry = _torch_callable_index().get(id(fn))
    if entry is None or entry[1] is not fn:
        return None
    return OpRef(OpKind.TORCH, entry[0])


@functools.cache
def _resolve_dotted(path: str) -> Any:
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            value: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        for attr in parts[split:]:
            value = getattr(value, attr)
        return value
    raise LookupError(f"cannot resolve {path!r} to a Python object")


def _resolve(op: OpRef) -> Callable[..., Any]:
    if op.kind is OpKind.ATEN:
        _, packet, overload = op.name.split(".")
        try:
            return getattr(getattr(torch.ops.aten, packet), overload)
        except AttributeError:
            raise LookupError(f"no ATen overload {op.name}") from None
    if op.kind is OpKind.PRIMS:
        return get_prim(op.name).impl
    if op.kind is OpKind.BUILTIN:
        return operator.getitem
    target = _resolve_dotted(op.name)
    if not callable(target):
        raise LookupError(f"{op.name} is not callable")
    return target
