"""What a program calls for each graph: compiled forwards (and backwards) wrapped so that
they return the user's outputs, write mutated inputs back, rebuild outputs that alias
inputs, and — when gradients are needed — run as one ``torch.autograd.Function``.

The conventions are those of :class:`torchstrata.core.AotResult`: forward outputs are
user outputs, then write-backs for ``mutated_inputs``, then ``num_saved`` saved values;
backward takes the saved values and one contiguous tangent per ``tangent_outputs`` entry
(user outputs and write-backs, counted together) and returns one gradient per
``grad_inputs`` entry. A forward that also returns unit gradients (``num_unit_grads``)
has its first backward return them, scaled in place by the tangent, without running the
backward graph (:mod:`torchstrata.runtime.unit_grads`). A differentiable write-back that
the forward made in place marks its input dirty (:mod:`torchstrata.runtime.write_backs`).
The constants lifted out of the graph (``AotResult.constants``) are passed after the
call's inputs, the same tensors on every call.

The backward may be a :class:`LazyGraphFn`: it is then compiled on the first backward
call, not when the forward is compiled (a graph only ever run for inference, or whose
backward never runs, costs no backward compilation). Backward graphs are
once-differentiable: a double backward raises :data:`DOUBLE_BACKWARD_MESSAGE`.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from torchstrata.core import AotResult, CompiledGraph, DirectLauncher, TensorMeta, same_layout
from torchstrata.runtime.errors import TorchstrataFallbackWarning
from torchstrata.runtime.unit_grads import UnitGrads
from torchstrata.runtime.write_backs import (
    differentiable_writes,
    refuse_written_leaves,
    write_back,
)

#: Runs one graph: graph inputs in, the user's outputs (a tuple of tensors) out.
GraphRunner = Callable[..., tuple[Any, ...]]
#: A compiled (or interpreted) graph: tensors in, all graph outputs out.
GraphFn = Callable[..., Sequence[Any]]
#: A call's inputs -> the (output aliases, output views) at its sizes (see
#: :mod:`~torchstrata.runtime.symbolic_outputs`).
OutputsAt = Callable[[Sequence[Any]], tuple[tuple[Any, ...], tuple[Any, ...]]]

#: What a second differentiation through a compiled backward raises.
DOUBLE_BACKWARD_MESSAGE = (
    "torchstrata: double backward through a compiled graph is not supported (its backward "
    "graph is compiled once-differentiable); run this function eagerly to take "
    "higher-order gradients"
)


class LazyGraphFn:
    """A graph function built on its first call (thread-safe, built at most once).

    :param build: makes the function (e.g. decompose and generate code for a backward).
    :param fallback: used instead, with a :class:`TorchstrataFallbackWarning`, when
        ``build`` raises; None re-raises the error.
    :param what: names the graph in that warning.
    """

    def __init__(
        self, build: Callable[[], GraphFn], fallback: GraphFn | None = None, what: str = "graph"
    ) -> None:
        self._build: Callable[[], GraphFn] | None = build
        self._fallback = fallback
        self._what = what
        self._fn: GraphFn | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether the function has been built (the first call happened)."""
        return self._fn is not None

    def get(self) -> GraphFn:
        """The built function, building it now if needed."""
        if self._fn is None:
            with self._lock:
                if self._fn is None:
                    self._fn = self._make()
        return self._fn

    def _make(self) -> GraphFn:
        assert self._build is not None
        try:
            fn = self._build()
        except Exception as error:
            if self._fallback is None:
                raise
            warnings.warn(
                f"torchstrata: compiling the {self._what} failed ({type(error).__name__}: "
                f"{error}); running it in the reference interpreter",
                TorchstrataFallbackWarning,
                stacklevel=4,
            )
            fn = self._fallback
        self._build = None
        return fn

    def __call__(self, *inputs: Any) -> Sequence[Any]:
        return self.get()(*inputs)

    def boxed(self, inputs: list[Any]) -> Sequence[Any]:
        """Call the function on ``inputs``, emptying the list: a launcher's boxed entry
        frees each input at its last use (decision 0411)."""
        return call_boxed(self.get(), inputs)


