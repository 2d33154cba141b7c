"""Real Python values from the variables of a finished trace.

After a captured graph has run, the frame state it stopped in (locals, value stack,
cells) or the value it returned is rebuilt from the graph's outputs, from sources
re-read at call time, and from constants. Aliasing is kept: a variable reached twice
becomes one object.
"""

from __future__ import annotations

import collections
import copy
import functools
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torchstrata.capture.counters import CounterVar, build_counter
from torchstrata.capture.instances import InstanceVar, build_instance
from torchstrata.capture.int_expressions import int_expression
from torchstrata.capture.result_types import make_tuple
from torchstrata.capture.symbolic_values import has_symbolic
from torchstrata.capture.tracer import Unsupported
from torchstrata.capture.user_objects import UserObjectVar
from torchstrata.capture.variables import (
    BoundMethodVar,
    Cell,
    CellVar,
    ConstVar,
    ContextExitVar,
    ContextVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    MethodVar,
    ObjectVar,
    PartialVar,
    SequenceVar,
    SuperVar,
    SymbolicIntVar,
    TensorMethodVar,
    TensorVar,
    Var,
    _Null,
    describe,
)
from torchstrata.core import Node, specialise_sizes


class NullValue:
    """The NULL of CPython's value stack, in a rebuilt frame state."""

    def __repr__(self) -> str:
        return "NULL"


NULL_VALUE = NullValue()


