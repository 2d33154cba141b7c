"""What one lowering for many sizes relied on, noted while it is made, for its
compiled-graph cache entry (decision 0450): the trace and conditions it relied on
(:func:`note_lowering`), a training runner's metadata (:func:`note_training`) and the
symbolic layouts of outputs that alias inputs or each other (:func:`note_outputs`), each
noted where it is made rather than worked out again from the lowering's result. The
graphs it compiled are the lowering's own (``SymbolicLowering.compiled``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import attrs

from torchstrata.core import SymbolicAot


@attrs.define
class Recording:
    """What one symbolic lowering relied on: the trace and conditions, a training
    runner's metadata and its outputs' view layouts."""

    traced: SymbolicAot | None = None
    relied: tuple[Any, ...] = ()
    #: the ``symbolic_training.TrainingMetas`` a training runner was made with
    training: Any = None
    #: the ``symbolic_outputs.ViewLayouts`` its runner rebuilds output views from
    outputs: Any = None


_RECORDING: contextvars.ContextVar[Recording | None] = contextvars.ContextVar(
    "torchstrata_symbolic_recording", default=None
)


def note_lowering(traced: SymbolicAot, relied: tuple[Any, ...]) -> None:
    """Note in the recording in progress (if any) the trace a lowering was made from and
    the conditions it relied on beyond the trace's (the decomposition's, the codegen's)."""
    recording = _RECORDING.get()
    if recording is not None:
        recording.traced, recording.relied = traced, relied


def note_training(metas: Any) -> None:
    """Note in the recording in progress (if any) the metadata a training runner for
    many sizes was made with (``symbolic_training.TrainingMetas``)."""
    recording = _RECORDING.get()
    if recording is not None:
        recording.training = metas


def note_outputs(layouts: Any) -> None:
    """Note in the recording in progress (if any) the symbolic layouts of the outputs
    that alias inputs or each other (``symbolic_outputs.ViewLayouts``, decision 0505)."""
    recording = _RECORDING.get()
    if recording is not None:
        recording.outputs = layouts


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Within the block, what a lowering makes is noted in the recording it gives."""
    made = Recording()
    token = _RECORDING.set(made)
    try:
        yield made
    finally:
        _RECORDING.reset(token)
