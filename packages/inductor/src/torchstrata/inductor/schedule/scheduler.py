"""The scheduler: decide which values are materialised and fuse them into kernels.

Rules (applied in topological order):

1. Pointwise values and views are inlined into their users; only graph outputs,
   operands of extern calls and reductions are *realised* (need a kernel).
2. A realised value joins the latest kernel group it fits, else starts a new group:
   a reduction fits a group over the same rows and reduced sizes (several reductions
   over the same rows share one kernel: softmax's max and sum), or over the same rows
   and as many reduced elements split into other dims (a bias gradient summed over a
   ``[B*T, C]`` view joins a norm's weight gradient summed over ``[B, T, C]``'s first
   two dims: :func:`same_rows_regrouped`); a pointwise value fits
   a group whose whole domain or whose rows have its shape (reduction prologues and
   epilogues), or a pointwise group of its shape. A pointwise group becomes a reduction
   group when a reduction over its shape joins it. A pointwise value over the rows of a
   group whose reductions it reads joins that group first, whatever came later.
3. Joining is legal when the value, built in the group's loop variables, reads each
   fused reduction at the current row only, and every other realised reduction it reads
   comes from an earlier step (values read across steps are stored to memory). A
   realised pointwise value of a later step (an output) is recomputed instead.
   Shapes match exactly or up to size-1 dims (a keep-dim ``[M, 1]`` max joins rows ``[M]``).
4. Extern ATen calls are steps of their own, in graph order.
5. A reduction that reads graph inputs only (through inlined values) and kept a value
   out of an earlier group, by being computed later, is placed first, and the steps are
   formed again; the new steps are kept when their domains add up to fewer elements.
   A count of a cross-entropy's valid targets then comes before the kernel that walks
   the logits, which fuses the gradient scaled by it (a unit gradient,
   ``torchstrata.autograd.unit_grads``) instead of walking them once more.
"""

from __future__ import annotations

import math

import attrs

from torchstrata.core import Graph, Node, same_size, same_sizes
from torchstrata.inductor.ir.exprs import Expr, Load, ReduceRef
from torchstrata.inductor.ir.indexing import (
    Index,
    delinearize,
    linear_offset,
    row_major_strides,
)
from torchstrata.inductor.ir.kernel import red_vars, row_vars
from torchstrata.inductor.schedule.columns import walks_columns
from torchstrata.inductor.schedule.lowering import (
    Extern,
    IndexTuple,
    InputBuffer,
    Lowered,
    Pointwise,
    Reduction,
    dense_strides,
)
from torchstrata.inductor.schedule.memory_order import row_order


class NotFusable(Exception):
    """A value cannot be computed inside a given kernel group (``later``: the value
    computed by a later step that it needed, if that was the reason)."""

    def __init__(self, message: str, later: Node | None = None) -> None:
        super().__init__(message)
        self.later = later


