"""The contenders of ``bench.dynamic_sizes``: their row names, the short names
``--contenders`` takes, and the time budget that skips the turns starting after it."""

from __future__ import annotations

import time
from collections.abc import Callable

EAGER = "eager"
DYNAMIC = "torchstrata dynamic"
#: "per size": the compile option ``symbolic_lowering`` off, each size of the symbolic
#: entry lowered on its own (decision 0381's before)
PER_SIZE_LOWERING = "torchstrata dynamic, lowered per size"
STATIC = "torchstrata static"
#: On the GPU also: a static compile per size with a kernel cache of its own, so every
#: size's launch configurations are tuned at that size (the others share a tuned
#: configuration within a power-of-two bucket of rows, decision 0225): what the buckets cost.
EXACT_TUNING = "torchstrata static, tuned per size"
INDUCTOR = "torch.compile dynamic"
#: With ``--dynamo``: ``torch.compile(fn, backend="torchstrata")``, Dynamo's graph with
#: symbolic sizes lowered once for many sizes (decision 0455), and lowered per size
#: (``symbolic_lowering`` off: the backend before 0455)
DYNAMO_BACKEND = "torch.compile torchstrata backend"
DYNAMO_PER_SIZE = "torch.compile torchstrata backend, lowered per size"

#: ``--contenders`` short name -> the row's contender, in the bench's order (the order the
#: contenders compile in and start the steady rounds in)
SHORT_NAMES = {
    "eager": EAGER,
    "dynamic": DYNAMIC,
    "per-size": PER_SIZE_LOWERING,
    "static": STATIC,
    "static-tuned": EXACT_TUNING,
    "compile": INDUCTOR,
    "dynamo": DYNAMO_BACKEND,
    "dynamo-per-size": DYNAMO_PER_SIZE,
}


def default_contenders(cuda: bool, no_compile: bool, dynamo: bool) -> list[str]:
    """The contenders of a run without ``--contenders``: eager, the three torchstrata ones
    (and the static one tuned per size on the GPU), ``torch.compile`` unless
    ``no_compile``, the Dynamo backend's two with ``dynamo``."""
    names = [EAGER, DYNAMIC, PER_SIZE_LOWERING, STATIC]
    names += [EXACT_TUNING] if cuda else []
    names += [] if no_compile else [INDUCTOR]
    names += [DYNAMO_BACKEND, DYNAMO_PER_SIZE] if dynamo else []
    return names


def select_contenders(text: str) -> list[str]:
    """The contenders named in ``text`` (comma-separated short names of
    :data:`SHORT_NAMES`), in the bench's order, each once.

    Raises ``ValueError`` naming the valid short names for an unknown or empty one."""
    parts = [part.strip() for part in text.split(",")]
    unknown = [part for part in parts if part not in SHORT_NAMES]
    if unknown:
        valid = ", ".join(SHORT_NAMES)
        raise ValueError(f"unknown contender {', '.join(map(repr, unknown))}; valid: {valid}")
    chosen = {SHORT_NAMES[part] for part in parts}
    return [name for name in SHORT_NAMES.values() if name in chosen]


def is_torch_compile(name: str) -> bool:
    """Whether contender ``name`` compiles through ``torch.compile`` (Dynamo)."""
    return name in (INDUCTOR, DYNAMO_BACKEND, DYNAMO_PER_SIZE)


class Budget:
    """Seconds of wall time a run may start turns in: a contender's turn (its first calls
    at a workload) that would start after them is skipped, so a run ends about a turn's
    length (and the steady rounds of what compiled) after the budget. ``None``: no limit."""

    def __init__(
        self, seconds: float | None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.seconds, self.clock = seconds, clock
        self.start = clock()

    def spent(self) -> str | None:
        """``None`` while a turn may start; else the reason its row gives for the skip."""
        elapsed = self.clock() - self.start
        if self.seconds is None or elapsed < self.seconds:
            return None
        return f"skipped: budget {self.seconds:g} s spent ({elapsed:.0f} s in)"
