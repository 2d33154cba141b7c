"""The first call of a symbolic lowering at each size it serves, run with a fallback
(issue 33, decision 0430).

A lowering made once for many sizes (:mod:`.size_variants`) does work at a served size's
first call that no earlier size did: a Triton kernel tunes its configuration for a new
bucket of rows, a generated launcher evaluates its size functions, a kernel is launched
at a size for the first time. Where that raises, the call must not fail (nor return a
wrong number): :class:`FirstCall` runs a size's first call, and on an exception lowers
the sizes on their own (the per-size path), which runs the call and serves the size from
then on; where that raises too, the error is the call's (eager's as well) and propagates.

Retrying is safe because no user tensor keeps what the failed call wrote: the inputs a
lowering writes (its write-backs, ``SymbolicLowering.writes``; an inference forward's
ATen updates may run on them in place, decision 0445) are copied before a size's first
call and put back before the retry, where they hold at most :data:`COPIED_WRITES_BYTES`;
larger ones (a KV cache) are not copied, and a call that moved their version counter (a
``copy_`` or an in-place ATen op: generated kernels write only buffers they allocate)
before failing raises with :data:`WRITTEN_NOTE` instead of a retry; an inference forward's kernels write no other tensor
than the buffers they allocate, outputs rebuilt as views of inputs are made after the
kernels ran, and a training runner's forward raises inside ``autograd.Function.forward``
before any output or saved value is recorded. The RNG states (the CPU's, and CUDA's when it is initialised)
are taken before the first call and put back before the retry, so a graph that draws
random numbers draws the same ones as the call would have. A training graph's
backward runs later, after its outputs were returned: its first call at a size falls
back to its ATen graph instead (:mod:`.symbolic_backward`, decision 0485).

After a size's first call succeeds, the size's entry in the runner's table is the
lowering's runner itself: later calls run no ``try``, no wrapper frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def rng_states() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """The RNG states a first call may draw from: the CPU's, and CUDA's when it is
    initialised (put back with :func:`restore_rng_states` before a retry)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def restore_rng_states(states: tuple[torch.Tensor, list[torch.Tensor] | None]) -> None:
    """Put back the RNG states :func:`rng_states` took."""
    cpu, cuda = states
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


#: Written inputs of at most this many bytes in all are copied before a size's first call
#: (put back on a failure); larger ones (a KV cache) are not: a copy per new size would
#: cost what the update saves.
COPIED_WRITES_BYTES = 16 << 20

#: The note of a first call's error that cannot fall back (it wrote an input).
WRITTEN_NOTE = (
    "torchstrata: this call of a graph lowered once for many sizes failed after it wrote "
    "an input in place, so it cannot be run again per size; compile with "
    "options={'symbolic_lowering': False} to lower each size on its own"
)


def _copies(inputs: tuple[Any, ...], writes: tuple[int, ...]) -> list[Any] | None:
    """Copies of the tensors among ``inputs`` at the positions ``writes``; None where
    they hold more than :data:`COPIED_WRITES_BYTES`."""
    tensors = [inputs[i] for i in writes if isinstance(inputs[i], torch.Tensor)]
    if sum(t.untyped_storage().nbytes() for t in tensors) > COPIED_WRITES_BYTES:
        return None
    with torch.no_grad():
        return [inputs[i].clone() if isinstance(inputs[i], torch.Tensor) else None for i in writes]


def _versions(inputs: tuple[Any, ...], writes: tuple[int, ...]) -> list[int]:
    """The version counters of the inputs at ``writes`` (an in-place ATen op or a
    ``copy_`` moves one: the only ways a lowering writes an input)."""
    return [inputs[i]._version if isinstance(inputs[i], torch.Tensor) else 0 for i in writes]


def _put_back(inputs: tuple[Any, ...], writes: tuple[int, ...], kept: list[Any]) -> None:
    """The inputs at ``writes`` given their values of before the call back (``kept``)."""
    with torch.no_grad():
        for index, copy in zip(writes, kept, strict=True):
            if copy is not None:
                inputs[index].copy_(copy)


class FirstCall:
    """Runs ``runner``'s first call at the sizes ``key``; then ``runners[key]`` is
    ``runner`` (success) or the per-size runner (failure), which also runs that call.

    A call that the per-size runner fails too (an index out of range at these sizes:
    eager raises as well) is the call's own error, not the lowering's: it propagates,
    nothing is recorded, and the next call at these sizes tries ``runner`` again.

    :param runner: a symbolic lowering's runner, not run at these sizes yet.
    :param key: the sizes (the runner table's key).
    :param runners: the table the dispatch looks sizes up in (``key`` -> runner).
    :param per_size: lowers the sizes on their own (called once, on a failure).
    :param failed: records the failure (given the exception: counts, warns), once the
        per-size runner ran the call.
    :param writes: the positions of the inputs ``runner`` writes: copied before the call
        and put back on a failure (see the module docstring for large ones).
    """

    __slots__ = ("failed", "key", "per_size", "runner", "runners", "substitute", "writes")

    def __init__(
        self,
        runner: Callable[..., Any],
        key: tuple[int, ...],
        runners: dict[tuple[int, ...], Callable[..., Any]],
        per_size: Callable[[], Callable[..., Any]],
        failed: Callable[[Exception], None],
        writes: tuple[int, ...] = (),
    ) -> None:
        self.writes = writes
        self.runner = runner
        self.key = key
        self.runners = runners
        self.per_size = per_size
        self.failed = failed
        #: the per-size runner, once a failure made it
        self.substitute: Callable[..., Any] | None = None

    def __call__(self, *inputs: Any) -> Any:
        states = rng_states()
        kept = _copies(inputs, self.writes) if self.writes else []
        versions = _versions(inputs, self.writes) if kept is None else []
        try:
            result = self.runner(*inputs)
        except Exception as error:  # the size is served otherwise, not wrongly
            if kept is None and _versions(inputs, self.writes) != versions:
                error.add_note(WRITTEN_NOTE)  # not put back: a retry would write it twice
                raise
            if self.substitute is None:
                self.substitute = self.per_size()
            restore_rng_states(states)
            if kept:
                _put_back(inputs, self.writes, kept)
            result = self.substitute(*inputs)  # raises where the call itself is at fault
            self.failed(error)
            self.runners[self.key] = self.substitute
            return result
        current: object = self.runners.get(self.key)
        if current is self:
            self.runners[self.key] = self.runner
        return result


def settled(runner: Callable[..., Any]) -> Callable[..., Any]:
    """``runner``, or the runner its first call settled on where it is a
    :class:`FirstCall` that ran (what a route keeps: no wrapper per call)."""
    if isinstance(runner, FirstCall):
        found = runner.runners.get(runner.key)
        if found is not None and not isinstance(found, FirstCall):
            return found
    return runner
