"""The generated Python launcher: one function per graph that allocates, launches, returns.

Everything is decided at compile time: shapes, strides, dtypes, grids and kernel handles
are constants in the launcher's globals, so a call is a straight run of allocations,
kernel launches and extern ATen calls with no lookups beyond local names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from torchstrata.core import (
    Graph,
    Node,
    OpKind,
    SizeValue,
    active_symbols,
    contiguous_strides,
    is_size_float,
    same_layout,
    same_sizes,
    sizes_symbolic,
)
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.extern_calls import direct_call
from torchstrata.inductor.launch.huge_pages import (
    advise_huge_pages,
    call_with_out,
    wants_huge_pages,
)
from torchstrata.inductor.launch.in_place import in_place_updates
from torchstrata.inductor.launch.native_alloc import interned_device
from torchstrata.inductor.launch.sized_matmuls import (
    MATMUL_GLOBALS,
    SizedMatmul,
    site_key_source,
)
from torchstrata.inductor.schedule.lowering import Extern, StridedView
from torchstrata.inductor.schedule.plan import Plan
from torchstrata.inductor.schedule.scheduler import ExternStep, buffer_name, buffer_strides


@attrs.frozen
class KernelLaunch:
    """How the launcher calls one compiled kernel: ``call(handle, arg names) -> statement``."""

    kernel: Kernel
    handle: Any
    call: Callable[[str, Sequence[str]], str]


def _restride(tensor: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """``tensor`` copied into the strides that the kernels were generated for."""
    out = torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype, device=tensor.device)
    return out.copy_(tensor)


def default_globals() -> dict[str, Any]:
    """The globals every launcher has, whatever its graph."""
    return {
        "empty_strided": torch.empty_strided,
        "as_strided": torch.as_strided,
        "_restride": _restride,
        "_same_layout": same_layout,
        "math": math,  # a float of sizes printed as Python (``math.sqrt(s0)``: 0500)
    }


class _Globals:
    def __init__(self) -> None:
        self.values: dict[str, Any] = default_globals()
        self._ids: dict[int, str] = {}

    def name(self, value: Any, prefix: str) -> str:
        key = id(value)
        if key not in self._ids:
            if sizes_symbolic() and holds_size_value(value):
                raise NotImplementedError(
                    f"a symbolic size in a launcher constant ({prefix}): not ported (0381)"
                )
            name = f"{prefix}{len(self.values)}"
            self.values[name] = value
            self._ids[key] = name
        return self._ids[key]


@attrs.frozen
class Statement:
    """One statement of a launcher's body, as generated: its physical lines (indented,
    an ``if`` with its block) and the local names it reads or assigns.

    The names are recorded where the line is written (buffer names, the launcher's
    views, the extern results), never read back from the text: globals (kernel handles,
    extern functions, constants) are not among them."""

    lines: tuple[str, ...]
    names: frozenset[str]
    stores: frozenset[str]


def _statement(line: str, *names: str, stores: Sequence[str] = ()) -> Statement:
    return Statement((line,), frozenset(names) | frozenset(stores), frozenset(stores))


def _render_arg(value: Any, env: _Globals, names: set[str]) -> str:
    """``value`` as launcher source; the buffer names it mentions are added to ``names``."""
    if isinstance(value, Node):
        name = buffer_name(value)
        names.add(name)
        return name
    if isinstance(value, list):
        return "[" + ", ".join(_render_arg(v, env, names) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(_render_arg(v, env, names) + ", " for v in value) + ")"
    if isinstance(value, bool | int | str) or value is None:
        return repr(value)
    if type(value) is SizeValue or is_size_float(value):
        return repr(value)  # an extern op's size argument: the symbols' expression
    return env.name(value, "const")


def generate_launcher(
    graph: Graph,
    plan: Plan,
    launches: dict[str, KernelLaunch],
    write_backs: Mapping[int, int] | None = None,
    relaid_outputs: Mapping[int, tuple[int, ...]] | None = None,
    matmuls: Mapping[Node, str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The launcher's source and globals; the function is called ``launch``.

    ``write_backs``: ``{output index: input index}`` of the outputs that the caller copies
    into inputs; updates that produce them may run in place (:mod:`.in_place`).
    ``relaid_outputs``: ``{output index: strides}`` of outputs copied into those strides
    before they are returned (the layout the graph promised before a rewrite changed
    it). ``matmuls``: the launcher global (of :data:`.sized_matmuls.MATMUL_GLOBALS`) that
    calls each extern matmul through oneDNN, or chooses per call (:mod:`.sized_matmuls`)."""
    env = _Globals()
    matmuls = matmuls or {}
    in_place = in_place_updates(graph, plan, write_backs)
    params = [buffer_name(node) for node in graph.inputs]
    statements: list[Statement] = []
    kernel_loads = _nodes_loaded_by_kernels(plan)
    views = _extern_views(plan)
    kernel_loads |= {buffer_name(view.base) for view in views.values()}
    made: set[Node] = set()
    graph_outputs = set(graph.outputs)
    #: kernel stores allocated by the launcher: {buffer name: (shape, strides, dtype, device)}
    allocated: dict[str, tuple[Any, ...]] = {}
    # stores name their buffers; one lookup each (``graph.node`` walks the whole graph)
    by_buffer = {buffer_name(node): node for node in graph.all_nodes()}
    for step in plan.steps:
        if isinstance(step, ExternStep):
            for operand in step.node.input_nodes():
                if operand in views and operand not in made:
                    made.add(operand)
                    statements.append(_view_line(operand, views[operand]))
            read = buffer_name(step.node) in kernel_loads
            # a prim run by ATen lays its result out as ATen does: a graph output is
            # copied into the layout the graph promised (eager's, see decomp.layouts)
            op = step.node.op
            relaid = (
                not read
                and step.node in graph_outputs
                and op is not None
                and op.kind is OpKind.PRIMS
            )
            statements += _extern_lines(
                step.node, plan, env, read, in_place.get(step.node), relaid, matmuls.get(step.node)
            )
            continue
        launch = launches.get(step.name)
        tail = step.tail.stores if step.tail is not None else ()
        partials = step.partials.stores if step.partials is not None else ()
        for store in step.row_stores + step.full_stores + tail + partials:
            node = by_buffer[store.buffer]
            meta = node.tensor_meta
            strides = buffer_strides(node, plan.lowered[node])
            dtype = env.name(meta.dtype, "dtype")
            device = env.name(meta.device, "device")
            allocation = (
                f"    {store.buffer} = empty_strided({meta.shape!r}, {strides!r}, dtype={dtype}, "
                f"device={device})"
            )
            statements.append(_statement(allocation, stores=(store.buffer,)))
            if wants_huge_pages(meta.nbytes, meta.device):
                statements.append(
                    _statement(f"    _advise_huge_pages({store.buffer})", store.buffer)
                )
            allocated[store.buffer] = (meta.shape, strides, meta.dtype, str(meta.device))
        if launch is not None:
            handle = env.name(launch.handle, step.name + "_")
            args = [arg.name for arg in step.args]
            statements.append(_statement("    " + launch.call(handle, args), *args))
    # the boxed entry takes its inputs in a list that it empties: an input (a value the
    # forward saved) is freed at its last use, as eager frees it (decision 0411)
    keep = {buffer_name(n) for n in graph.outputs}
    unpack = [f"    {''.join(name + ', ' for name in params)}= args"] if params else []
    lines = [
        "def launch_boxed(args):",
        *unpack,
        "    args.clear()",
        *symbol_bindings(graph),
        *release_at_last_use(statements, keep, params),
    ]
    shared = keep | set(params)
    for step in plan.steps:
        if isinstance(step, ExternStep) and not _fresh_result(step.node, in_place):
            for arg in step.node.input_nodes():
                shared.add(buffer_name(arg))
                if arg in views:
                    shared.add(buffer_name(views[arg].base))
    view_bases = {buffer_name(node): buffer_name(view.base) for node, view in views.items()}
    reusable = {k: v for k, v in allocated.items() if k not in shared}
    lines = reuse_buffers(lines, reusable, view_bases)
    names = [buffer_name(node) for node in graph.outputs]
    for index, strides in sorted((relaid_outputs or {}).items()):
        lines.append(f"    out_{index} = _restride({names[index]}, {tuple(strides)!r})")
        names[index] = f"out_{index}"
    lines.append(f"    return ({''.join(f'{name}, ' for name in names)})")
    # ``launch`` takes the inputs as arguments and runs the same body: the caller holds
    # them anyway, and a call saves the list and a frame (M1/tiny's host time)
    body = lines[lines.index("    args.clear()") + 1 :]
    lines += [f"def launch({', '.join(params)}):", *body]
    return "\n".join(lines) + "\n", env.values