@attrs.define(eq=False)
class Group:
    """Realised values computed by one kernel, over ``row_shape + red_shape``."""

    position: int
    row_shape: tuple[int, ...]
    red_shape: tuple[int, ...] = ()
    members: list[Node] = attrs.field(factory=list)
    #: The (row shape, reduced shape, row index, reduced index) under which every member
    #: was last built without a refusal: a fusion tried under the same ones builds only
    #: the newcomer (the members' expressions cannot change, see ``Scheduler._try_join``).
    checked: tuple[object, ...] | None = None
    #: Members over the whole domain are laid out reduced dims first (``red_shape +
    #: row_shape``): a pointwise group that a sum over its leading dims joined (a bias
    #: gradient's column sum joins the kernel that computes the gradient).
    red_first: bool = False
    #: The members' expressions as the joins built them, under ``checked`` (None when
    #: not known for every member): the plan takes them instead of building them again.
    built: BuiltMembers | None = None

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The shape of the whole iteration domain."""
        return self.row_shape + self.red_shape

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """The shape of a member over the whole domain (see ``red_first``)."""
        return self.red_shape + self.row_shape if self.red_first else self.full_shape


@attrs.frozen(eq=False)
class BuiltMembers:
    """What building a group's members in one :class:`GroupContext` gave: each member's
    expression (in member order) and the context's ``loaded`` and ``computed`` after it,
    under ``signature`` (``Group.checked``)."""

    signature: tuple[object, ...]
    exprs: dict[Node, Expr]
    loaded: frozenset[Node]
    computed: tuple[Node, ...]

    def joined(self, node: Node, expr: Expr, context: GroupContext) -> BuiltMembers:
        """These members and ``node``, built alone in ``context`` (same signature): as
        one context building every member in order gives (``computed`` in the order of
        first appearance; a node the members computed already keeps its place)."""
        computed = dict.fromkeys(self.computed)
        computed.update(dict.fromkeys(context.computed))
        return BuiltMembers(
            self.signature,
            {**self.exprs, node: expr},
            self.loaded | context.loaded,
            tuple(computed),
        )


@attrs.define(eq=False)
class ExternStep:
    """One node run eagerly through ATen."""

    position: int
    node: Node


Step = Group | ExternStep
#: A group's (row shape, reduced shape, ``red_first``) with a candidate member in it.
Shapes = tuple[tuple[int, ...], tuple[int, ...], bool]


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    # by expression: a symbolic size that is 1 at this call only is kept (decision 0406)
    return tuple(size for size in shape if not same_size(size, 1))


def member_index(
    shape: tuple[int, ...], group: Group, row: IndexTuple, red: IndexTuple
) -> tuple[IndexTuple, bool] | None:
    """The index of a member of ``shape`` in ``group``'s loop variables and whether it
    spans the whole domain (a full store) or only the rows; None if it fits neither.

    Shapes match exactly or up to size-1 dims (a keep-dim ``[M, 1]`` joins rows ``[M]``).
    In a ``red_first`` group a member over the whole domain has the reduced dims first.
    """
    whole = red + row if group.red_first else row + red
    # by expression (``same_sizes``): a sequence length equal to the head dim at this
    # call is no match at every size, and comparing values would pin it (0439)
    if same_sizes(shape, group.stored_shape) and group.red_shape:
        return whole, True
    if same_sizes(shape, group.row_shape):
        return row, False
    candidates = [(group.row_shape, row, False)]
    if group.red_shape:
        candidates.append((group.stored_shape, whole, True))
    for source, base, full in candidates:
        if same_sizes(_squeezed(shape), _squeezed(source)):
            kept = iter([index for index, size in zip(base, source, strict=True) if size != 1])
            return tuple(Index() if size == 1 else next(kept) for size in shape), full
    return None


def same_rows_regrouped(group: Group, reduction: Reduction) -> bool:
    """True when ``reduction`` has ``group``'s rows and reduces as many elements per row,
    its reduced dims split another way: a bias gradient summed over a ``[B*T, C]`` view's
    rows and a norm's weight gradient summed over the ``[B, T, C]`` value's first two dims
    walk the same elements of each column, so they join one column kernel (the member reads
    the group's reduced position delinearised into its own reduced shape)."""
    return (
        same_sizes(reduction.row_shape, group.row_shape)
        and bool(reduction.red_shape)
        and same_size(math.prod(reduction.red_shape), math.prod(group.red_shape))
    )


def sums_leading_dims(group: Group, reduction: Reduction) -> bool:
    """True when ``reduction`` sums a pointwise ``group``'s domain over its leading dims
    into the trailing ones (a bias gradient: a ``[M, N]`` value summed over ``M``): the
    group becomes a column reduction over rows ``N`` whose members over the whole domain
    keep their ``[M, N]`` layout (``Group.red_first``), so the value and its column sum
    come from one walk of it."""
    leading = tuple(range(len(reduction.red_shape)))
    return (
        not group.red_shape
        and reduction.kind == "sum"
        and bool(reduction.row_shape)
        and reduction.dims == leading
        and same_sizes(group.row_shape, reduction.red_shape + reduction.row_shape)
    )


def buffer_name(node: Node) -> str:
    """The name of the memory buffer that holds ``node``."""
    return f"buf_{node.name}"


def buffer_strides(node: Node, lowered: Lowered) -> tuple[int, ...]:
    """The strides a realised value is stored with (its own if dense, else row-major)."""
    meta = node.tensor_meta
    if isinstance(lowered, InputBuffer | Extern):
        return meta.strides
    return dense_strides(meta.shape, meta.strides)


class GroupContext:
    """Builds expressions of values inside ``group``: inlines, loads or reads reductions."""

    def __init__(self, schedule: Scheduler, group: Group, members: set[Node]) -> None:
        self.schedule = schedule
        self.group = group
        self.members = members
        order = row_order(
            group.row_shape, group.red_shape, group.members, schedule.lowered, schedule.step_of
        )
        #: The row shape the kernel loops over: ``group.row_shape`` in memory order.
        self.kernel_row_shape = tuple(group.row_shape[d] for d in order)
        walked = row_vars(self.kernel_row_shape)
        position = {d: i for i, d in enumerate(order)}
        self.row_index: IndexTuple = tuple(
            Index.of(walked[position[d]]) for d in range(len(group.row_shape))
        )
        self.red_index: IndexTuple = tuple(Index.of(v) for v in red_vars(group.red_shape))
        self.loaded: set[Node] = set()
        self.computed: dict[Node, None] = {}
        self._memo: dict[tuple[Node, IndexTuple], Expr] = {}

    def value(self, node: Node, index: IndexTuple) -> Expr:
        """The expression of ``node`` at ``index`` (see :class:`ValueContext`)."""
        key = (node, index)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._value(node, index)
        return cached

    def _value(self, node: Node, index: IndexTuple) -> Expr:
        lowered = self.schedule.lowered[node]
        if node in self.members:
            self.computed[node] = None
            if isinstance(lowered, Reduction):
                if index != self.row_index:
                    raise NotFusable(f"%{node.name} is read at another row")
                return ReduceRef(node.name, node.tensor_meta.dtype)
            assert isinstance(lowered, Pointwise)
            return lowered.fn(self, index)
        step = self.schedule.step_of.get(node)
        if step is not None or isinstance(lowered, InputBuffer):
            if step is not None and step.position >= self.group.position:
                if not isinstance(lowered, Pointwise):
                    raise NotFusable(f"%{node.name} is computed by a later step", node)
                # A pointwise value stored by a later kernel (an output) is recomputed here.
                self.computed[node] = None
                return lowered.fn(self, index)
            self.loaded.add(node)
            strides = buffer_strides(node, lowered)
            return Load(buffer_name(node), linear_offset(index, strides), node.tensor_meta.dtype)
        assert isinstance(lowered, Pointwise), f"%{node.name} is neither realised nor inlinable"
        self.computed[node] = None
        return lowered.fn(self, index)

    def buffer_load(self, node: Node, offset: Index) -> Load:
        """Element ``offset`` of the buffer ``node`` (see :class:`ValueContext`)."""
        assert isinstance(self.schedule.lowered[node], InputBuffer | Extern)
        step = self.schedule.step_of.get(node)
        if step is not None and step.position >= self.group.position:
            raise NotFusable(f"%{node.name} is computed by a later step")
        self.loaded.add(node)
        return Load(buffer_name(node), offset, node.tensor_meta.dtype)

    def _red_index_of(self, lowered: Reduction) -> IndexTuple:
        """The reduced index of a member reduction in the group's loop variables: the
        group's own, or, for reduced dims split another way (:func:`same_rows_regrouped`),
        the group's row-major position among the reduced elements, delinearised into the
        member's reduced shape (the same elements in the same order)."""
        if lowered.red_shape == self.group.red_shape:
            return self.red_index
        position = linear_offset(self.red_index, row_major_strides(self.group.red_shape))
        return tuple(delinearize(position, lowered.red_shape))

    def member_expr(self, node: Node) -> Expr:
        """The expression of a member: a reduction's body, or the value at its own index."""
        lowered = self.schedule.lowered[node]
        self.computed[node] = None
        if isinstance(lowered, Reduction):
            return lowered.body(self, self.row_index, self._red_index_of(lowered))
        assert isinstance(lowered, Pointwise)
        placed = member_index(node.tensor_meta.shape, self.group, self.row_index, self.red_index)
        if placed is None:
            raise NotFusable(f"%{node.name} has another shape")
        return lowered.fn(self, placed[0])


class Scheduler:
    """Runs the rules of the module docstring over a lowered graph."""

    def __init__(
        self,
        graph: Graph,
        lowered: dict[Node, Lowered],
        stored: frozenset[Node] = frozenset(),
        join_columns: bool = True,
    ) -> None:
        self.graph = graph
        self.lowered = lowered
        #: Whether a reduction may join a group over its rows with the reduced dims split
        #: another way, or a pointwise group as a sum over its leading dims.
        self.join_columns = join_columns
        #: Pointwise values realised though rule 1 would inline them (:mod:`.shared_values`).
        self.stored = stored
        self.steps: list[Step] = []
        self.step_of: dict[Node, Step] = {}
        self.blockers: set[Node] = set()  # rule 5
        #: Per node, a bit per rule-5 candidate (a reduction reading graph inputs only)
        #: that the node reads, directly or not: which blockers a refusal could still add.
        self._candidates: dict[Node, int] = {}
        self._candidate_bits: dict[Node, int] = {}
        self._refused_later = False

    def realised(self) -> set[Node]:
        """Values that need a kernel: outputs, extern operands, reductions."""
        result: set[Node] = set()
        for node in self.graph.nodes:
            lowered = self.lowered[node]
            if isinstance(lowered, Reduction):
                result.add(node)
            elif isinstance(lowered, Extern):
                # Views of buffers reach extern calls as torch views, not copies.
                result.update(o for o in node.input_nodes() if not self._is_view(o))
        result.update(self.graph.outputs)
        result.update(self.stored)
        return {node for node in result if isinstance(self.lowered[node], Pointwise | Reduction)}

    def _is_view(self, node: Node) -> bool:
        lowered = self.lowered[node]
        return isinstance(lowered, Pointwise) and lowered.view is not None

    def run(self) -> list[Step]:
        """Form the steps, in execution order."""
        realised = self.realised()
        candidates = self._input_reductions(realised)
        self._index_candidates(candidates)
        self._form(list(self.graph.nodes), realised)
        early = [node for node in candidates if node in self.blockers]
        if not early:
            return self.steps
        first = (self.steps, self.step_of)
        hoisted = set(early)
        self.steps, self.step_of = [], {}
        self._form(early + [node for node in self.graph.nodes if node not in hoisted], realised)
        if _elements(self.steps) >= _elements(first[0]):
            self.steps, self.step_of = first
        return self.steps

    def _form(self, order: list[Node], realised: set[Node]) -> None:
        for node in order:
            lowered = self.lowered[node]
            if isinstance(lowered, Extern):
                self._append(ExternStep(len(self.steps), node), node)
            elif node in realised:
                self._place(node, lowered)

    def _input_reductions(self, realised: set[Node]) -> list[Node]:
        """Realised reductions reading graph inputs only, in graph order."""
        derived: set[Node] = set()  # nodes reading a realised or extern value
        found: list[Node] = []
        for node in self.graph.nodes:
            reads = [arg for arg in node.input_nodes() if not arg.is_input]
            if any(
                arg in derived or arg in realised or isinstance(self.lowered[arg], Extern)
                for arg in reads
            ):
                derived.add(node)
            elif isinstance(self.lowered[node], Reduction) and node in realised:
                found.append(node)
        return found

    def _index_candidates(self, candidates: list[Node]) -> None:
        """Which rule-5 candidates each node's expression can reach: through pointwise
        values only (a kernel inlines or recomputes those; it loads, reads as a
        reduction result or refuses any other value, and never looks past it)."""
        bits = {node: 1 << i for i, node in enumerate(candidates)}
        self._candidate_bits = bits
        through: dict[Node, int] = {}
        reach: dict[Node, int] = {}
        for node in self.graph.nodes:
            mask = 0
            for arg in node.input_nodes():
                mask |= through.get(arg, bits.get(arg, 0))
            reach[node] = mask
            own = bits.get(node, 0)
            through[node] = own | mask if isinstance(self.lowered[node], Pointwise) else own
        self._candidates = reach

    def _may_block(self, node: Node) -> bool:
        """Whether a refusal of ``node`` could still add a rule-5 blocker: some candidate
        that ``node`` reads is not a blocker yet."""
        pending = sum(
            bit for cand, bit in self._candidate_bits.items() if cand not in self.blockers
        )
        return bool(self._candidates.get(node, 0) & pending)

    def _append(self, step: Step, node: Node) -> None:
        self.steps.append(step)
        self.step_of[node] = step

    def _place(self, node: Node, lowered: Lowered) -> None:
        if isinstance(lowered, Pointwise) and self._join_producer(node, lowered):
            return
        for step in reversed(self.steps):
            if isinstance(step, Group):
                shape = self._fit(step, node, lowered)
                if shape is None:
                    continue
                if self._try_join(step, node, shape):
                    return
                if self._refused_later and not self._may_block(node):
                    # ``node`` itself read a value of a later step, not pointwise: every
                    # earlier group would refuse it too (the same value is later still
                    # for it), and no refusal could add a blocker that rule 5 asks for.
                    break
        if isinstance(lowered, Reduction):
            group = Group(len(self.steps), lowered.row_shape, lowered.red_shape, [node])
        else:
            group = Group(len(self.steps), node.tensor_meta.shape, (), [node])
        self._append(group, node)

    def _join_producer(self, node: Node, lowered: Lowered) -> bool:
        """Rule 2's exception: a pointwise value over the rows of a group whose reductions
        it reads joins that group (an epilogue stored per row), even where a later group
        would take it: the later one would load the reductions back from memory (the
        int64 count of maxima that a cross-entropy saves joined the mean's kernel, and
        kept it from becoming the row kernel's tail)."""
        producers = self._producers(node)
        for step in reversed(self.steps):
            if not isinstance(step, Group) or step not in producers or not step.red_shape:
                continue
            if _squeezed(node.tensor_meta.shape) != _squeezed(step.row_shape):
                continue
            shape = self._fit(step, node, lowered)
            return shape is not None and self._try_join(step, node, shape)
        return False

    def _producers(self, node: Node) -> set[Step]:
        """The groups whose reductions ``node`` reads through values inlined into it."""
        found: set[Step] = set()
        stack, seen = list(node.input_nodes()), set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            step = self.step_of.get(current)
            if step is not None:
                if isinstance(self.lowered[current], Reduction):
                    found.add(step)
            elif isinstance(self.lowered[current], Pointwise):
                stack.extend(current.input_nodes())
        return found

    def _fit(self, group: Group, node: Node, lowered: Lowered) -> Shapes | None:
        """The (row, red, red_first) shapes of ``group`` with ``node`` in it, or None if
        they do not fit."""
        if isinstance(lowered, Reduction):
            key = (lowered.row_shape, lowered.red_shape)
            if group.red_shape:
                if same_sizes(group.row_shape, key[0]) and same_sizes(group.red_shape, key[1]):
                    return (*key, group.red_first)
                if self.join_columns and same_rows_regrouped(group, lowered):
                    return group.row_shape, group.red_shape, group.red_first
                return None
            if self.join_columns and sums_leading_dims(group, lowered):
                return (*key, True)
            fits = any(same_sizes(group.row_shape, s) for s in (key[0] + key[1], key[0]))
            return (*key, False) if fits else None
        shape = _squeezed(node.tensor_meta.shape)
        if any(same_sizes(shape, _squeezed(s)) for s in (group.row_shape, group.stored_shape)):
            return group.row_shape, group.red_shape, group.red_first
        return None

    def _try_join(self, group: Group, node: Node, shape: Shapes) -> bool:
        """Join ``node`` to ``group`` when every member, built in the joined group's loop
        variables, is legal (rule 3).

        The members already there read only values placed before them, whose steps never
        change, so they are built again only when the joined group's shapes or loop
        variables differ from those they were last built under (``Group.checked``); a
        refusal that names a later value therefore always comes from ``node``."""
        self._refused_later = False
        trial = Group(group.position, shape[0], shape[1], [*group.members, node])
        trial.red_first = shape[2]
        context = GroupContext(self, trial, set(trial.members))
        signature = (
            trial.row_shape,
            trial.red_shape,
            trial.red_first,
            context.row_index,
            context.red_index,
        )
        previous = group.checked
        exprs: list[Expr] = []
        members_built: BuiltMembers | None = None
        try:
            if group.checked != signature:
                for member in group.members:
                    exprs.append(context.member_expr(member))
                group.checked = signature
                members = dict(zip(group.members, exprs, strict=True))
                members_built = BuiltMembers(
                    signature, members, frozenset(context.loaded), tuple(context.computed)
                )
            exprs.append(context.member_expr(node))
        except NotFusable as refused:
            if members_built is not None:  # the members stand under the new signature
                group.built = members_built
            if refused.later is not None:
                self.blockers.add(refused.later)
                self._refused_later = True
            return False
        # A column sum joining its producer: only where the joined kernel walks the
        # producer's loads along the columns (a cat of attention's gradients, read
        # across heads, would be walked down each column instead).
        joins_producer = trial.red_first and not group.red_first
        if joins_producer and not walks_columns(exprs, trial.row_shape, trial.red_shape):
            group.checked = previous
            return False
        if members_built is not None:
            group.built = BuiltMembers(
                signature,
                dict(zip(trial.members, exprs, strict=True)),
                frozenset(context.loaded),
                tuple(context.computed),
            )
        elif group.built is not None and group.built.signature == signature:
            group.built = group.built.joined(node, exprs[-1], context)
        else:
            group.built = None
        group.row_shape, group.red_shape, group.members = (
            trial.row_shape,
            trial.red_shape,
            trial.members,
        )
        group.red_first = trial.red_first
        self.step_of[node] = group
        return True


def _elements(steps: list[Step]) -> int:
    """The elements the groups among ``steps`` walk, together."""
    return sum(math.prod(step.full_shape) for step in steps if isinstance(step, Group))


def schedule(graph: Graph, lowered: dict[Node, Lowered]) -> list[Step]:
    """The steps (kernel groups and extern calls) that compute ``graph``, in order."""
    return Scheduler(graph, lowered).run()
