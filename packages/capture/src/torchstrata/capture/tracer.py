"""Per-capture state: the graph being built, lifted inputs, guards, and graph breaks.

One :class:`Tracer` serves every frame of a capture (the user's function and all the
functions inlined into it); each frame interprets its own bytecode against it.
"""

from __future__ import annotations

import collections
import re
import types
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from torchstrata.capture.autocast import CAST, AutocastMismatch
from torchstrata.capture.closures import cell_name, cells_read
from torchstrata.capture.inplace_functions import unsupported_reason, written_first_argument
from torchstrata.capture.meta_cache import cached, cached_infer_meta
from torchstrata.capture.modes import DETACH, apply_modes
from torchstrata.capture.result_types import op_result_type, tuple_type_of
from torchstrata.capture.side_effects import SideEffects
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    ObjectVar,
    SequenceVar,
    SymbolicIntVar,
    TensorVar,
    Var,
    describe,
)
from torchstrata.core import (
    TENSOR_TYPES,
    GraphBuilder,
    Guard,
    GuardKind,
    Level,
    MetaInferenceError,
    Node,
    NodeMeta,
    OpRef,
    TensorMeta,
    active_symbolic_sizes,
    enabled_autocast,
    infer_meta,
    input_meta,
    int_carrier_cells,
    int_negative_carrier,
    int_negative_source,
    int_size_carrier,
    int_size_source,
    iter_nodes,
    torch_op,
)

#: Python values that are constants of the trace (specialised on, guarded by value).
CONSTANT_TYPES = (
    int, float, bool, complex, str, bytes, type(None), type(Ellipsis), slice, range,
    torch.dtype, torch.device, torch.memory_format, torch.layout, torch.Size,
)  # fmt: skip

#: Constants a graph node may take as an argument (see ``torchstrata.core.graph.Constant``).
GRAPH_CONSTANT_TYPES = (
    int, float, complex, bool, str, type(None), torch.dtype, torch.device, torch.memory_format,
    torch.layout, torch.SymInt,  # a symbolic size (torch.SymInt: decision 0200)
    torch.SymFloat,  # a float of sizes (``math.sqrt(q.shape[-1])``: decision 0500)
)  # fmt: skip

#: Ops whose output aliases their first input; an in-place update after one of these
#: would also change the other tensor, which a functional graph cannot express yet.
VIEW_OPS = frozenset(
    [
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "t",
        "transpose",
        "swapaxes",
        "swapdims",
        "permute",
        "select",
        "narrow",
        "slice",
        "getitem",
        "unsqueeze",
        "squeeze",
        "expand",
        "expand_as",
        "as_strided",
        "flatten",
        "unflatten",
        "split",
        "chunk",
        "unbind",
        "diagonal",
        "movedim",
        "moveaxis",
        "detach",
        "alias",
        "real",
        "imag",
        "unfold",
        "tensor_split",
        "contiguous",
    ]
)

#: Python's augmented assignments on tensors (``x += y``) update ``x`` in place.
INPLACE_OPERATORS = frozenset(
    f"operator.i{name}"
    for name in [
        "add",
        "sub",
        "mul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "matmul",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
    ]
)

#: Largest number of bytecode instructions one capture may interpret (runaway loops).
MAX_INSTRUCTIONS = 200_000

#: Dict types read as :class:`DictVar` (keys and values), rebuilt with their type.
_DICT_TYPES = (dict, collections.OrderedDict)
#: Containers shared by identity within a trace (every alias is one variable).
_MUTABLE_TYPES = (list, dict, set, collections.OrderedDict)


class Unsupported(Exception):
    """A construct capture does not handle; the whole call runs eagerly.

    The frame that raises it adds the source position (see :class:`GraphBreak`).
    """

    #: The Python exception eager raises here (``AttributeError`` for a missing
    #: attribute), when a ``try`` in the traced code may catch it (:mod:`.exceptions`).
    python_exception: type[BaseException] | None = None

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.location: tuple[str, int, str] | None = None
        #: Where in the top-level frame it happened: instructions run there before the
        #: one that broke (``top_step``) and that instruction's index (``top_index``).
        self.top_step: int | None = None
        self.top_index: int | None = None