def holds_size_value(value: Any, depth: int = 4) -> bool:
    """Whether ``value`` (through containers and attrs fields, ``depth`` levels) holds a
    ``SizeValue`` or a ``SizeFloat``: such a constant would reach a kernel or an extern op
    at run time, where only numbers are taken (decisions 0381, 0500)."""
    if type(value) is SizeValue or is_size_float(value):
        return True
    if depth == 0:
        return False
    if isinstance(value, list | tuple | set | frozenset):
        return any(holds_size_value(item, depth - 1) for item in value)
    if isinstance(value, dict):
        return any(holds_size_value(item, depth - 1) for item in value.values())
    if attrs.has(type(value)):
        return any(
            holds_size_value(getattr(value, field.name, None), depth - 1)
            for field in attrs.fields(type(value))
        )
    return False


def symbol_bindings(graph: Graph) -> list[str]:
    """The launcher's first lines where the graph's sizes are symbolic (``SizeValue``,
    decision 0381): each symbol read from the first input dim that is exactly it
    (``s0 = arg0.shape[1]``; each symbol of the lowering in progress, which every C++
    kernel takes: decision 0382), so that shapes, strides and size arguments printed as
    expressions of the symbols compute the call's sizes. Raises ``NotImplementedError``
    where a symbol is no input's dim."""
    guards = None
    bound: dict[str, str] = {}
    for node in graph.inputs:
        meta = node.meta
        for dim, size in enumerate(getattr(meta, "shape", ())):
            if type(size) is SizeValue:
                guards = size.guards
                name = str(size.expr) if size.expr.is_Symbol else None
                if name is not None and name not in bound:
                    bound[name] = f"    {name} = {buffer_name(node)}.shape[{dim}]"
    symbols = {str(symbol) for symbol in active_symbols()}  # every kernel takes them
    if guards is None and not symbols:
        return []
    unbound = (set(guards.hints) if guards is not None else symbols) - set(bound)
    if unbound:
        raise NotImplementedError(f"symbols {sorted(unbound)} are no input's dim")
    return list(bound.values())


