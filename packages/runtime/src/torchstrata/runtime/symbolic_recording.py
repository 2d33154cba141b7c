"""What one lowering for many sizes made, noted while it is made, for its compiled-graph
cache entry (decision 0450): the codegen stage's results (:class:`RecordingPipeline`),
the trace and conditions it relied on (:func:`note_lowering`), and a training runner's
metadata (:func:`note_training`), each noted where it is made rather than worked out
again from the lowering's result.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import attrs
import torch

from torchstrata.core import CompiledGraph, CompileOptions, Graph, SymbolicAot


@attrs.define
class Recording:
    """What one symbolic lowering made: each compiled graph (the sized prims graph, its
    device, the codegen stage's result), the trace and conditions it relied on, and a
    training runner's metadata."""

    compiled: list[tuple[Graph, torch.device, CompiledGraph]] = attrs.Factory(list)
    traced: SymbolicAot | None = None
    relied: tuple[Any, ...] = ()
    #: the ``symbolic_training.TrainingMetas`` a training runner was made with
    training: Any = None


_RECORDING: contextvars.ContextVar[Recording | None] = contextvars.ContextVar(
    "torchstrata_symbolic_recording", default=None
)


def note_lowering(traced: SymbolicAot, relied: tuple[Any, ...]) -> None:
    """Note in the recording in progress (if any) the trace a lowering was made from and
    the conditions it relied on beyond the trace's (the decomposition's, the codegen's)."""
    recording = _RECORDING.get()
    if recording is not None:
        recording.traced, recording.relied = traced, relied


class RecordingPipeline:
    """``pipeline``, whose codegen stage's results are noted in the recording in progress:
    what a symbolic lowering compiled, for its cache entry."""

    def __init__(self, pipeline: Any) -> None:
        self._pipeline = pipeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipeline, name)

    def _call_stage(self, stage: str, options: CompileOptions, **kwargs: Any) -> Any:
        result = self._pipeline._call_stage(stage, options, **kwargs)
        recording = _RECORDING.get()
        if recording is not None and stage == "codegen" and isinstance(result, CompiledGraph):
            recording.compiled.append((kwargs["graph"], kwargs["device"], result))
        return result


def note_training(metas: Any) -> None:
    """Note in the recording in progress (if any) the metadata a training runner for
    many sizes was made with (``symbolic_training.TrainingMetas``)."""
    recording = _RECORDING.get()
    if recording is not None:
        recording.training = metas


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Within the block, what a lowering makes is noted in the recording it gives."""
    made = Recording()
    token = _RECORDING.set(made)
    try:
        yield made
    finally:
        _RECORDING.reset(token)
