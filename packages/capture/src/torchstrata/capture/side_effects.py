"""Side effects on Python state made while tracing, replayed after the graph runs.

Code under capture mutates Python state that exists before the call: it appends to a
list argument (``acc.append(loss)``), writes a dict entry (``d[k] = v``), counts calls
on a module (``self.calls += 1``), rebinds a global or a closure cell. None of it runs at
capture time: the trace updates its symbolic copy (later reads in the trace see the new
value) and logs the target here, keyed by the real object, in the order first mutated.

On every call, after the graph has run, :meth:`SideEffects.prepare` fetches each target
by its source, builds the final value of each from the graph's outputs and sources
(every value is built before any write, so a source read later never sees a write made
earlier in the same replay), and returns the writes; the caller rebuilds what the
segment returns or pauses with, then applies them in order. Containers keep their
identity (``real[:] = items``, ``clear()`` and ``update()``), so every alias of a list
sees its new items, as in eager.

What the trace read of these objects before mutating them is guarded as any read is
(length and keys of containers, values of constants, identity of objects); a write
that was never read needs no guard beyond the identity of its owner.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from torchstrata.capture.print_replay import print_now
from torchstrata.capture.variables import (
    Cell,
    ConstVar,
    DictVar,
    ObjectVar,
    SequenceVar,
    TensorVar,
    Var,
)

if TYPE_CHECKING:  # the rebuilder is only needed for annotations
    from torchstrata.capture.rebuild import Rebuilder

#: A write applied after the graph: a callable of no arguments.
Write = Callable[[], object]


class DeletedVar(Var):
    """The value of an attribute deleted in the trace (``del self.cache``)."""


DELETED = DeletedVar()


@attrs.define(eq=False)
class Effect:
    """One mutated target.

    ``kind``: ``"list"``, ``"dict"``, ``"set"`` (``target`` is the container variable,
    with a source), ``"attr"`` (``target`` the owner, ``name`` the attribute, ``value``
    its final value), ``"global"`` (``holder`` the globals dict), ``"cell"`` (``cell``),
    ``"print"`` (``value`` a tuple of the values printed, ``holder`` a
    :class:`PrintCall`), ``"hook"`` (``target`` a tensor with a source, ``holder`` the
    gradient hook registered on it), ``"requires_grad"`` (``target`` a tensor with a
    source, ``holder`` the flag set on it).
    ``referent`` holds the real object the key names, so its ``id()`` stays unique.
    """

    kind: str
    target: Var | None = None
    name: str | None = None
    value: Var | None = None
    holder: Any = None
    cell: Cell | None = None
    referent: Any = None


@attrs.frozen
class PrintCall:
    """How a logged ``print`` prints: its keyword arguments (``sep``, ``end``, ``flush``)
    and the ``grad_fn`` name eager shows for each tensor printed (:mod:`.printing`)."""

    options: dict[str, Any]
    grad_fns: list[tuple[TensorVar, str]]


class SideEffects:
    """The ordered log of one trace's mutations of pre-existing Python state (and of its
    calls of ``print``, which write to the world)."""

    def __init__(self) -> None:
        self._effects: dict[tuple[Any, ...], Effect] = {}
        self._code: dict[str, types.CodeType] = {}
        self._calls = 0

    def __bool__(self) -> bool:
        return bool(self._effects)

    def __len__(self) -> int:
        return len(self._effects)

    @property
    def effects(self) -> tuple[Effect, ...]:
        """Every effect, in the order its target was first mutated."""
        return tuple(self._effects.values())

    # ------------------------------------------------------------------ trace time
    def mutate_container(self, var: SequenceVar | DictVar | ConstVar) -> None:
        """``var`` (a list, dict or set read from a source) was changed in place; its
        symbolic items already hold the change."""
        assert var.source is not None
        if isinstance(var, SequenceVar):
            kind = "list"
        elif isinstance(var, DictVar):
            kind = "dict"
        else:
            kind = "set"
        self._effects.setdefault(("container", id(var)), Effect(kind, var, referent=var))

    def store_attribute(self, owner: ObjectVar, name: str, value: Var) -> None:
        """``owner.name = value`` (``owner`` has a source)."""
        assert owner.source is not None
        key = ("attr", id(owner.value), name)
        effect = self._effects.get(key)
        if effect is None:
            self._effects[key] = Effect("attr", owner, name, value, referent=owner.value)
        else:
            effect.value = value

    def load_attribute(self, obj: Any, name: str) -> Var | None:
        """The value this trace stored in ``obj.name``, or None when it stored none."""
        effect = self._effects.get(("attr", id(obj), name))
        return None if effect is None else effect.value

    def store_global(self, globals_: dict[str, Any], name: str, value: Var) -> None:
        """``global name; name = value`` in a function whose globals are ``globals_``."""
        key = ("global", id(globals_), name)
        effect = self._effects.get(key)
        if effect is None:
            self._effects[key] = Effect("global", name=name, value=value, holder=globals_)
        else:
            effect.value = value

    def load_global(self, globals_: dict[str, Any], name: str) -> Var | None:
        """The value this trace stored in global ``name``, or None."""
        effect = self._effects.get(("global", id(globals_), name))
        return None if effect is None else effect.value

    def store_cell(self, cell: Cell) -> None:
        """A cell that exists outside the trace (``cell.origin``) was rebound; its
        variable holds the new value."""
        self._effects.setdefault(("cell", id(cell)), Effect("cell", cell=cell, referent=cell))

    def record_print(
        self, values: SequenceVar, options: dict[str, Any], grad_fns: list[tuple[TensorVar, str]]
    ) -> None:
        """``print(*values, **options)``, replayed in program order: after the writes
        of targets first mutated before it, before those of targets first mutated after."""
        self._calls += 1
        self._effects[("print", self._calls)] = Effect(
            "print", value=values, holder=PrintCall(options, grad_fns)
        )

    def register_hook(self, tensor: TensorVar, hook: Any) -> None:
        """``tensor.register_hook(hook)`` on a tensor with a source: registered on the
        real tensor after the graph, once per call, as eager registers it."""
        assert tensor.source is not None
        self._calls += 1
        self._effects[("hook", self._calls)] = Effect("hook", tensor, holder=hook)

    def set_requires_grad(self, tensor: TensorVar, flag: bool) -> None:
        """``tensor.requires_grad_(flag)`` on a tensor with a source (freezing a
        parameter): set on the real tensor after the graph; the last call wins."""
        assert tensor.source is not None
        self._effects[("requires_grad", tensor.source)] = Effect(
            "requires_grad", tensor, holder=flag
        )

    def collect(self, rebuilder: Rebuilder) -> None:
        """Note what replaying needs: the graph outputs of every value written, and the
        compiled sources of every target.

        A container whose source was dropped since (a display on the value stack after a
        graph break, which ``LIST_APPEND`` builds: :func:`.opcodes_data._building`) is
        the trace's own again, no longer replayed."""
        self._effects = {
            key: effect
            for key, effect in self._effects.items()
            if effect.target is None or effect.target.source is not None
        }
        for effect in self._effects.values():
            if effect.kind in ("list", "dict", "set", "attr", "hook", "requires_grad"):
                assert effect.target is not None and effect.target.source is not None
                self._compile(effect.target.source)
            if effect.kind == "list":
                assert isinstance(effect.target, SequenceVar)
                for item in effect.target.items:
                    rebuilder.collect(item)
            elif effect.kind == "dict":
                assert isinstance(effect.target, DictVar)
                for item in effect.target.items.values():
                    rebuilder.collect(item)
            elif effect.kind == "cell":
                assert effect.cell is not None
                rebuilder.collect(effect.cell)
            elif effect.value is not None and effect.value is not DELETED:
                rebuilder.collect(effect.value)

    def _compile(self, source: str) -> None:
        self._code.setdefault(source, compile(source, "<torchstrata side effect>", "eval"))

    # ------------------------------------------------------------------ call time
    def prepare(
        self,
        rebuilder: Rebuilder,
        outputs: Any,
        namespace: dict[str, Any],
        memo: dict[int, Any],
    ) -> list[Write]:
        """Fetch every target, build every value written (``memo`` then maps each
        mutated container variable to its real object), and return the writes."""
        targets: list[Any] = []
        for effect in self._effects.values():
            if effect.target is not None:
                assert effect.target.source is not None
                real = eval(self._code[effect.target.source], namespace)
                if effect.kind != "attr":
                    memo[id(effect.target)] = real
                targets.append(real)
            elif effect.kind == "cell":
                assert effect.cell is not None and effect.cell.origin is not None
                targets.append(effect.cell.origin(namespace))
            else:
                targets.append(effect.holder)
        writes: list[Write] = []
        for effect, real in zip(self._effects.values(), targets):
            writes.append(self._write(effect, real, rebuilder, outputs, namespace, memo))
        return writes

    @staticmethod
    def _write(
        effect: Effect,
        real: Any,
        rebuilder: Rebuilder,
        outputs: Any,
        namespace: dict[str, Any],
        memo: dict[int, Any],
    ) -> Write:
        def build(var: Any) -> Any:
            return rebuilder.build(var, outputs, namespace, memo)

        target = effect.target
        if effect.kind == "list":
            assert isinstance(target, SequenceVar)
            items = [build(item) for item in target.items]
            return lambda: real.__setitem__(slice(None), items)
        if effect.kind == "dict":
            assert isinstance(target, DictVar)
            entries = {key: build(item) for key, item in target.items.items()}
            return lambda: (real.clear(), real.update(entries))
        if effect.kind == "set":
            assert isinstance(target, ConstVar)
            members = set(target.value)
            return lambda: (real.clear(), real.update(members))
        if effect.kind == "cell":
            assert effect.cell is not None and effect.cell.var is not None
            contents = build(effect.cell.var)
            return lambda: setattr(real, "cell_contents", contents)
        if effect.kind == "hook":
            hook = effect.holder
            return lambda: real.register_hook(hook)
        if effect.kind == "requires_grad":
            flag = effect.holder
            return lambda: real.requires_grad_(flag)
        if effect.kind == "print":
            values = build(effect.value)
            call = effect.holder
            names = {id(build(var)): name for var, name in call.grad_fns}  # the same objects
            return lambda: print_now(values, call.options, names)
        if effect.value is DELETED:
            assert effect.kind == "attr" and effect.name is not None
            deleted = effect.name
            return lambda: delattr(real, deleted)
        value = build(effect.value)
        if effect.kind == "attr":
            assert effect.name is not None
            name = effect.name
            return lambda: setattr(real, name, value)
        assert effect.kind == "global" and effect.name is not None
        name = effect.name
        return lambda: real.__setitem__(name, value)