def input_name(source: str) -> str:
    """A graph input name for a source: ``L['self'].fc1.weight`` -> ``self_fc1_weight``
    (as is ``L['self']._modules['fc1']._parameters['weight']``)."""
    name = re.sub(r"\._(?:parameters|buffers|modules)\[", ".", source)
    name = re.sub(r"^[LG]\[", "", name)
    name = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    if not name or name[0].isdigit():
        name = f"arg_{name}"
    return name


class Tracer:
    """Builds one torch-level graph while frames interpret bytecode.

    :param globals_: the user function's globals; guards read them as ``G``.
    """

    def __init__(self, globals_: Mapping[str, Any]) -> None:
        self.builder = GraphBuilder(Level.TORCH)
        self.globals = globals_
        self.input_sources: list[str] = []
        self._inputs: dict[str, TensorVar] = {}
        #: The lifted tensors by ``id()``: (tensor, variable); a tensor lifted again
        #: through another source is the same input (see :meth:`_lift_tensor`).
        self._input_tensors: dict[int, tuple[torch.Tensor, TensorVar]] = {}
        #: ``param.data`` read under no_grad: the detached variable, by the parameter's
        #: variable (``param.data += d`` stores it back: nothing more to do).
        self.data_views: dict[int, tuple[TensorVar, TensorVar]] = {}
        self._guards: dict[tuple[Any, ...], Guard] = {}
        #: For each view node, the tensor with a source (an input) it views, if any: an
        #: in-place op through the view writes that input (see :meth:`_note_inplace`).
        self._bases: dict[Node, TensorVar] = {}
        self.instructions_run = 0
        #: Input tensors updated in place, by source (their graph must run).
        self.mutated: dict[str, TensorVar] = {}
        #: Active ``with`` regions, innermost last: ``("grad", bool)``,
        #: ``("autocast", (device type, dtype) or None)``.
        self.modes: list[tuple[str, Any]] = []
        #: Autocast is on where the function is called: every op is a region's (modes.py).
        self.ambient_autocast = bool(enabled_autocast())
        #: Per module class, the source its ``forward`` is guarded through (the first
        #: instance called; see :mod:`torchstrata.capture.module_calls`).
        self.forward_sources: dict[type, str] = {}
        self._code_guarded: set[int] = set()
        #: Mutations of Python state that exists before the call, replayed after the graph.
        self.side_effects = SideEffects()
        #: Mutable containers wrapped so far, by ``id()``: (object, variable). Every read
        #: of one list, dict or set gives the same variable, so a mutation made through
        #: one alias is seen through the others.
        self._mutables: dict[int, tuple[Any, Var, bool]] = {}
        #: The closure cells named in sources, by name (:mod:`torchstrata.capture.closures`).
        self.cells: dict[str, types.CellType] = {}
        #: Each symbolic int's symbol, by name -> Python text reading its value from its
        #: source (``(L['n'])``; ``(-(L['n']))`` for a negative int's magnitude): what a
        #: value computed from it is rebuilt from (:mod:`.int_expressions`, decision 0386)
        self.int_symbols: dict[str, str] = {}
        #: ``torch.utils.checkpoint`` calls inlined so far (each region's own tag is
        #: numbered by it: :mod:`torchstrata.capture.checkpoints`).
        self.checkpoint_regions = 0
        #: Each gradient-hook node made so far: the node it hooks, and the keys and
        #: functions of its hooks in registration order (:mod:`.grad_hooks`).
        self.hook_chains: dict[Node, tuple[Node, tuple[Any, ...], tuple[Any, ...]]] = {}

    def real_object(self, var: Var) -> Any:
        """The real object a variable read from a source stands for (an object, or a
        list, dict or set wrapped by :meth:`wrap`), or None."""
        if isinstance(var, ObjectVar):
            return var.value
        for value, known, _ in self._mutables.values():
            if known is var:
                return value
        return None

    # ------------------------------------------------------------------ guards
    @property
    def guards(self) -> tuple[Guard, ...]:
        """Every guard recorded so far, in the order first recorded."""
        return tuple(self._guards.values())

    def guard(self, kind: GuardKind, source: str, expected: Any, description: str = "") -> None:
        """Record a guard (once per kind and source; an ``ABSENT_KEY`` guard once per
        source and key: one module dict holds every member name read from it)."""
        key = (kind, source, expected) if kind is GuardKind.ABSENT_KEY else (kind, source)
        if key not in self._guards:
            cells = cells_read(source, self.cells)
            self._guards[key] = Guard(kind, source, expected, description, cells=cells)

    def guard_identity(self, source: str, value: Any, description: str = "") -> None:
        """Guard that ``source`` is ``value`` itself (``ID_MATCH`` of its ``id()``), the
        guard holding ``value`` (:attr:`Guard.referent`): an object freed after the
        capture (a global rebound, a function redefined) gives its address to the next
        one of its size, whose ``id()`` would then pass the guard."""
        key = (GuardKind.ID_MATCH, source)
        if key not in self._guards:
            cells = cells_read(source, self.cells)
            guard = Guard(GuardKind.ID_MATCH, source, id(value), description, value, cells)
            self._guards[key] = guard

    def cell_source(self, cell: types.CellType, variable: str) -> str:
        """A source that reads ``cell.cell_contents`` at call time, for a cell that no
        expression over ``L`` or ``G`` reaches: the guards reading it hold the cell."""
        name = cell_name(cell, variable)
        self.cells[name] = cell
        return f"{name}.cell_contents"

    def guard_code(self, function: types.FunctionType, source: str) -> None:
        """Guard that ``function``, read from ``source``, still runs the code traced:
        ``function.__code__`` can be reassigned while the function object stays.

        Once per function among the sources that guard its identity: each of them is
        checked to hold that very object, so one check of its code covers them all."""
        identified = (GuardKind.ID_MATCH, source) in self._guards
        if identified and id(function) in self._code_guarded:
            return
        code = function.__code__
        description = f"code of {function.__qualname__}"
        self.guard_identity(f"{source}.__code__", code, description)
        if identified:
            self._code_guarded.add(id(function))

    # ------------------------------------------------------------------ wrapping
    def wrap(self, value: Any, source: str | None, *, guard: bool = True) -> Var:
        """A variable for a real Python ``value`` read from ``source``.

        Tensors become graph inputs (always guarded); constants, containers and other
        objects are guarded by value, structure or identity when ``guard`` is set.
        """
        if isinstance(value, torch.Tensor):
            return self._lift_tensor(value, source)
        guarded = guard and source is not None
        if type(value) is int and guarded:
            symbolic = self.symbolic_int(value, source)  # type: ignore[arg-type]
            if symbolic is not None:
                return symbolic
        if type(value) in _MUTABLE_TYPES:
            known = self._mutables.get(id(value))
            # (one first read without guards is not shared with a guarded read)
            if known is not None and known[0] is value and (known[2] or not guarded):
                return self._alias(known[1], source, guarded)
        var = self._wrap(value, source, guard, guarded)
        if type(value) in _MUTABLE_TYPES and isinstance(var, SequenceVar | DictVar | ConstVar):
            self._mutables[id(value)] = (value, var, guarded)
        return var

    def symbolic_int(self, value: int, source: str) -> SymbolicIntVar | None:
        """The ``int`` at ``source`` as a symbol, where the symbolic scope makes it
        symbolic (decision 0330): the size of its size carrier, a graph input (a negative
        int: minus its magnitude's carrier size, decision 0385); the int guarded to be an
        ``int`` (its value by the carrier's size check). None: not symbolic (a constant,
        guarded by value)."""
        sizes = active_symbolic_sizes()
        if sizes is None or -2 < value < 2:
            return None
        # a negative int is its magnitude's carrier, negated (decision 0385)
        negative = value < 0
        carrier_source = (int_negative_source if negative else int_size_source)(source)
        if not sizes.dims.get(carrier_source):
            return None
        self.cells.update(int_carrier_cells())
        self.guard(GuardKind.TYPE_MATCH, source, int)
        carrier_of = int_negative_carrier if negative else int_size_carrier
        carrier = self._lift_tensor(carrier_of(value), carrier_source)
        size = carrier.meta.shape[0]
        if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
            self.int_symbols[size.node.expr.name] = f"(-({source}))" if negative else f"({source})"
        return SymbolicIntVar(-size if negative else size, source)

    def known_mutable(self, value: Any) -> Var | None:
        """The variable this trace made for the list, dict or set ``value`` (whose items
        hold the trace's changes to it), or None when it made none."""
        known = self._mutables.get(id(value))
        return known[1] if known is not None and known[0] is value else None

    def _alias(self, var: Var, source: str | None, guarded: bool) -> Var:
        """``var`` again, for a container reached through a second source: guarded
        that the second source still reads the same object as the first."""
        if guarded and source is not None and var.source is not None and source != var.source:
            self.guard(GuardKind.CONSTANT_MATCH, f"({source}) is ({var.source})", True, "alias")
        return var

    def _wrap(self, value: Any, source: str | None, guard: bool, guarded: bool) -> Var:
        if isinstance(value, CONSTANT_TYPES):
            if guarded and source is not None:
                self.guard(GuardKind.CONSTANT_MATCH, source, value)
            return ConstVar(value, source)
        if type(value) in (set, frozenset) and all(isinstance(v, CONSTANT_TYPES) for v in value):
            if guarded and source is not None:
                self.guard(GuardKind.TYPE_MATCH, source, type(value))
                self.guard(GuardKind.CONSTANT_MATCH, source, value)
            return ConstVar(type(value)(value), source)
        if type(value) in (tuple, list):
            if guarded and source is not None:
                self.guard(GuardKind.TYPE_MATCH, source, type(value))
                self.guard(GuardKind.CONSTANT_MATCH, f"len({source})", len(value))
            items = [
                self.wrap(item, f"{source}[{index}]" if source else None, guard=guard)
                for index, item in enumerate(value)
            ]
            return SequenceVar(items, is_list=type(value) is list, source=source)
        named = tuple_type_of(value)
        if named is not None:  # a namedtuple or structseq (``torch.return_types.max``)
            if guarded and source is not None:
                self.guard(GuardKind.TYPE_MATCH, source, named.cls)
            items = [
                self.wrap(item, f"{source}[{index}]" if source else None, guard=guard)
                for index, item in enumerate(value)
            ]
            return SequenceVar(
                items, field_names=named.field_names, source=source, tuple_type=named.cls
            )
        if type(value) in _DICT_TYPES and all(isinstance(key, str | int) for key in value):
            if guarded and source is not None:
                self.guard(GuardKind.TYPE_MATCH, source, type(value))
                self.guard(GuardKind.CONSTANT_MATCH, f"tuple({source}.keys())", tuple(value))
            entries = {
                key: self.wrap(item, f"{source}[{key!r}]" if source else None, guard=guard)
                for key, item in value.items()
            }
            return DictVar(entries, source=source, dict_type=type(value))
        if guarded and source is not None:
            self.guard_identity(source, value, describe(ObjectVar(value)))
        return ObjectVar(value, source)

    def _lift_tensor(self, value: torch.Tensor, source: str | None) -> TensorVar:
        if source is None:
            raise Unsupported("a tensor that capture cannot fetch at call time (it has no source)")
        if type(value) not in TENSOR_TYPES:
            raise Unsupported(f"tensor subclass {type(value).__name__} is not supported")
        if value.is_conj() or value.is_neg():  # kernels would read the memory unresolved
            raise Unsupported(
                "a tensor with a lazy conjugate or negative bit (z.conj(), z.conj().imag) "
                "is not supported; call .resolve_conj() / .resolve_neg() on it"
            )
        if source in self._inputs:
            return self._inputs[source]
        known = self._input_tensors.get(id(value))
        if known is not None and known[0] is value:
            # One tensor reached through two sources (a tied weight: ``lm_head.weight is
            # wte.weight``) is one graph input, so its gradient halves are summed in the
            # graph; guarded that both sources still read the same tensor.
            self._inputs[source] = known[1]
            return self._alias(known[1], source, True)  # type: ignore[return-value]
        meta = input_meta(source, value)  # dynamic dims as symbols (core.symbolic)
        self.guard(GuardKind.TENSOR_MATCH, source, meta)
        node = self.builder.input(input_name(source), meta)
        var = TensorVar(node, type(value), source)
        self._inputs[source] = var
        self._input_tensors[id(value)] = (value, var)
        self.input_sources.append(source)
        return var

    # ------------------------------------------------------------------ graph ops
    def call_op(self, op: OpRef, args: tuple[Var, ...], kwargs: Mapping[str, Var]) -> Var:
        """Record ``op(*args, **kwargs)`` in the graph and return its result variable(s)."""
        if "meta" in kwargs or "name" in kwargs:
            raise Unsupported(f"keyword 'meta'/'name' passed to {op.name} is not supported")
        if op.name == "torch.Tensor.requires_grad_":
            return self._requires_grad(args, kwargs)
        if (self.modes or self.ambient_autocast) and op not in (DETACH, CAST):
            try:
                args = apply_modes(self, op, args, kwargs)
            except AutocastMismatch as error:
                raise Unsupported(str(error)) from None
        graph_args = tuple(self.graph_value(arg, op) for arg in args)
        graph_kwargs = {key: self.graph_value(value, op) for key, value in kwargs.items()}
        if "out" in kwargs:
            raise Unsupported(f"{op.name}(..., out=...) is not supported")
        short = op.name.rsplit(".", 1)[-1]
        inplace = op.name in INPLACE_OPERATORS or (
            op.name.startswith("torch.Tensor.") and short.endswith("_") and not short.endswith("__")
        )
        inplace = inplace or graph_kwargs.get("inplace") is True
        if op.name.startswith("torch.ops.aten."):  # torch.ops.aten.index_put_.default
            packet = op.name.split(".")[3]
            inplace = inplace or (packet.endswith("_") and not packet.endswith("__"))
        written = written_first_argument(op)  # torch.relu_(x), F.leaky_relu_(x)
        if written in ("list", "unknown"):
            raise Unsupported(unsupported_reason(op, written))
        inplace = inplace or written == "tensor"
        target = args[0] if args and isinstance(args[0], TensorVar) else None
        meta: NodeMeta
        try:
            if inplace and target is not None:
                meta = self._inplace_meta(op, target, graph_args, graph_kwargs)
            else:
                meta = cached_infer_meta(op, graph_args, graph_kwargs)
        except MetaInferenceError as error:
            detail = str(error.__cause__ or error).strip().splitlines()[0][:300]
            raise Unsupported(f"{op.name} cannot run on meta tensors: {detail}") from None
        if meta is None:
            raise Unsupported(f"{op.name} returns a non-tensor value")
        node = self.builder.call(op, *graph_args, meta=meta, **graph_kwargs)
        base = self._base_of(args[0]) if short in VIEW_OPS and args else None
        if base is not None:
            self._bases[node] = base
        if isinstance(meta, TensorMeta):
            if inplace and target is not None:
                self._note_inplace(target)
                target.node = node  # later reads of this variable see the update
                return target
            return TensorVar(node)
        items: list[Var] = []
        for index, item_meta in enumerate(meta):
            if item_meta is None:
                items.append(ConstVar(None))
                continue
            item = self.builder.getitem(node, index)
            if base is not None:
                self._bases[item] = base
            items.append(TensorVar(item))
        named = cached(
            "tuple_type", op, graph_args, graph_kwargs,
            lambda: op_result_type(op, graph_args, graph_kwargs),
        )  # fmt: skip
        if named is None or len(named.field_names) != len(items):
            return SequenceVar(items)
        return SequenceVar(items, field_names=named.field_names, tuple_type=named.cls)

    def _requires_grad(self, args: tuple[Var, ...], kwargs: Mapping[str, Var]) -> Var:
        """``x.requires_grad_(flag)``: autograd state, not a computation. Turned off on a
        tensor with a source (freezing a parameter), later reads see it detached and the
        real tensor gets the flag after the graph; anything else runs eagerly (as a graph
        node it changed the real tensor while the trace kept reading the old flag)."""
        target = args[0] if args else None
        flag_var = args[1] if len(args) > 1 else kwargs.get("requires_grad", ConstVar(True))
        flag = flag_var.value if isinstance(flag_var, ConstVar) else None
        if not isinstance(target, TensorVar) or not isinstance(flag, bool):
            raise Unsupported("Tensor.requires_grad_() changes autograd state; it runs eagerly")
        if target.source is None and flag == target.meta.requires_grad:
            return target  # a tensor the graph makes, already so: nothing changes
        if target.source is None:
            raise Unsupported("Tensor.requires_grad_() changes autograd state; it runs eagerly")
        if flag == target.meta.requires_grad:
            self.side_effects.set_requires_grad(target, flag)
            return target
        if flag:
            raise Unsupported("Tensor.requires_grad_(True) on an input runs eagerly")
        detach = torch_op(torch.Tensor.detach)
        assert detach is not None
        detached = self.call_op(detach, (target,), {})
        assert isinstance(detached, TensorVar)
        target.node = detached.node  # later reads of this tensor see it without grad
        self.side_effects.set_requires_grad(target, flag)
        return target

    @staticmethod
    def _inplace_meta(
        op: OpRef, target: TensorVar, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TensorMeta:
        """An in-place op leaves shape, strides and dtype of its target as they were.

        Meta inference would rebuild the target as a leaf that requires grad, which
        in-place ops reject; run it without grad instead, just to check the arguments.
        """
        with torch.no_grad():
            infer_meta(op, args, kwargs)
        requires_grad = any(
            isinstance(node.meta, TensorMeta) and node.meta.requires_grad
            for node in iter_nodes((args, tuple(kwargs.values())))
        )
        return attrs.evolve(target.meta, requires_grad=requires_grad)

    def _base_of(self, var: Var) -> TensorVar | None:
        """The input a view of ``var`` would view: ``var`` itself when it has a source."""
        if not isinstance(var, TensorVar):
            return None
        if var.source is not None:
            return var
        return self._bases.get(var.node)

    def _note_inplace(self, target: TensorVar) -> None:
        """An in-place op writes ``target``: when it is an input or views one, that
        input's node becomes a graph output, so the graph runs and writes it.

        The graph keeps eager's aliasing: a view and its base are nodes whose values
        share memory when the graph runs (the reference interpreter runs torch; the
        autograd stage replays a view's chain on its base's new value), so an update
        through one is seen by later reads of the others.
        """
        if target.source is not None:
            self.mutated[target.source] = target
            return
        base = self._bases.get(target.node)
        if base is not None and base.source is not None:
            self.mutated.setdefault(base.source, base)

    def graph_value(self, var: Var, op: OpRef) -> Any:
        """The graph-node argument for ``var``: a node, a constant, or a list/tuple of them."""
        if isinstance(var, TensorVar):
            return var.node
        if isinstance(var, ConstVar) and isinstance(var.value, torch.Size):
            return tuple(var.value)
        if isinstance(var, ConstVar) and isinstance(var.value, GRAPH_CONSTANT_TYPES):
            return var.value
        if isinstance(var, ConstVar) and type(var.value) in (tuple, list):
            items = [self.graph_value(ConstVar(item), op) for item in var.value]
            return items if type(var.value) is list else tuple(items)
        if isinstance(var, SequenceVar):
            items = [self.graph_value(item, op) for item in var.items]
            return items if var.is_list else tuple(items)
        raise Unsupported(f"passing {describe(var)} to {op.name} is not supported")