def call_boxed(fn: GraphFn, inputs: list[Any]) -> Sequence[Any]:
    """``fn(*inputs)`` with ``inputs`` emptied; through the generated launcher's boxed
    entry where ``fn`` is one (or a compiled graph of one, or a lazy one), which drops its
    references to the inputs as it goes, so that the caller's list held the last ones."""
    boxed = getattr(fn if isinstance(fn, LazyGraphFn) else _unwrapped(fn), "boxed", None)
    if boxed is not None:
        return boxed(inputs)
    args = tuple(inputs)
    inputs.clear()
    return fn(*args)


def output_layout(aot: AotResult) -> tuple[int, tuple[int, ...], tuple[Any, ...]]:
    """(number of user outputs, mutated input indices, output aliases): the forward's
    outputs are the user's, then one write-back per mutated input, then saved values."""
    total = len(aot.forward.outputs)
    extra = aot.num_mutations + aot.num_saved + aot.num_unit_grads
    num_user = aot.num_user_outputs or total - extra
    aliases = tuple(getattr(aot, "output_aliases", ()) or ())
    return num_user, aot.mutated_inputs, aliases


def _user_outputs(
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    num_user: int,
    mutated: tuple[int, ...],
    aliases: tuple[Any, ...],
    views: tuple[Any, ...],
    grad_outputs: frozenset[int],
) -> tuple[Any, ...]:
    """The user's outputs of one call: write-backs copied into the inputs, then the
    outputs that alias inputs or other outputs made views again, then the hidden bases
    of those views (the last ``num_user - len(views)`` when there are views) dropped.
    ``grad_outputs``: the positions of the outputs that require grad (``tangent_outputs``);
    the others are rebuilt as views of a detached base (``x.detach()``, ``z.detach()[0]``)."""
    write_back(inputs, mutated, outputs[num_user : num_user + len(mutated)])
    user = list(outputs[:num_user])
    _apply_aliases(inputs, user, aliases, grad_outputs)
    if views:
        _apply_views(user, views, grad_outputs)
        del user[len(views) :]
    return tuple(user)


def _apply_aliases(
    inputs: Sequence[Any],
    outputs: list[Any],
    aliases: tuple[Any, ...],
    grad_outputs: frozenset[int],
) -> None:
    for position, alias in enumerate(aliases):
        if alias is not None:
            index, size, stride, offset = alias
            base = inputs[index]  # the traced offset is relative to this input's start
            computed = outputs[position]
            if isinstance(computed, torch.Tensor) and computed.dtype != base.dtype:
                retyped = retyped_view(base, computed.dtype)
                if retyped is None or computed.requires_grad:
                    continue  # the values, not a view
                base = retyped
            if base.requires_grad and position not in grad_outputs:
                # ``x.detach()``: no gradient may flow through it. The computed output's own
                # flag can't tell: a view of an input returned by an ``autograd.Function``
                # requires grad even when marked non-differentiable.
                base = base.detach()
            outputs[position] = base.as_strided(size, stride, base.storage_offset() + offset)


