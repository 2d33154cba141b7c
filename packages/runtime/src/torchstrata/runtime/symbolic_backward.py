"""The backward of a training graph lowered once for many sizes, which falls back to its
ATen graph where its first call at a size raises (issue 33, decision 0485).

A forward lowered for many sizes that raises at a size's first call is run again per size
(:mod:`.first_calls`, decision 0430). Its backward runs later, after the forward's outputs
were returned, so the step cannot be run again; but the backward's inputs (the saved
values, the incoming gradients) are exactly what the autograd stage's ATen backward graph
takes. :class:`SizedBackward` gives the training runner the backward for a call's sizes
(``runners.training_runner``'s ``backward_at``): at sizes whose backward ran, the compiled
backward itself (no wrapper, no ``try``: its launcher frees each input at its last use,
decision 0411); at other sizes a :class:`FirstBackward`, which keeps references to the
inputs for the one call, and where the compiled backward raises warns
(``TorchstrataFallbackWarning``, once per lowering, naming the error and the sizes),
counts ``fallback: first backward: <reason>`` in ``size_lowering_stats()``, and runs the
ATen backward graph at those sizes in the reference interpreter on the same inputs: eager's
ATen ops, eager's gradients. Later backwards at those sizes run that graph. An error of
the compiled backward at sizes where it ran before is the call's own and is raised as it
is (as a forward's at a size whose first call ran, decision 0430).

No fallback, the error raised with :data:`BACKWARD_NOTE` (and a note saying why), where:

- no ATen backward graph is at hand: a lowering read from the compiled-graph cache
  (decision 0450) takes it from the entry's symbolic trace, made at the first fallback,
  and only where that trace's partition at the stored lowering's sizes is the stored one
  (:mod:`.symbolic_cache`); one made with no symbolic traces keeps no references at all;
- the compiled backward wrote one of its inputs in place before it failed (its version
  counter moved): run again, that update would count twice. Generated kernels write only
  buffers their launcher allocates, and autograd accumulates ``.grad`` only after the
  backward returned, so this is a third-party codegen's (or an injected) failure;
- the ATen graph raises too: the call's own error (an index out of range), as eager's;
  nothing is recorded, and the next backward at these sizes tries the compiled one again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import Graph, interpret
from torchstrata.runtime.errors import TorchstrataFallbackWarning
from torchstrata.runtime.first_calls import restore_rng_states, rng_states
from torchstrata.runtime.runners import GraphFn, call_boxed
from torchstrata.runtime.size_variants import count, failure_reason

#: The ATen backward graph at the sizes given (symbol name -> int), its sizes static.
EagerBackward = Callable[[Mapping[str, int]], Graph | None]

#: The last note of a backward's exception that did not fall back.
BACKWARD_NOTE = (
    "torchstrata: the backward of a training graph lowered once for many sizes raised and "
    "could not fall back to its ATen graph; compile with options={'symbolic_lowering': "
    "False} to lower each size on its own"
)

#: Why a lowering made with no symbolic traces does not fall back.
NO_GRAPH = "this lowering keeps no ATen backward graph"

#: Why a backward that wrote an input does not fall back.
WROTE_INPUT = (
    "the backward wrote one of its inputs in place before it failed: run again, that "
    "update would count twice"
)


class SizedBackward:
    """A compiled backward lowered for many sizes, and what runs at each call's sizes.

    :param fn: the compiled backward (saved values, tangents, size carrier in).
    :param names: the symbols, in the order of a call's size key (sorted by name).
    :param eager: the ATen backward graph at given sizes (its inputs the saved values and
        the tangents, no size carrier); None: no fallback (see the module docstring).
    """

    def __init__(
        self, fn: GraphFn, names: Sequence[str], eager: EagerBackward | None = None
    ) -> None:
        self.fn = fn
        self.names = tuple(names)
        self.eager = eager
        #: sizes -> the backward that runs there: ``fn`` once a first call ran, the
        #: ATen graph once one fell back
        self.settled: dict[tuple[int, ...], GraphFn] = {}
        self._warned = False

    def at(self, key: tuple[int, ...]) -> GraphFn:
        """The backward to run at the sizes ``key`` (``runners.CallSizes.key``)."""
        found = self.settled.get(key)
        return found if found is not None else FirstBackward(self, key)

    def fall_back(self, key: tuple[int, ...], error: Exception) -> GraphFn | None:
        """The ATen backward graph at the sizes ``key`` as a function of the compiled
        backward's inputs (the size carrier dropped); None where there is none (where
        making it raised, a note on ``error`` says so)."""
        if self.eager is None:
            return None
        try:
            graph = self.eager(dict(zip(self.names, key, strict=True)))
        except Exception as failed:  # noqa: BLE001 - no fallback: the error says why
            error.add_note(f"torchstrata: its ATen graph was not made ({failure_reason(failed)})")
            return None
        if graph is None:
            return None
        taken = len(graph.inputs)

        def run(*inputs: Any) -> tuple[Any, ...]:
            return interpret(graph, *inputs[:taken])

        return run

    def fell_back(self, key: tuple[int, ...], error: Exception, fallback: GraphFn) -> None:
        """Record that the first backward at ``key`` fell back to ``fallback`` after
        ``error``: counted, warned (once per lowering), ``fallback`` runs there from now."""
        reason = failure_reason(error)
        count(f"fallback: first backward: {reason}")
        self.settled[key] = fallback
        if not self._warned:
            self._warned = True
            values = dict(zip(self.names, key, strict=True))
            warnings.warn(
                f"torchstrata: the compiled backward of a training graph lowered once for "
                f"many sizes failed at its first call at sizes {values} ({reason}); the "
                "backward at these sizes runs its ATen graph uncompiled (gradients as "
                "eager's)",
                TorchstrataFallbackWarning,
                stacklevel=2,
            )


class FirstBackward:
    """The first backward at the sizes ``key`` of a :class:`SizedBackward`: the compiled
    backward, with its inputs kept alive for the ATen graph where it raises. Called as
    the compiled function, or boxed (``runners.call_boxed``)."""

    __slots__ = ("key", "owner")

    def __init__(self, owner: SizedBackward, key: tuple[int, ...]) -> None:
        self.owner = owner
        self.key = key

    def __call__(self, *inputs: Any) -> Sequence[Any]:
        return self.boxed(list(inputs))

    def boxed(self, inputs: list[Any]) -> Sequence[Any]:
        """The backward on ``inputs``, emptying the list."""
        owner = self.owner
        # the launcher frees each input at its last use: kept, they outlive a failure
        kept = list(inputs) if owner.eager is not None else []
        versions = _versions(kept)
        states = rng_states() if kept else None
        try:
            computed = call_boxed(owner.fn, inputs)
        except Exception as error:
            why = NO_GRAPH if owner.eager is None else ""
            if not why and _versions(kept) != versions:
                why = WROTE_INPUT
            fallback = None if why else owner.fall_back(self.key, error)
            if fallback is None:
                kept.clear()  # the traceback keeps this frame: not the inputs with it
                error.add_note(f"torchstrata: {why or 'no ATen backward graph at these sizes'}")
                error.add_note(BACKWARD_NOTE)
                raise
            if states is not None:
                restore_rng_states(states)
            try:
                computed = fallback(*kept)
            except Exception as failed:  # eager's error too: the call's own
                kept.clear()
                error.add_note(f"torchstrata: its ATen graph raised too ({failure_reason(failed)})")
                error.add_note(BACKWARD_NOTE)
                raise error from failed
            owner.fell_back(self.key, error, fallback)
            return computed
        owner.settled[self.key] = owner.fn
        return computed


def _versions(tensors: Sequence[Any]) -> list[int]:
    """The version counters of ``tensors`` (an in-place ATen op or a ``copy_`` moves one)."""
    return [t._version if isinstance(t, torch.Tensor) else -1 for t in tensors]