def release_at_last_use(
    statements: Sequence[Statement], keep: set[str], inputs: Sequence[str] = ()
) -> list[str]:
    """The lines of ``statements`` (a launcher's body) with ``del`` of each local right
    after the statement that uses it last.

    Intermediates (kernel buffers, extern results, views) are freed as soon as no later
    statement reads them, instead of living until the launcher returns. Names in ``keep``
    (the outputs) are never released, nor names no statement assigns but ``inputs`` (the
    boxed entry's parameters, decision 0411).
    Deleting a name that aliases another tensor (a view) only drops that reference: torch
    keeps shared storage alive. Each statement's names are the ones recorded when it was
    generated (:class:`Statement`), so the source is never parsed back.
    """
    assigned = frozenset(inputs).union(*(statement.stores for statement in statements))
    last_use: dict[str, int] = {}
    for index, statement in enumerate(statements):
        for name in statement.names:
            last_use[name] = index
    dead_after: dict[int, list[str]] = {}
    for name, index in last_use.items():
        if name in assigned and name not in keep:
            dead_after.setdefault(index, []).append(name)
    out: list[str] = []
    for index, statement in enumerate(statements):
        out += statement.lines
        if index in dead_after:
            out.append(f"    del {', '.join(sorted(dead_after[index]))}")
    return out