def retyped_view(base: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """``base``'s memory seen as ``dtype`` (sizes, strides and offset then count
    ``dtype`` elements), for an output that is a view of an input in another dtype
    (``view_as_real``, ``view_as_complex``, ``view(dtype)``); None where no such view
    exists, or where it would drop autograd history (``view(dtype)`` records none)."""
    if base.requires_grad:
        return None
    try:
        if base.is_complex() and dtype == base.real.dtype:
            return torch.view_as_real(base)  # any layout, any rank
        return base.view(dtype)
    except RuntimeError:
        return None


def output_views(aot: AotResult, metas: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """``aot.output_views`` for the outputs the user gets (the hidden bases, the last
    ``aot.num_hidden_outputs`` user outputs, are left out), each with its owner's traced
    metadata (``metas``, one per forward output; None: the forward's) appended (``()``:
    no views)."""
    hidden = int(getattr(aot, "num_hidden_outputs", 0) or 0)
    views = tuple(getattr(aot, "output_views", ()) or ())
    if not any(view is not None for view in views):
        return ()
    returned = output_layout(aot)[0] - hidden
    views = (*views, *(None,) * returned)[:returned]
    metas = [node.meta for node in aot.forward.outputs] if metas is None else metas
    return tuple(None if view is None else (*view, metas[view[0]]) for view in views)


def _apply_views(outputs: list[Any], views: tuple[Any, ...], grad_outputs: frozenset[int]) -> None:
    """Outputs that view another output (``AotResult.output_views``) made views of it
    again. An owner computed with other strides than its traced ones is first copied
    into a tensor that has them (the views' strides and offsets assume them; left as
    computed, views that overlap would hide an update of one from the other). A view of
    an owner that requires grad is made of its ``detach()`` when the output is not among
    ``grad_outputs`` (``z.detach()[0]``: no gradient may flow through it)."""
    for position, view in enumerate(views):
        if view is not None:
            owner_index, size, stride, offset, owner_meta = view
            owner = outputs[owner_index]
            if not same_layout(owner_meta.shape, owner.stride(), owner_meta.strides):
                owner = outputs[owner_index] = _restrided(owner, owner_meta)
            if owner.requires_grad and position not in grad_outputs:
                owner = owner.detach()  # shares the memory and the version counter
            outputs[position] = owner.as_strided(size, stride, owner.storage_offset() + offset)


def _restrided(tensor: torch.Tensor, meta: TensorMeta) -> torch.Tensor:
    """A copy of ``tensor`` laid out with ``meta``'s strides (differentiable)."""
    copy = torch.empty_strided(meta.shape, meta.strides, dtype=tensor.dtype, device=tensor.device)
    return copy.copy_(tensor)


def _tuple_runner(fn: GraphFn) -> GraphRunner:
    """``fn`` returning a tuple: a compiled graph's own launcher (which returns a fresh
    tuple, so the call costs no wrapper frame), else ``fn`` wrapped in ``tuple()``."""
    unwrapped = _unwrapped(fn)
    if unwrapped is not fn:
        return unwrapped  # type: ignore[return-value]
    return lambda *inputs: tuple(fn(*inputs))


def _keeps_graph() -> bool:
    """Whether the running backward keeps the graph (``retain_graph=True``): its saved
    values must outlive it (a torch that cannot say: assumed so)."""
    keeps = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if keeps is None else bool(keeps())


def _unwrapped(fn: GraphFn) -> GraphFn:
    """A compiled graph's own launcher (one call frame less), else ``fn`` (a subclass of
    :class:`CompiledGraph` may do more in ``__call__``)."""
    return fn.fn if type(fn) is CompiledGraph else fn


def inference_runner(
    fn: GraphFn, aot: AotResult | None, outputs_at: OutputsAt | None = None
) -> GraphRunner:
    """Wrap a forward: pass the lifted constants, apply write-backs and aliases, return
    the user's outputs only. ``outputs_at``: the aliases and views at each call's sizes
    (a graph lowered for many sizes; None: ``aot``'s)."""
    if aot is None:
        return _tuple_runner(fn)
    num_user, mutated, aliases = output_layout(aot)
    views = output_views(aot)
    constants = tuple(aot.constants)
    plain = not mutated and not views and all(a is None for a in aliases)
    if plain and num_user == len(aot.forward.outputs):
        # Nothing to write back, drop or rebuild: the graph's outputs are the user's.
        return _with_constants(_tuple_runner(fn), constants)
    # Run with grad off (or no input requiring it): a view made then of an input that
    # requires grad keeps the flag, as in eager, and none has history to detach from.
    grad_outputs = frozenset(range(num_user))
    traced = (aliases, views)

    def run(*inputs: Any) -> tuple[Any, ...]:
        outputs = fn(*inputs, *constants)
        at = traced if outputs_at is None else outputs_at(inputs)
        return _user_outputs(inputs, outputs, num_user, mutated, *at, grad_outputs)

    return run


def _with_constants(runner: GraphRunner, constants: tuple[Any, ...]) -> GraphRunner:
    """``runner`` with ``constants`` passed after the call's inputs (``runner`` itself
    when there are none)."""
    if not constants:
        return runner

    def run(*inputs: Any) -> tuple[Any, ...]:
        return runner(*inputs, *constants)

    return run


def direct_apply(function: type[torch.autograd.Function], all_tensors: bool) -> Callable[..., Any]:
    """``function.apply`` without the Python half of ``Function.apply``.

    That half binds default arguments for a ``setup_context`` (ours has none), and, when
    no functorch transform is active, unwraps dead functorch wrappers among the tensors
    before calling the C++ ``apply``. It costs 17 us per call on the CI machine, about
    as much as the C++ ``apply`` itself. This does the same work with builtins: the
    transform check, then ``unwrap_if_dead`` mapped over the inputs (all tensors, which
    ``all_tensors`` promises), then the C++ ``apply``. Under an active transform, or on a
    torch without these functions, it is ``function.apply``; so it is where that whole
    ``apply`` is C++ already (torch 2.14).
    """
    transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
    unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
    if transforms_active is None or unwrap is None or not all_tensors or not _python_apply():
        return function.apply
    c_apply = super(torch.autograd.Function, function).apply  # type: ignore[misc]
    python_apply = function.apply

    def apply(*inputs: Any) -> Any:
        if transforms_active():
            return python_apply(*inputs)
        return c_apply(*map(unwrap, inputs))

    return apply


def _python_apply() -> bool:
    """``torch.autograd.Function.apply`` is a Python classmethod (torch 2.13 and older)."""
    return isinstance(vars(torch.autograd.Function).get("apply"), classmethod)


def _once_differentiable(grads: Sequence[Any]) -> Sequence[Any]:
    """Under ``create_graph=True``: gradients that require grad but raise
    :data:`DOUBLE_BACKWARD_MESSAGE` when differentiated (as ``@once_differentiable``
    does, but also when the incoming gradients do not require grad, so the error is
    ours rather than "does not require grad")."""
    tensors = [g for g in grads if isinstance(g, torch.Tensor)]
    if not tensors:
        return grads
    delayed = torch._C._functions.DelayedError(DOUBLE_BACKWARD_MESSAGE, len(tensors))
    delayed_grads = delayed(*(g.detach().requires_grad_() for g in tensors))
    # one tensor in, that tensor out (not a tuple of one)
    wrapped = iter(delayed_grads if isinstance(delayed_grads, tuple) else (delayed_grads,))
    return [next(wrapped) if isinstance(g, torch.Tensor) else g for g in grads]


def _apart_from_differentiable(
    outputs: Sequence[Any], returned: int, non_differentiable: tuple[int, ...]
) -> Sequence[Any]:
    """``outputs`` where each non-differentiable output that is the very tensor of a
    differentiable one is replaced by its ``detach()`` (same memory and version counter).

    A graph that returns a value and its detached alias (``return loss, loss.detach()``:
    a detach is a no-op on functional values) may return one tensor for both; marking it
    non-differentiable would strip the gradient from the differentiable output too."""
    differentiable = {id(outputs[i]) for i in range(returned) if i not in non_differentiable}
    if not any(id(outputs[i]) in differentiable for i in non_differentiable):
        return outputs
    apart = list(outputs)
    for i in non_differentiable:
        if id(apart[i]) in differentiable:
            apart[i] = apart[i].detach()
    return apart


def _saved_layout_checker(
    aot: AotResult, saved_layouts: Sequence[TensorMeta | None] = ()
) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """A check of the saved tensors against the layouts the backward was built for (its
    graph's inputs, each replaced by its entry of ``saved_layouts`` when that is not
    None): it returns the saved tensors to pass to the backward.

    Compiled kernels read their inputs through typed pointers at the strides they were
    generated for: a saved tensor of another dtype or layout than the backward graph's
    (a forward and a backward that disagree about it) would be read out of bounds, giving
    garbage gradients rather than an error. On the first backward, a dtype that differs
    raises; a saved tensor laid out otherwise is copied into the expected layout,
    then and on every later backward, with a warning (the pipeline builds the backward
    for the forward's layouts, so this is a safety net).
    """
    backward = aot.backward
    inputs = backward.inputs[: aot.num_saved] if backward is not None else ()
    expected = [node.meta if isinstance(node.meta, TensorMeta) else None for node in inputs]
    for position, layout in enumerate(saved_layouts[: len(expected)]):
        if layout is not None:
            expected[position] = layout
    pending = [True]
    restrided: list[int] = []

    def check(saved: Sequence[Any]) -> Sequence[Any]:
        if pending:
            restrided.extend(saved_layout_mismatches(saved, expected))
            pending.clear()
        if not restrided:
            return saved
        fixed = list(saved)
        for position in restrided:
            meta = expected[position]
            assert meta is not None
            tensor = fixed[position]
            copy = torch.empty_strided(
                meta.shape, meta.strides, dtype=meta.dtype, device=tensor.device
            )
            fixed[position] = copy.copy_(tensor)
        return fixed

    return check


def saved_layout_mismatches(
    saved: Sequence[Any], expected: Sequence[TensorMeta | None]
) -> list[int]:
    """Raise on a saved tensor of the wrong dtype; return the positions of those laid out
    otherwise than ``expected`` (with a warning).

    A saved tensor of another shape is let through: meta kernels and CPU kernels disagree
    on the shapes of some outputs only extern ops read (``_embedding_bag``'s bfloat16
    ``offset2bag`` is empty on the CPU), and those ops take what they are given.
    """
    restrided = []
    for position, (tensor, meta) in enumerate(zip(saved, expected, strict=False)):
        if meta is None or not isinstance(tensor, torch.Tensor):
            continue
        if tensor.dtype != meta.dtype:
            raise RuntimeError(
                f"torchstrata: the forward saved a {tensor.dtype} tensor where the backward "
                f"graph expects {meta.dtype} (saved value {position}); the compiled forward "
                "and backward graphs disagree"
            )
        same_shape = tuple(tensor.shape) == meta.shape
        if (
            same_shape
            and tensor.numel() > 1
            and not same_layout(meta.shape, tensor.stride(), meta.strides)
        ):
            restrided.append(position)
    if restrided:
        warnings.warn(
            f"torchstrata: the forward saved values {restrided} with other strides than the "
            "backward graph was built for; they are copied before every backward",
            TorchstrataFallbackWarning,
            stacklevel=4,
        )
    return restrided


class CallSizes(Protocol):
    """What a training runner lowered once for many sizes reads at a call's sizes."""

    def key(self, inputs: Sequence[Any]) -> tuple[int, ...]:
        """The call's sizes, read from its inputs."""

    def output_meta(self, index: int, key: tuple[int, ...]) -> TensorMeta | None:
        """User output ``index``'s metadata at the sizes ``key``."""

    def check_saved(self, saved: Sequence[Any], key: tuple[int, ...]) -> Sequence[Any]:
        """The saved values to pass to the backward at the sizes ``key``."""

    def backward_inputs(self, key: tuple[int, ...]) -> tuple[Any, ...]:
        """What the backward takes after its tangents at the sizes ``key``."""


def training_runner(
    forward: GraphFn,
    backward: GraphFn,
    aot: AotResult,
    plain_forward: GraphFn | None = None,
    *,
    saved_layouts: Sequence[TensorMeta | None] = (),
    direct_launch: DirectLauncher | None = None,
    sized: CallSizes | None = None,
    outputs_at: OutputsAt | None = None,
    backward_at: Callable[[tuple[int, ...]], GraphFn] | None = None,
) -> GraphRunner:
    """Forward and backward as one ``autograd.Function``; gradients reach the inputs
    listed in ``aot.grad_inputs``. ``plain_forward``: the forward without its unit
    gradients, run after a backward seeded with something other than 1 (see
    :class:`~torchstrata.runtime.unit_grads.UnitGrads`, which scales them with
    ``direct_launch`` on the GPU). ``saved_layouts``: the layouts the backward was built
    for, of the saved values (None, or no entry: as the backward graph's input says).
    ``sized``: for graphs lowered once for many sizes, the output shapes and saved
    layouts at each call's sizes (``aot``'s metadata and ``saved_layouts`` are then not
    read; ``outputs_at``: their aliases and views; ``backward_at``: the backward to run at
    a call's sizes, one that falls back on a size's first backward: decision 0485)."""
    num_user, mutated, aliases = output_layout(aot)
    forward = _unwrapped(forward)
    plain_forward = _unwrapped(plain_forward) if plain_forward is not None else None
    check_saved = _saved_layout_checker(aot, saved_layouts)
    num_mutations = len(mutated)
    tangent_outputs = tuple(aot.tangent_outputs)
    grad_inputs = tuple(aot.grad_inputs)
    returned = num_user + num_mutations
    metas = [node.meta for node in aot.forward.outputs[:returned]]
    num_saved = aot.num_saved
    unit_grads = UnitGrads(returned + num_saved, aot.num_unit_grads, direct_launch)
    differentiable = set(tangent_outputs)
    non_differentiable = tuple(i for i in range(returned) if i not in differentiable)
    # (forward output, input) of the differentiable write-backs: the forward may update
    # those inputs in place (``forward_contract``), the function then marks them dirty
    grad_writes = differentiable_writes(num_user, mutated, tangent_outputs)

    def zeros_like_output(index: int, ctx: Any) -> torch.Tensor:
        meta = metas[index] if sized is None else sized.output_meta(index, ctx.sizes)
        assert isinstance(meta, TensorMeta)
        return torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)

    class CompiledGraphFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: Any) -> Any:
            ctx.unit_pending = None
            if grad_writes:
                refuse_written_leaves(inputs, grad_writes)
            if plain_forward is None or unit_grads.expected():
                outputs = forward(*inputs)
                ctx.unit_grads = unit_grads.take(inputs, outputs)
                if ctx.unit_grads is not None:
                    ctx.unit_pending = unit_grads.watch()
            else:
                outputs, ctx.unit_grads = plain_forward(*inputs), None
            ctx.num_inputs = len(inputs)
            if sized is not None:
                ctx.sizes = sized.key(inputs)
            ctx.save_for_backward(*outputs[returned : returned + num_saved])
            if grad_writes:
                ctx.mark_dirty(*(inputs[i] for j, i in grad_writes if outputs[j] is inputs[i]))
            if non_differentiable:
                outputs = _apart_from_differentiable(outputs, returned, non_differentiable)
                ctx.mark_non_differentiable(
                    *(
                        outputs[i]
                        for i in non_differentiable
                        if isinstance(outputs[i], torch.Tensor)
                    )
                )
            return tuple(outputs[:returned])

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            tangents = [
                (grads[i] if grads[i] is not None else zeros_like_output(i, ctx)).contiguous()
                for i in tangent_outputs
            ]
            if unit_grads.count:
                unit_grads.observe(tangents[0])
            if ctx.unit_pending is not None:
                ctx.unit_pending.taken = True
            graph_mode = torch.is_grad_enabled()  # on only under create_graph=True
            if ctx.unit_grads is not None and not graph_mode:
                # the first backward only: a second one (through a retained graph) runs
                # the backward graph
                computed, ctx.unit_grads = unit_grads.scaled(ctx.unit_grads, tangents[0]), None
            else:
                run = backward if backward_at is None else backward_at(ctx.sizes)
                if sized is None:
                    saved = check_saved(ctx.saved_tensors)
                else:
                    saved = sized.check_saved(ctx.saved_tensors, ctx.sizes)
                    tangents.extend(sized.backward_inputs(ctx.sizes))
                if not graph_mode and not _keeps_graph():
                    # ctx lets go of the saved values: the list holds the only references,
                    # and the launcher frees each at its last use (decision 0411)
                    ctx.maybe_clear_saved_tensors()
                    args = [*saved, *tangents]
                    del saved, tangents
                    computed = call_boxed(run, args)
                elif not graph_mode:
                    computed = run(*saved, *tangents)
                else:
                    with torch.no_grad():
                        computed = run(*saved, *tangents)
                    computed = _once_differentiable(computed)
            result: list[Any] = [None] * ctx.num_inputs
            for index, grad in zip(grad_inputs, computed):
                result[index] = grad
            return tuple(result)

    all_tensors = all(isinstance(node.meta, TensorMeta) for node in aot.forward.inputs)
    apply = direct_apply(CompiledGraphFunction, all_tensors)
    views = output_views(aot)
    constants = tuple(aot.constants)
    grad_outputs, traced = frozenset(tangent_outputs), (aliases, views)
    if not mutated and not views and all(alias is None for alias in aliases):
        # Nothing to write back or rebuild: ``apply`` returns the user's outputs as they are.
        return _with_constants(apply, constants)

    def run(*inputs: Any) -> tuple[Any, ...]:
        outputs = apply(*inputs, *constants)
        at = traced if outputs_at is None else outputs_at(inputs)
        return _user_outputs(inputs, outputs, num_user, mutated, *at, grad_outputs)

    return run
