"""Guards compiled into one generated Python function.

A guard's ``source`` is a Python expression over ``L`` (the call's arguments bound by
parameter name, defaults included, plus ``self`` for a bound method) and ``G`` (the
function's globals); see :mod:`torchstrata.runtime.frames`. All guards of one cache
entry become ONE function, generated as source text and compiled once; each source
expression is evaluated once per check, reading the subexpressions that earlier sources
fetched from their variables (:class:`~torchstrata.core.FetchedValues`). A second
function, generated when every source can be rewritten so, reads the arguments of a
positional call straight from their tuple.
The guards on a constant list or tuple (its type, length and items), and those on a
module's unshadowed members, are checked as one test each
(:mod:`torchstrata.runtime.guard_groups`). A symbolic entry's positional check also picks
the runner for the call's sizes (:mod:`torchstrata.runtime.size_routes`). A tensor guard
is one call of a native check where the extension of
:mod:`torchstrata.runtime.native_guards` is available (decision 0460); so is the
comparison of a symbolic entry's tensors' layout with the one that passed its size guard
last (decision 0475).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    GUARD_NAMESPACE,
    FetchedValues,
    Guard,
    GuardKind,
    TensorMeta,
    TensorTraits,
    global_state,
    guard_cells,
    guard_condition,
    size_check_of,
    state_changes,
)
from torchstrata.runtime.frames import ARGS_NAME, SELF_NAME, FrameBinder
from torchstrata.runtime.guard_groups import GuardGroup, SequenceGroup, plan_groups
from torchstrata.runtime.native_guards import TensorChecks
from torchstrata.runtime.size_routes import SizeRoutes

#: Checks a frame: ``check(L, G)`` is -1 when every guard holds, else the failing index.
GuardCheck = Callable[[dict[str, Any], dict[str, Any]], int]
#: The same check for a positional call: ``check_args(args, G)``.
ArgsCheck = Callable[[tuple[Any, ...], dict[str, Any]], int]
#: Native checks of tensor guards, by guard index (``native_guards``).
NativeChecks = Mapping[int, Any]
#: ``check_args`` that also reads values for the caller: ``fetch_args(args, G)`` is None
#: when a guard fails, else the values of the requested sources, in order.
ArgsFetch = Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, ...] | None]


@attrs.frozen
class GuardFailure:
    """The first guard that did not hold for a call.

    ``actual`` is the global state of the call, for a failed
    :data:`~torchstrata.core.GuardKind.GLOBAL_STATE` guard (None otherwise).
    """

    guard: Guard
    actual: Any = None
    #: why a guard that checks many conditions failed (a symbolic entry's size check:
    #: the relation and the sizes of the call), '' where the guard says it all
    detail: str = ""

    @classmethod
    def of(cls, guard: Guard) -> GuardFailure:
        """The failure of ``guard`` now (reading the global state for a state guard, and
        the reason a size check gave for the call it just refused)."""
        actual = global_state() if guard.kind is GuardKind.GLOBAL_STATE else None
        check = size_check_of(guard)
        return cls(guard, actual, check.last_failure if check is not None else "")

    def __str__(self) -> str:
        expected = self.guard.expected
        if self.guard.kind is GuardKind.GLOBAL_STATE and self.actual is not None:
            changes = "; ".join(state_changes(expected, self.actual)) or "unchanged"
            return f"global torch state: {changes}"
        if self.detail:
            return f"{self.detail} ({self.guard.description})"
        text = f"{self.guard.kind.value} on {self.guard.source}"
        if self.guard.kind is GuardKind.TENSOR_MATCH and isinstance(expected, TensorMeta):
            text += f" (expected {_describe_meta(expected)})"
        elif self.guard.kind is GuardKind.TENSOR_MATCH and isinstance(expected, TensorTraits):
            text += f" (expected {expected})"
        elif self.guard.kind is GuardKind.ABSENT_KEY:
            text += f" (expected no key {expected!r})"
        elif self.guard.kind is not GuardKind.ID_MATCH:
            text += f" (expected {expected!r})"
        if self.guard.description:
            text += f": {self.guard.description}"
        return text


def _traits_mismatch(
    guard: Guard, traits: TensorTraits, frame: dict[str, Any], globals_: dict[str, Any]
) -> str:
    """What differs in the tensor that ``guard`` (a symbolic entry's tensor guard) read
    from this frame; '' where that cannot be said (not a tensor, a failing read)."""
    namespace = {**GUARD_NAMESPACE, **guard_cells([guard]), "L": frame, "G": globals_}
    try:
        value = eval(guard.source, namespace)
    except Exception:  # noqa: BLE001 - the read fails: the plain failure says so
        return ""
    if not isinstance(value, torch.Tensor):
        return ""
    return traits.mismatch(guard.source, value)


def _describe_meta(meta: TensorMeta) -> str:
    grad = ", requires_grad" if meta.requires_grad else ""
    return f"{meta.dtype} {list(meta.shape)} strides {list(meta.strides)} on {meta.device}{grad}"


class _SourceWriter:
    """Accumulates the generated check function and the constants it closes over."""

    def __init__(self, sources: Sequence[str], fails_with_none: bool = False) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.fetched = FetchedValues(sources)
        #: A failing guard returns None, not its index (the check of ``fetch_args``).
        self.fails_with_none = fails_with_none
        #: Reads are not wrapped one by one: the caller puts the whole body in one
        #: ``try`` (a read that raises fails the check; which guard it was is not needed).
        self.one_try = fails_with_none

    def fail(self, index: int) -> str:
        """The statement that reports guard ``index`` failing."""
        return "return None" if self.fails_with_none else f"return {index}"

    def constant(self, value: Any) -> str:
        """An expression for ``value`` in the check: a literal for ``None``, a bool, and
        an exact ``int`` or ``str`` (a constant load, no global lookup), else a name."""
        if value is None or type(value) in _LITERAL_TYPES:
            return repr(value)
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def fetch(self, source: str, index: int) -> str:
        """Emit code that evaluates ``source`` once; a failing expression fails guard
        ``index``. Values fetched already are read from their variables
        (:class:`~torchstrata.core.FetchedValues`)."""
        var = self.fetched.get(source)
        if var is not None:
            return var
        for read in self.fetched.reads_before(source):  # shared with a later source
            self._fetch_new(read, index)
        return self._fetch_new(source, index)

    def _fetch_new(self, source: str, index: int) -> str:
        expression = self.fetched.expression(source)  # a malformed source raises here
        var = f"_v{len(self.fetched.variables)}"
        self.fetched.add(source, var)
        if self.one_try:
            self.lines.append(f"    {var} = {expression}")
            return var
        self.lines += [
            "    try:",
            f"        {var} = {expression}",
            "    except Exception:",
            f"        {self.fail(index)}",
        ]
        return var

    def check(self, condition: str, index: int) -> None:
        self.lines += [f"    if not ({condition}):", f"        {self.fail(index)}"]

    def check_per_object(self, condition: str, var: str, index: int) -> None:
        """``condition`` on the deeply immutable value ``var`` (a tuple of plain items),
        checked again only when ``var`` is another object than the last one that passed:
        an object that passed once passes for good. One ``is`` where the group's check
        maps every item to its type (about 0.25 us)."""
        # a fresh slot per generated function, holding no value a call can pass at first
        passed = self.constant([_NOTHING_PASSED])
        self.lines += [
            f"    if {var} is not {passed}[0]:",
            f"        if not ({condition}):",
            f"            {self.fail(index)}",
            f"        {passed}[0] = {var}",
        ]

    def wrapped_in_one_try(self) -> list[str]:
        """The lines, the body (after the ``def`` line) inside one ``try`` that fails
        the check when a read raises (``one_try``)."""
        head, body = self.lines[0], self.lines[1:]
        return [
            head,
            "    try:",
            *(f"    {line}" for line in body),
            "    except Exception:",
            f"        {self.fail(-1)}",
        ]


#: The first value of a :meth:`_SourceWriter.check_per_object` slot (no argument is it).
_NOTHING_PASSED = object()
#: Types whose values the check writes as literals (``repr`` reads back the same value).
_LITERAL_TYPES = (bool, int, str)


def _group_condition(writer: _SourceWriter, group: GuardGroup, var: str) -> str:
    """One test of a group: a module dict holding none of the member names, or a
    constant sequence's type, length, item types and items."""
    if not isinstance(group, SequenceGroup):
        # One ``in`` per name: cheaper than ``keys().isdisjoint(names)`` (a view and a
        # set walk) for the few names a module reads.
        return " and ".join(f"{writer.constant(name)} not in {var}" for name in group.names)
    container = writer.constant(group.container)
    types = writer.constant(group.item_types())
    values = writer.constant(group.snapshot())
    return (
        f"type({var}) is {container} and len({var}) == {len(group.values)}"
        f" and tuple(map(type, {var})) == {types} and {var} == {values}"
    )


class GuardSet:
    """A cache entry's guards, compiled into one fast check.

    :param guards: the guards to check, in order (the first failing one is reported).
    :param binder: binds calls of the compiled function; given, ``check_args`` is also
        generated when every guard source can read a positional call's arguments
        directly (see :meth:`FrameBinder.args_source`).
    :param fetch_sources: sources whose values the caller wants after a positional
        call's guards hold; ``fetch_args`` is generated when ``check_args`` is and
        every one of them is a guard's source (so the check has read it already).
    :param routes: a symbolic entry's routes: ``fetch_args`` then returns ``((graph
        function,), values)`` (:class:`~torchstrata.runtime.size_routes.SizeRoutes`), and
        :attr:`routed` is True; where it cannot (a tensor the size check reads is not an
        argument), the plain ``fetch_args`` is made.
    :param tensor_checks: checks tensor guards natively in the generated
        functions (:mod:`torchstrata.runtime.native_guards`); None: Python conditions.
        The check that names a failing guard (:meth:`failure`) is Python's.
    """

    def __init__(
        self,
        guards: Sequence[Guard],
        binder: FrameBinder | None = None,
        fetch_sources: Sequence[str] | None = None,
        routes: SizeRoutes | None = None,
        tensor_checks: TensorChecks | None = None,
    ) -> None:
        self.guards = tuple(guards)
        native = _native_checks(self.guards, tensor_checks)
        #: how many guards the generated checks test natively
        self.native_count = len(native)
        self.source, constants = _generate(
            self.guards, [g.source for g in self.guards], "L", native=native
        )
        self.check: GuardCheck = _build(self.source, constants)
        self._precise_check: GuardCheck | None = None
        #: ``check`` for a fast-path positional call of ``binder``'s function (the
        #: arguments tuple in place of ``L``); None when some source cannot read it.
        self.check_args: ArgsCheck | None = None
        self.args_source: str | None = None
        args_sources = [binder.args_source(g.source) if binder else None for g in self.guards]
        sources = [source for source in args_sources if source is not None]
        if len(sources) == len(self.guards):
            self.args_source, constants = _generate(self.guards, sources, ARGS_NAME, native=native)
            constants[SELF_NAME] = binder.bound_self if binder is not None else None
            self.check_args = _build(self.args_source, constants)
        #: ``check_args`` returning the values of ``fetch_sources`` (None: not made).
        self.fetch_args: ArgsFetch | None = None
        #: whether ``fetch_args`` routes the call by its sizes (``routes``)
        self.routed = False
        if self.check_args is not None and binder is not None and fetch_sources is not None:
            if routes is not None:
                self.fetch_args = _fetching_check(
                    self.guards, sources, binder, fetch_sources, routes, native, tensor_checks
                )
                self.routed = self.fetch_args is not None
            if self.fetch_args is None:
                self.fetch_args = _fetching_check(
                    self.guards, sources, binder, fetch_sources, native=native
                )

    def failure(self, frame: dict[str, Any], globals_: dict[str, Any]) -> GuardFailure | None:
        """The first guard that fails for this frame, or None when all hold."""
        index = self.check(frame, globals_)
        if index < 0:
            return None
        if self._precise_check is None:  # name the one guard of a failing group
            source, constants = _generate(self.guards, [g.source for g in self.guards], "L", None)
            self._precise_check = _build(source, constants)
        precise = self._precise_check(frame, globals_)
        guard = self.guards[precise if precise >= 0 else index]
        if guard.kind is GuardKind.TENSOR_MATCH and isinstance(guard.expected, TensorTraits):
            detail = _traits_mismatch(guard, guard.expected, frame, globals_)
            if detail:  # what differs, where the guard names only what it expected
                return GuardFailure(guard, None, detail)
        return GuardFailure.of(guard)

    def __len__(self) -> int:
        return len(self.guards)


def _write_checks(
    writer: _SourceWriter,
    guards: Sequence[Guard],
    sources: Sequence[str],
    groups: dict[int, GuardGroup],
    route: Callable[[int], str | None] | None = None,
    native: NativeChecks | None = None,
    skip: Collection[int] = (),
) -> None:
    """Each guard's check, in order; a group's members as one check at its first.
    ``route(index)``: writes guard ``index``'s check itself where it routes the call
    (returning the variable of its ``(graph function,)``), else None. ``native``: tensor
    guards as one call of their native check each, where it covers them. ``skip``: guards
    the route checks (tensor guards folded into its native last layout)."""
    grouped = {member for group in groups.values() for member in group.members}
    for index, (guard, source) in enumerate(zip(guards, sources)):
        if index in skip:
            continue
        group = groups.get(index)
        if route is not None and route(index) is not None:
            continue
        if group is not None:
            var = writer.fetch(group.source, index)
            condition = _group_condition(writer, group, var)
            if isinstance(group, SequenceGroup) and group.container is tuple:
                writer.check_per_object(condition, var, index)
            else:
                writer.check(condition, index)
        elif index not in grouped:
            check = native.get(index) if native is not None else None
            if check is not None and guard.kind is GuardKind.GLOBAL_STATE:
                same_state, key = check
                writer.check(f"{writer.constant(same_state)}({writer.constant(key)})", index)
                continue
            size_guard = check is not None and guard.kind is not GuardKind.TENSOR_MATCH
            if size_guard and _write_native_size_guard(writer, guards, sources, index, check):
                continue
            var = writer.fetch(source, index)
            if check is not None and guard.kind is GuardKind.TENSOR_MATCH:
                writer.check(f"{writer.constant(check)}({var})", index)
            else:
                writer.check(guard_condition(guard, var, writer.constant), index)


def _native_checks(guards: Sequence[Guard], native: TensorChecks | None) -> NativeChecks:
    """The native check of each tensor guard it covers (static, or a symbolic entry's
    traits), the last passing layout of a symbolic entry's size guard
    (:meth:`TensorChecks.last_layout`) and the global state's number
    (:meth:`TensorChecks.state_check`), by guard index."""
    if native is None:
        return {}
    checks = {}
    for index, guard in enumerate(guards):
        expected = guard.expected
        if guard.kind is GuardKind.TENSOR_MATCH and isinstance(expected, TensorMeta | TensorTraits):
            check = native.check(expected)
            if check is not None:
                checks[index] = check
        elif guard.kind is GuardKind.GLOBAL_STATE:
            state = native.state_check(guard.expected)
            if state is not None:
                checks[index] = state
        else:
            size_check = size_check_of(guard)
            if size_check is not None:
                checks[index] = native.last_layout(len(size_check.sources))
    return checks


def _write_native_size_guard(
    writer: _SourceWriter,
    guards: Sequence[Guard],
    sources: Sequence[str],
    index: int,
    last: Any,
) -> bool:
    """The size guard ``index`` evaluated only when its tensors' layout is not the last
    one that passed it (``last``, compared natively), which it then remembers; False
    (nothing written) where a tensor it reads is not a tensor guard's source or its
    source shares a read with another."""
    check = size_check_of(guards[index])
    assert check is not None
    where = {g.source: i for i, g in enumerate(guards) if g.kind is GuardKind.TENSOR_MATCH}
    if not all(source in where for source in check.sources):
        return False
    values = [writer.fetched.get(sources[where[source]]) for source in check.sources]
    if None in values or writer.fetched.reads_before(sources[index]):
        return False
    tensors = ", ".join(v for v in values if v is not None)
    native = writer.constant(last)
    # the guard's value is known only where evaluated: not a fetched value for later guards
    var = f"_s{index}"
    expression = writer.fetched.expression(sources[index])
    evaluate = [f"        {var} = {expression}"]
    if not writer.one_try:
        evaluate = [
            "        try:",
            f"    {evaluate[0]}",
            "        except Exception:",
            f"            {writer.fail(index)}",
        ]
    condition = guard_condition(guards[index], var, writer.constant)
    writer.lines += [
        f"    if {native}({tensors}) is None:",
        *evaluate,
        f"        if not ({condition}):",
        f"            {writer.fail(index)}",
        f"        {native}.remember(True, {tensors})",
    ]
    return True


def _generate(
    guards: Sequence[Guard],
    sources: Sequence[str],
    frame_name: str,
    keep: Collection[str] | None = (),
    native: NativeChecks | None = None,
) -> tuple[str, dict[str, Any]]:
    """The check function's text (``check_guards(<frame_name>, G)``) and its constants.

    Groups are formed except from sources in ``keep``; ``keep=None`` forms
    none (each guard checked alone, as :meth:`GuardSet.failure` needs to name one)."""
    groups = {} if keep is None else plan_groups(guards, sources, keep)
    writer = _SourceWriter(sources)
    writer.lines.append(f"def check_guards({frame_name}, G):")
    _write_checks(writer, guards, sources, groups, native=native)
    writer.lines.append("    return -1")
    # the closure cells the guards hold, by the names their sources read them by
    return "\n".join(writer.lines) + "\n", {**writer.constants, **guard_cells(guards)}


def _fetching_check(
    guards: Sequence[Guard],
    args_sources: Sequence[str],
    binder: FrameBinder,
    fetch_sources: Sequence[str],
    routes: SizeRoutes | None = None,
    native: NativeChecks | None = None,
    tensor_checks: TensorChecks | None = None,
) -> ArgsFetch | None:
    """The positional check that returns the values of ``fetch_sources`` when every guard
    holds; None when one of them is not read by a guard (reading it in the check could
    raise, or run code, where the guards alone would not). With ``routes``, it returns
    ``((graph function,), values)``; None when the size check's tensors are not all
    read from the arguments. ``tensor_checks``: the last routed layout is compared
    natively (:meth:`TensorChecks.last_layout`)."""
    wanted = [binder.args_source(source) for source in fetch_sources]
    writer = _SourceWriter(args_sources, fails_with_none=True)
    writer.lines.append(f"def check_guards({ARGS_NAME}, G):")
    keep = [source for source in wanted if source is not None]
    routed: list[str] = []
    route = None
    groups = plan_groups(guards, args_sources, keep)
    folded: list[int] = []
    if routes is not None:
        tensors = [binder.args_source(source) for source in routes.check.sources]
        if None in tensors or routes.guard not in guards:
            return None
        position = guards.index(routes.guard)
        if tensor_checks is not None and native:
            grouped = {member for group in groups.values() for member in group.members}
            folded = _folded_tensor_guards(guards, args_sources, tensors, native, grouped)

        def route(index: int) -> str | None:
            if index != position:
                return None
            values = [writer.fetch(source, index) for source in tensors if source is not None]
            last, checks = None, []
            if tensor_checks is not None:
                traits = tuple(native[i] for i in folded) if folded and native else None
                last = tensor_checks.last_layout(len(values), traits)
                checks = list(zip(traits or (), values))
            routed.append(_write_route(writer, routes, values, index, last, checks))
            return routed[-1]

    _write_checks(writer, guards, args_sources, groups, route, native, skip=folded)
    values = [writer.fetched.get(source) for source in wanted if source is not None]
    if len(values) != len(wanted) or None in values:
        return None
    returned = "(" + "".join(f"{value}, " for value in values) + ")"
    if wanted == [f"{ARGS_NAME}[{i}]" for i in range(binder.arity or 0)]:
        returned = ARGS_NAME  # the values are the arguments, in order: their tuple itself
    if routed:  # the route is the ``(graph function,)`` tuple itself
        returned = f"({routed[0]}, {returned})"
    writer.lines.append(f"    return {returned}")
    constants = {**writer.constants, **guard_cells(guards)}
    constants[SELF_NAME] = binder.bound_self
    source = "\n".join(writer.wrapped_in_one_try()) + "\n"
    check: ArgsFetch = _build(source, constants)
    check.__doc__ = source  # what it runs, for a reader (bench.guard_cost --print-source)
    return check


def _folded_tensor_guards(
    guards: Sequence[Guard],
    sources: Sequence[str],
    tensors: Sequence[str | None],
    native: NativeChecks,
    grouped: Collection[int],
) -> list[int]:
    """The indices of the tensor guards of the route's tensors (in their order), each
    checked natively and by no group: the native last layout checks them with the layout
    (one call, decision 0515); [] where one of them is not so."""
    where: dict[str, int] = {}
    for index, (guard, source) in enumerate(zip(guards, sources)):
        if guard.kind is GuardKind.TENSOR_MATCH:
            where.setdefault(source, index)
    found = [where.get(tensor, -1) if tensor is not None else -1 for tensor in tensors]
    if any(i < 0 or i not in native or i in grouped for i in found):
        return []
    return found


def _write_route(
    writer: _SourceWriter,
    routes: SizeRoutes,
    values: Sequence[str],
    index: int,
    native_last: Any = None,
    folded: Sequence[tuple[Any, str]] = (),
) -> str:
    """The size guard ``index`` written as a lookup of the call's layout among the routed
    ones (the runner for its sizes), else as the size check (the layout known to pass, or
    decided now) and the learner of its route; the variable of its ``(graph function,)``.
    The layout routed last is compared first: by ``native_last`` (a
    :meth:`TensorChecks.last_layout`, one call reading each tensor's sizes and strides
    from its ``TensorImpl``) where given, else in Python. ``folded``: ``(native tensor
    check, value)`` of the tensor guards ``native_last`` checks too (written nowhere
    else): a layout other than the last one checks them first."""
    check = routes.check
    layout, graph_fns, last = f"_k{index}", f"_r{index}", f"_l{index}"
    known = f"{writer.constant(check.known.get)}({layout}) is True"
    # read from the check when called (the slow path: a layout not known to pass)
    decide = f"{writer.constant(check)}.decide({', '.join(values)})"
    # the layout not the last one routed: looked up among the routed ones, else checked
    # (a failing one fails the guard) and routed by the learner
    lookup = [
        f"            {layout} = {check.key_expression(values)}",
        f"            {graph_fns} = {writer.constant(routes.table.get)}({layout})",
        f"            if {graph_fns} is None:",
        f"                if not ({known} or {decide}):",
        f"                    {writer.fail(index)}",
        f"                {graph_fns} = {writer.constant(routes.learner())}({layout})",
        "            else:",
    ]
    if native_last is not None:
        native = writer.constant(native_last)
        tensors = "".join(f", {value}" for value in values)
        traits = " and ".join(f"{writer.constant(c)}({value})" for c, value in folded)
        first = [f"            if not ({traits}):", f"                {writer.fail(index)}"]
        writer.lines += [
            "    try:",
            f"        {graph_fns} = {native}({', '.join(values)})",
            f"        if {graph_fns} is None:",
            *(first if folded else []),
            *lookup,
            f"                {native}.remember({graph_fns}{tensors})",
            "    except Exception:",
            f"        {writer.fail(index)}",
        ]
        return graph_fns
    reads = check.key_reads(values)
    # the layout routed last, compared as a static guard compares (no key hashed)
    same = " and ".join(f"{read} == {last}[{i}]" for i, read in enumerate(reads))
    writer.lines += [
        "    try:",
        f"        {last} = {writer.constant(routes.last)}[0]",
        f"        if {same}:",
        f"            {graph_fns} = {last}[{len(reads)}]",
        "        else:",
        *lookup,
        f"                {writer.constant(routes.last)}[0] = (*{layout}, {graph_fns})",
        "    except Exception:",
        f"        {writer.fail(index)}",
    ]
    return graph_fns


def _build(source: str, constants: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {**GUARD_NAMESPACE, **constants}
    exec(compile(source, "<torchstrata guards>", "exec"), namespace)
    return namespace["check_guards"]