def reuse_buffers(
    lines: list[str],
    reusable: Mapping[str, tuple[Any, ...]],
    view_bases: Mapping[str, str] | None = None,
) -> list[str]:
    """``lines`` (after :func:`release_at_last_use`) with an allocation handed the buffer of
    one released before it with the same shape, strides, dtype and device.

    ``reusable``: those buffers' kinds, by name: the kernel stores that only kernels and
    extern calls with results of their own read (:data:`FRESH_RESULTS`; no other extern
    call, no output holds them), so nothing but the launcher's views of them (``view_bases``:
    view name -> base name) aliases a released one: a buffer is released when its name
    and every view of it are. An
    allocation is uninitialised anyway, so a kernel writing into a dead buffer of its kind
    computes the same; the buffer stays allocated from its release to its reuse, and the
    allocator's call (and, for large buffers, the fresh pages' faults) is saved. A released
    buffer is held only when a later allocation takes it (paired in order, the last
    released first).
    """
    pairs: dict[str, str] = {}  # new buffer -> the released buffer it takes
    free: dict[tuple[Any, ...], list[str]] = {}
    bases = {v: b for v, b in (view_bases or {}).items() if b in reusable}
    live: dict[str, set[str]] = {}  # base -> its names not released yet (itself, views)
    for view, base in bases.items():
        live.setdefault(base, {base}).add(view)
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("del "):
            for name in stripped[4:].split(", "):
                base = bases.get(name, name)
                if base not in reusable:
                    continue
                pending = live.setdefault(base, {base})
                pending.discard(name)
                if not pending:
                    free.setdefault(reusable[base], []).append(base)
            continue
        name = stripped.partition(" = empty_strided(")[0]
        if name in reusable and name != stripped and free.get(reusable[name]):
            pairs[name] = free[reusable[name]].pop()
    if not pairs:
        return lines
    held = set(pairs.values())
    out: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("del "):
            names = [name for name in stripped[4:].split(", ") if name not in held]
            if names:
                out.append(f"    del {', '.join(names)}")
            continue
        name = stripped.partition(" = empty_strided(")[0]
        if name in pairs:
            out.append(f"    {name} = {pairs[name]}  # reused")
            out.append(f"    del {pairs[name]}")
            continue
        out.append(line)
    return out


#: Extern ops whose results are tensors of their own, never views of an operand: a buffer
#: they read (or a view of it) is free for another value once the launcher releases it.
FRESH_RESULTS = frozenset(
    f"aten.{name}.default"
    for name in (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
    )
)


def _fresh_result(node: Node, in_place: Mapping[Node, Any]) -> bool:
    """True when ``node``'s result holds none of its operands (:data:`FRESH_RESULTS`, not
    run in place)."""
    return node.op is not None and str(node.op) in FRESH_RESULTS and node not in in_place


def _extern_views(plan: Plan) -> dict[Node, StridedView]:
    """Extern operands that are views of buffers: made with ``as_strided``, never copied."""
    views: dict[Node, StridedView] = {}
    for step in plan.steps:
        if isinstance(step, ExternStep):
            for operand in step.node.input_nodes():
                view = plan.view(operand)
                if view is not None:
                    views[operand] = view
    return views


def _view_line(node: Node, view: StridedView) -> Statement:
    base, name = buffer_name(view.base), buffer_name(node)
    strides = view.strides
    meta = view.base.tensor_meta
    # "not the same" is right at every size (a view equal to its base), so symbolic
    # sizes compare by expression here, deciding nothing (decision 0381)
    same = same_sizes((*view.shape, *strides, view.offset), (*meta.shape, *meta.strides, 0))
    if same and view.base.is_input:
        # a weight's t(t(w)) in a backward: the input itself (its layout is guarded)
        return _statement(f"    {name} = {base}  # the input itself, no view", base, stores=(name,))
    if view.offset == 0:  # as_strided keeps the base's storage offset
        call = f"{base}.as_strided({view.shape!r}, {strides!r})"
    else:
        call = (
            f"as_strided({base}, {view.shape!r}, {strides!r}, "
            f"{base}.storage_offset() + {view.offset})"
        )
    return _statement(f"    {name} = {call}  # a view, no copy", base, stores=(name,))


def _nodes_loaded_by_kernels(plan: Plan) -> set[str]:
    return {arg.name for step in plan.steps if isinstance(step, Kernel) for arg in step.args}