class ResumeIterator:
    """A real iterator over a list, whose remaining items capture can read back."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)
        self.position = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self.position >= len(self.items):
            raise StopIteration
        self.position += 1
        return self.items[self.position - 1]

    def rest(self) -> list[Any]:
        """The items not yet produced."""
        return self.items[self.position :]


class Rebuilder:
    """Collects the graph outputs a set of variables needs, then rebuilds them.

    ``collect`` runs at capture time (it raises :class:`Unsupported` for a variable it
    cannot rebuild); ``build`` runs on every call, after the graph.
    """

    def __init__(self, int_symbols: Mapping[str, str] | None = None) -> None:
        self.outputs: list[Node] = []
        self._index: dict[Node, int] = {}
        self._seen: set[int] = set()
        self._code: dict[str, types.CodeType] = {}
        #: the trace's symbolic ints, as :attr:`Tracer.int_symbols`
        self._int_symbols = dict(int_symbols or {})
        #: id of a constant computed from symbolic ints -> the code computing it from
        #: their sources at call time (decision 0386)
        self._computed: dict[int, types.CodeType] = {}

    # ------------------------------------------------------------------ capture time
    def collect(self, var: Var | _Null | Cell) -> None:
        """Note what rebuilding ``var`` needs (graph outputs, compiled sources)."""
        if id(var) in self._seen:
            return
        self._seen.add(id(var))
        if isinstance(var, Cell):
            if var.var is not None:
                self.collect(var.var)
            return
        if isinstance(var, CounterVar):
            self._code.setdefault(var.base, compile(var.base, "<source>", "eval"))
            return
        if isinstance(var, ObjectVar) and var.source is not None:
            self._code.setdefault(var.source, compile(var.source, "<source>", "eval"))
            return
        if isinstance(var, SymbolicIntVar):
            # a symbolic int argument (decision 0330): the call's value, read from its
            # source, not specialised
            self._code.setdefault(var.source, compile(var.source, "<source>", "eval"))  # type: ignore[arg-type]
            return
        if isinstance(var, ConstVar) and has_symbolic(var.value):
            text = int_expression(var.value, self._int_symbols)
            if text is not None:  # computed from symbolic ints: again at call time (0386)
                self._computed[id(var)] = compile(text, "<symbolic int>", "eval")
                return
            var.value = specialise_sizes(var.value)  # handed to Python: its value, guarded now
        if isinstance(var, _Null | ConstVar | ObjectVar):
            return
        if isinstance(var, PartialVar):
            for item in (var.function, *var.args, *var.kwargs.values()):
                self.collect(item)
            return
        if isinstance(var, ContextVar | ContextExitVar):
            return
        if var.source is not None and isinstance(var, TensorVar | SequenceVar | DictVar):
            self._code.setdefault(var.source, compile(var.source, "<source>", "eval"))
            return
        if isinstance(var, TensorVar):
            if var.node not in self._index:
                self._index[var.node] = len(self.outputs)
                self.outputs.append(var.node)
            for item in var.python_attributes.values():
                self.collect(item)
        elif isinstance(var, SequenceVar | IteratorVar):
            for item in var.items:
                self.collect(item)
        elif isinstance(var, DictVar):
            for item in var.items.values():
                self.collect(item)
        elif isinstance(var, InstanceVar):
            for item in var.fields.values():
                self.collect(item)
        elif isinstance(var, TensorMethodVar):
            self.collect(var.tensor)
        elif isinstance(var, MethodVar):
            self.collect(var.owner)
        elif isinstance(var, BoundMethodVar):
            self.collect(var.function)
            self.collect(var.self_var)
        elif isinstance(var, FunctionVar):
            for cell in var.closure:
                self.collect(cell)
            for item in (*var.defaults, *var.kwdefaults.values()):
                self.collect(item)
        elif isinstance(var, CellVar):
            self.collect(var.cell)
        elif isinstance(var, SuperVar):
            self.collect(var.self_var)
        elif isinstance(var, UserObjectVar):
            for item in var.attributes.values():
                self.collect(item)
            if var.mapping is not None:
                self.collect(var.mapping)
        else:
            raise Unsupported(f"a graph break while {describe(var)} is live is not supported")

    # ------------------------------------------------------------------ call time
    def output_of(self, var: Any) -> int | None:
        """The index of the graph output that :meth:`build` returns as it is for ``var``
        (a tensor the graph computed, with no source, no Python attributes); None where
        building it does more."""
        if type(var) is not TensorVar or var.source is not None or var.python_attributes:
            return None
        return self._index.get(var.node)

    def build(
        self, var: Var | _Null, outputs: Sequence[Any], namespace: dict[str, Any], memo: dict
    ) -> Any:
        """The real value of ``var`` (``memo`` maps variables already built)."""
        key = id(var)
        if key in memo:
            return memo[key]
        value = self._build(var, outputs, namespace, memo)
        memo[key] = value
        return value

    def build_cell(
        self, cell: Cell, outputs: Sequence[Any], namespace: dict[str, Any], memo: dict
    ) -> types.CellType:
        """The real cell for ``cell``, holding its current value."""
        key = id(cell)
        if key in memo:
            return memo[key]
        real = cell.origin(namespace) if cell.origin is not None else types.CellType()
        memo[key] = real
        if cell.var is not None:
            real.cell_contents = self.build(cell.var, outputs, namespace, memo)
        return real

    def _build(self, var: Any, outputs: Sequence[Any], ns: dict[str, Any], memo: dict) -> Any:
        if isinstance(var, _Null):
            return NULL_VALUE
        if isinstance(var, SymbolicIntVar):
            return eval(self._code[var.source], ns)  # type: ignore[index]
        computed = self._computed.get(id(var))
        if computed is not None:
            return eval(computed, ns)
        if isinstance(var, ConstVar):
            value = var.value
            return type(value)(value) if isinstance(value, set | list | dict) else value
        if isinstance(var, CounterVar):  # read now: prepare builds before any write
            return build_counter(var, eval(self._code[var.base], ns))
        if isinstance(var, ObjectVar):
            if var.source is not None:  # re-read: it may be guarded by type only
                return eval(self._code[var.source], ns)
            return copy.copy(var.value) if var.fresh else var.value
        if var.source is not None and isinstance(var, TensorVar | SequenceVar | DictVar):
            return eval(self._code[var.source], ns)

        def sub(item: Any) -> Any:
            return self.build(item, outputs, ns, memo)

        if isinstance(var, TensorVar):
            tensor = outputs[self._index[var.node]]
            for name, item in var.python_attributes.items():
                setattr(tensor, name, sub(item))
            return tensor
        if isinstance(var, SequenceVar):
            if var.is_deque:
                queue: collections.deque[Any] = collections.deque()
                memo[id(var)] = queue
                queue.extend(sub(item) for item in var.items)
                return queue
            if var.is_list:
                result: list[Any] = []
                memo[id(var)] = result
                result.extend(sub(item) for item in var.items)
                return result
            values = tuple(sub(item) for item in var.items)
            return make_tuple(var.tuple_type, values)
        if isinstance(var, DictVar):
            mapping: dict[Any, Any] = var.dict_type()
            memo[id(var)] = mapping
            mapping.update((key, sub(item)) for key, item in var.items.items())
            return mapping
        if isinstance(var, InstanceVar):
            return build_instance(var.cls, {key: sub(item) for key, item in var.fields.items()})
        if isinstance(var, IteratorVar):
            return ResumeIterator([sub(item) for item in var.items[var.position :]])
        if isinstance(var, TensorMethodVar):
            return getattr(sub(var.tensor), var.name)
        if isinstance(var, MethodVar):
            return getattr(sub(var.owner), var.name)
        if isinstance(var, BoundMethodVar):
            return types.MethodType(sub(var.function), sub(var.self_var))
        if isinstance(var, CellVar):
            return self.build_cell(var.cell, outputs, ns, memo)
        if isinstance(var, SuperVar):
            return super(var.cls, sub(var.self_var))
        if isinstance(var, ContextVar):
            manager = var.factory()
            if var.entered:  # the region is open at the break: open it for real
                type(manager).__enter__(manager)
            return manager
        if isinstance(var, ContextExitVar):
            manager = sub(var.context)
            return type(manager).__exit__.__get__(manager)
        if isinstance(var, UserObjectVar):  # an object made in the trace, escaping it
            cls: Any = var.cls
            instance: Any = cls.__new__(cls)  # object's, dict's or OrderedDict's
            memo[id(var)] = instance
            if var.mapping is not None:  # items through the dict base, past the class's own
                base: Any = var.mapping.dict_type
                for key, item in var.mapping.items.items():
                    base.__setitem__(instance, key, sub(item))
            for name, item in var.attributes.items():
                object.__setattr__(instance, name, sub(item))
            return instance
        if isinstance(var, PartialVar):
            return functools.partial(
                sub(var.function),
                *[sub(item) for item in var.args],
                **{key: sub(item) for key, item in var.kwargs.items()},
            )
        assert isinstance(var, FunctionVar), var
        closure = tuple(self.build_cell(cell, outputs, ns, memo) for cell in var.closure)
        function = types.FunctionType(
            var.code, var.globals, var.code.co_name, tuple(sub(d) for d in var.defaults), closure
        )
        if var.kwdefaults:
            function.__kwdefaults__ = {key: sub(v) for key, v in var.kwdefaults.items()}
        return function
