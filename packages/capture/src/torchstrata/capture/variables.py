"""Symbolic values on the interpreter's stack and in its locals.

Tensors are graph nodes (:class:`TensorVar`); Python constants stay constants
(:class:`ConstVar`); containers hold other variables; everything else the interpreter
knows about (modules, functions, classes) is an :class:`ObjectVar` wrapping the real
object. ``source`` is the guard expression (over ``L`` and ``G``) a value was read
from, or None for values computed during capture.
"""

from __future__ import annotations

import collections
import types
from typing import Any

import attrs
import torch

from torchstrata.capture.result_types import make_tuple
from torchstrata.core import Node, TensorMeta


class Var:
    """Base class of every symbolic value."""

    source: str | None = None


class _Null:
    """The NULL that CPython pushes below a callable (``PUSH_NULL``, ``LOAD_GLOBAL`` bit)."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


@attrs.define(eq=False)
class ConstVar(Var):
    """A Python constant: int, float, bool, str, None, dtype, device, slice, range, ..."""

    value: Any
    source: str | None = None


@attrs.define(eq=False)
class SymbolicIntVar(ConstVar):
    """An ``int`` argument read as a symbol (decision 0330): ``value`` is its ``SymInt``;
    where the trace hands it back to Python (a graph break's state) it is read again from
    ``source``, the call's own int, instead of being specialised."""


@attrs.define(eq=False)
class TensorVar(Var):
    """A tensor produced by a graph node (inputs are nodes too). ``python_attributes``:
    Python attributes assigned to it in the trace (``y.tag = "name"``), set on the real
    tensor when it is rebuilt."""

    node: Node
    python_type: type = torch.Tensor
    source: str | None = None
    python_attributes: dict[str, Var] = attrs.Factory(dict)

    @property
    def meta(self) -> TensorMeta:
        """Shape, strides, dtype and device of this tensor."""
        return self.node.tensor_meta


@attrs.define(eq=False)
class SequenceVar(Var):
    """A tuple or list of variables. Lists are mutated in place, like Python lists.

    ``field_names`` are set for named tuples (those torch ops return: ``values``,
    ``indices``; and user ones, whose class is ``tuple_type``).
    """

    items: list[Var]
    is_list: bool = False
    field_names: tuple[str, ...] | None = None
    source: str | None = None
    tuple_type: type | None = None
    #: A ``collections.deque`` made in the trace (``is_list`` too; no ``maxlen``).
    is_deque: bool = False


@attrs.define(eq=False)
class DictVar(Var):
    """A dict (or ``collections.OrderedDict``: ``dict_type``) with constant keys and
    variable values."""

    items: dict[Any, Var]
    source: str | None = None
    dict_type: type = dict


@attrs.define(eq=False)
class ObjectVar(Var):
    """A real Python object used as is: module, function, class, ``nn.Module``, builtin.

    ``fresh`` objects were created during capture (a dataclass config): every call gets
    its own copy.
    """

    value: Any
    source: str | None = None
    fresh: bool = False


@attrs.define(eq=False)
class PartialVar(Var):
    """``functools.partial(function, *args, **kwargs)`` made during capture."""

    function: Var
    args: list[Var]
    kwargs: dict[str, Var]


@attrs.define(eq=False)
class TensorMethodVar(Var):
    """``tensor.name`` before it is called (``x.softmax``)."""

    tensor: TensorVar
    name: str


@attrs.define(eq=False)
class MethodVar(Var):
    """A method of a tuple, list or dict variable before it is called (``xs.append``)."""

    owner: Var
    name: str


@attrs.define(eq=False)
class Cell:
    """A closure cell. ``pending`` holds a real value, its source and whether to guard
    it, not wrapped until first read."""

    var: Var | None = None
    pending: tuple[Any, str | None, bool] | None = None
    #: The real cell at call time (``origin(namespace)``) for cells that exist before the
    #: captured region starts; None for cells the captured code creates itself.
    origin: Any = None


@attrs.define(eq=False)
class CellVar(Var):
    """A cell pushed by ``LOAD_CLOSURE`` to build a nested function's closure."""

    cell: Cell


@attrs.define(eq=False)
class FunctionVar(Var):
    """A function made by ``MAKE_FUNCTION`` during capture (lambdas, 3.11 comprehensions)."""

    code: types.CodeType
    globals: dict[str, Any]
    globals_source: str | None
    defaults: tuple[Var, ...] = ()
    kwdefaults: dict[str, Var] = attrs.field(factory=dict)
    closure: tuple[Cell, ...] = ()


@attrs.define(eq=False)
class BoundMethodVar(Var):
    """A Python function bound to a symbolic ``self`` (``self.block``'s ``forward``)."""

    function: Var
    self_var: Var


@attrs.define(eq=False)
class SuperVar(Var):
    """``super()`` inside a method: attribute lookups start after ``cls`` in the MRO."""

    cls: type
    self_var: Var  # an ObjectVar, or a UserObjectVar (an object made in the trace)


@attrs.define(eq=False)
class IteratorVar(Var):
    """An iterator over items known in full (tuples, lists, ranges, module lists)."""

    items: list[Var]
    position: int = 0


@attrs.define(eq=False)
class ContextVar(Var):
    """A context manager for ``with`` (``torch.no_grad()``): ``manager`` says what it
    does to traced ops, ``factory`` makes the real one (when a graph break needs it)."""

    manager: Any
    factory: Any = None
    entered: bool = False


@attrs.define(eq=False)
class ContextExitVar(Var):
    """The ``__exit__`` of an entered :class:`ContextVar`."""

    context: ContextVar


class UnknownVar(Var):
    """The result of a graph break, when looking ahead for later breaks at capture time:
    known only when the program runs."""


#: How :func:`describe` names an :class:`UnknownVar` (lookahead stops at its uses).
UNKNOWN = "a value known only at run time"


class NotConstant(Exception):
    """A variable has no Python value known at capture time."""


def python_value(var: Var | _Null) -> Any:
    """The real Python value of a constant-like variable (raises :class:`NotConstant`)."""
    if isinstance(var, ConstVar | ObjectVar):
        return var.value
    if isinstance(var, SequenceVar):
        values = [python_value(item) for item in var.items]
        if var.is_deque:
            return collections.deque(values)
        return values if var.is_list else make_tuple(var.tuple_type, values)
    if isinstance(var, DictVar):
        return var.dict_type((key, python_value(value)) for key, value in var.items.items())
    raise NotConstant(var)


def is_constant(var: Var | _Null) -> bool:
    """True when :func:`python_value` would succeed."""
    try:
        python_value(var)
    except NotConstant:
        return False
    return True


def describe(var: Var | _Null) -> str:
    """A short human description for graph-break messages."""
    if isinstance(var, TensorVar):
        return "a tensor"
    if isinstance(var, UnknownVar):
        return UNKNOWN
    if isinstance(var, ConstVar):
        return f"{type(var.value).__name__} {var.value!r}"
    if isinstance(var, ObjectVar):
        name = getattr(var.value, "__qualname__", None) or getattr(var.value, "__name__", None)
        kind = type(var.value).__name__
        return f"{name} ({kind})" if name else kind
    return type(var).__name__