def _extern_lines(
    node: Node,
    plan: Plan,
    env: _Globals,
    read_by_kernel: bool,
    in_place: Any = None,
    relaid_output: bool = False,
    matmul: str | None = None,
) -> list[Statement]:
    """The call of an extern ATen op (``in_place``: its in-place form, updating its first
    argument, see :mod:`.in_place`). Its result is copied into the strides of its
    metadata where kernels read it (exactly those strides) or, with ``relaid_output``,
    where it is returned in another layout (size-one dimensions aside). ``matmul``: the
    global that calls a matmul through oneDNN or chooses per call (:mod:`.sized_matmuls`),
    called where the matmul is neither run in place nor written into an advised buffer."""
    assert node.op is not None
    lowered = plan.lowered[node]
    assert isinstance(lowered, Extern)
    name = buffer_name(node)
    if lowered.allocate_only:
        meta = node.tensor_meta
        dtype, device = env.name(meta.dtype, "dtype"), env.name(meta.device, "device")
        allocation = (
            f"    {name} = empty_strided({meta.shape!r}, {meta.strides!r}, "
            f"dtype={dtype}, device={device})  # {lowered.reason}"
        )
        return [_statement(allocation, stores=(name,))]
    op = node.op.resolve() if in_place is None else in_place
    advised = in_place is None and _advised_result(node, op)
    note = f"{node.op.name}: {lowered.reason}" + (", in place" if in_place is not None else "")
    sized = False
    if matmul is not None and in_place is None and not advised:
        fn = matmul
        _, how, sized = MATMUL_GLOBALS[matmul]
        note += ", " + how
    else:
        fn = env.name(direct_call(op, node.kwargs), "extern")
    read: set[str] = set()
    args = [_render_arg(arg, env, read) for arg in node.args]
    args += [f"{key}={_render_arg(value, env, read)}" for key, value in node.kwargs.items()]
    statements = []
    if advised:
        # a large matmul result written into a buffer advised onto huge pages (0233)
        meta = node.tensor_meta
        dtype, device = env.name(meta.dtype, "dtype"), env.name(meta.device, "device")
        allocation = (
            f"    {name} = empty_strided({meta.shape!r}, {meta.strides!r}, dtype={dtype}, "
            f"device={device})"
        )
        statements.append(_statement(allocation, stores=(name,)))
        statements.append(_statement(f"    _advise_huge_pages({name})", name))
        call = f"    {name} = _call_with_out({fn}, {name}, {', '.join(args)})  # {note}"
    elif sized:  # the launcher looks the call's choice up itself (.sized_matmuls)
        call = (
            f"    {name} = {SizedMatmul.launch_source(fn, site_key_source(node), args)}  # {note}"
        )
    else:
        call = f"    {name} = {fn}({', '.join(args)})  # {note}"
    statements.append(_statement(call, *read, stores=(name,)))
    if read_by_kernel:
        # Kernels index this buffer with the strides its metadata promised.
        strides = node.tensor_meta.strides
        test = f"    if {name}.stride() != {strides!r}:"
    elif relaid_output:
        strides = node.tensor_meta.strides
        test = f"    if not _same_layout({name}.shape, {name}.stride(), {strides!r}):"
    else:
        return statements
    restride = f"        {name} = _restride({name}, {strides!r})"
    statements.append(Statement((test, restride), frozenset((name,)), frozenset((name,))))
    return statements


#: Matmuls whose large CPU results the launcher allocates itself (``out=``), advised
#: onto huge pages: ATen's own allocation of a 51 MB result faults in 4 KB pages.
_OUT_MATMULS = frozenset(f"aten.{name}.default" for name in ("mm", "addmm", "bmm"))


def _advised_result(node: Node, op: Any) -> bool:
    """Whether ``node``'s result is a large row-major CPU matmul result to allocate with
    huge pages and pass as ``out=`` (the overload called through its binding, whose
    ``out=`` writes a buffer of the result's shape and strides as it is)."""
    if str(node.op) not in _OUT_MATMULS or node.kwargs or node.tensor_meta is None:
        return False
    meta = node.tensor_meta
    if direct_call(op) is op:  # an OpOverload call takes no out=
        return False
    dense = meta.strides == contiguous_strides(meta.shape)
    return dense and wants_huge_pages(meta.nbytes, meta.device)


def build_launcher(
    source: str,
    env: dict[str, Any],
    empty_strided: Callable[..., torch.Tensor] = torch.empty_strided,
) -> Callable[..., tuple[torch.Tensor, ...]]:
    """Execute the launcher source and return its ``launch`` function; its ``boxed``
    attribute is ``launch_boxed``, which takes the inputs as a list and empties it.

    ``empty_strided``: what the launcher allocates with, called as
    ``torch.empty_strided`` is (:func:`.native_alloc.launcher_allocator`). Device
    globals are bound as one object per device value (:func:`.native_alloc.interned_device`)."""
    # not in default_globals(): the numbered names of every launcher's globals stay
    namespace = {
        **default_globals(),
        "_advise_huge_pages": advise_huge_pages,
        "_call_with_out": call_with_out,
        **{name: call for name, (call, _, _) in MATMUL_GLOBALS.items()},
        "_threads": torch.get_num_threads,
        **{
            name: interned_device(value) if type(value) is torch.device else value
            for name, value in env.items()
        },
        "empty_strided": empty_strided,
    }
    exec(compile(source, "<torchstrata launcher>", "exec"), namespace)  # our own generated code
    launch = namespace["launch"]
    launch.boxed = namespace["launch_boxed"]
    return launch
