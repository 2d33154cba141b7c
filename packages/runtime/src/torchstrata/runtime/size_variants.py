"""A symbolic entry's lowerings that serve many sizes (issue 33, decision 0381).

:class:`SizeSpecialisedRunner <torchstrata.runtime.dynamic_shapes.SizeSpecialisedRunner>`
asks :class:`SizeVariants` for a new size's runner before it lowers the size on its own.
A variant is one symbolic lowering (sizes as ``core.SizeValue``) with the conditions on
sizes it relied on: a size that meets every condition of a variant runs it, with no
lowering. A size that meets none is lowered symbolically again (at most
``max_variants``). A symbolic lowering that fails (a site that reads a size as a number,
``core.SizeRead``; a ``TypeError`` or ``NotImplementedError`` of a site not ported; any
other error) is counted, with its reason, in :func:`size_lowering_stats`, and the size
lowers on its own. Where the failure came with the conditions on sizes decided before it
(:class:`SizeSpecificFailure`), only the sizes that meet them lower per size from then
on: a size that does not takes another path through the stages and is tried again
(lowerings made and failed count together against ``max_variants``). Any other failure
makes the entry lower per size from then on. A variant whose first call at a size it
serves raises falls back for that size (:mod:`.first_calls`, decision 0430):
:meth:`SizeVariants.first_call_failed` counts and warns.
"""

from __future__ import annotations

import collections
import functools
import logging
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch

from torchstrata.core import CompiledGraph, Graph, artifact_logger
from torchstrata.core.options import SYMBOLIC_LOWERINGS
from torchstrata.runtime.errors import TorchstrataFallbackWarning

logger = logging.getLogger("torchstrata.runtime")
dynamic_log = artifact_logger(__name__, "dynamic")

#: How many lowerings serve many sizes at most per entry (then sizes lower per size):
#: the default of the compile option ``symbolic_lowerings`` (decision 0435).
MAX_VARIANTS = SYMBOLIC_LOWERINGS

#: A lowering whose first call failed at this many sizes serves no new size (decision
#: 0430): a failure that is not one size's own costs a failed call per size no longer.
MAX_FIRST_CALL_FAILURES = 2


@attrs.frozen
class CompiledPart:
    """One graph a lowering for many sizes compiled: the sized prims ``graph`` (sizes
    ``core.SizeValue``), the ``device`` it was compiled for, and the codegen stage's
    result."""

    graph: Graph
    device: torch.device
    compiled: CompiledGraph


@attrs.frozen
class SymbolicLowering:
    """One lowering for many sizes: its ``runner`` (takes the graph's inputs at any
    size it serves) and ``serves(values)``: whether the sizes ``values`` (symbol name ->
    int) meet every condition it relied on. ``conditions``: their text, for logs.
    ``from_cache``: read from the compiled-graph cache (decision 0450), not lowered.
    ``writes``: the positions of the inputs the runner writes (write-backs, decision
    0445), put back where a first call fails (:mod:`.first_calls`). ``compiled``: the
    graphs it compiled, the forward then a training graph's backward (what its
    compiled-graph cache entry stores and ``explain()`` shows; none when read from the
    cache)."""

    runner: Callable[..., Any]
    serves: Callable[[Mapping[str, int]], bool]
    conditions: tuple[str, ...] = ()
    from_cache: bool = False
    writes: tuple[int, ...] = ()
    compiled: tuple[CompiledPart, ...] = ()


class SizeSpecificFailure(Exception):
    """A symbolic lowering failed after deciding conditions on sizes: ``repeats(values)``
    says whether the sizes ``values`` meet every one of them (their lowering would take
    the same path to the same failure). Its ``__cause__`` is the failure."""

    def __init__(self, repeats: Callable[[Mapping[str, int]], bool]) -> None:
        super().__init__("a symbolic lowering failed at these sizes")
        self.repeats = repeats


#: Lowers a symbolic graph at the sizes ``values`` (its hints) for every size that meets
#: the conditions it records; raises where it cannot (the size is lowered on its own).
LowerSymbolic = Callable[[Mapping[str, int]], SymbolicLowering]

#: this process's counts: "symbolic" (lowerings that serve many sizes), "cached" (such
#: lowerings read from the compiled-graph cache), "reused" (new
#: sizes that ran one of them), "per_size" (sizes lowered on their own), "fallback: why"
_COUNTS: collections.Counter[str] = collections.Counter()


def size_lowering_stats() -> dict[str, int]:
    """A copy of this process's counts of how the new sizes of symbolic entries were
    served: ``symbolic`` (lowered once for many sizes), ``cached`` (such a lowering read
    from the compiled-graph cache, no lowering: decision 0450), ``reused`` (a new size
    that ran such a lowering, no lowering), ``per_size`` (lowered for its own sizes), and
    ``fallback: <reason>`` (an entry whose symbolic lowering failed, why; ``fallback: first
    call: <reason>``: a size it serves whose first call raised, run per size)."""
    return dict(_COUNTS)


def reset_size_lowering_stats() -> None:
    """Set every count of :func:`size_lowering_stats` to zero."""
    _COUNTS.clear()


def count(what: str) -> None:
    """Add one to the count ``what`` (of :func:`size_lowering_stats`)."""
    _COUNTS[what] += 1


def _same_values(failed: Mapping[str, int], values: Mapping[str, int]) -> bool:
    return dict(values) == failed


def failure_reason(error: BaseException) -> str:
    """``error`` as a count's reason: its type and the first line of its message."""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:160]}"


class SizeVariants:
    """The symbolic lowerings of one entry, each serving the sizes that meet its
    conditions.

    :param lower: lowers the entry's graph symbolically at a call's sizes.
    :param max_variants: symbolic lowerings made at most.
    """

    def __init__(self, lower: LowerSymbolic, max_variants: int = MAX_VARIANTS) -> None:
        self.lower = lower
        self.max_variants = max_variants
        self.variants: list[SymbolicLowering] = []
        #: why the entry lowers per size ('' while symbolic lowering is tried)
        self.fallback = ""
        #: ``repeats`` of each failure that was the failing sizes' own
        self.failures: list[Callable[[Mapping[str, int]], bool]] = []
        #: this entry's counts (as :func:`size_lowering_stats`)
        self.counts: collections.Counter[str] = collections.Counter()
        #: ``id`` of a variant's runner -> the served sizes whose first call it failed
        self.first_failures: collections.Counter[int] = collections.Counter()

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        count(what)

    def runner_for(self, values: Mapping[str, int]) -> Callable[..., Any] | None:
        """A runner for the sizes ``values`` from a symbolic lowering (an existing one
        that serves them, or a new one); None where they are to be lowered on their own."""
        made = self.lowering_for(values)
        return None if made is None else made.runner

    def lowering_for(self, values: Mapping[str, int]) -> SymbolicLowering | None:
        """The symbolic lowering that runs the sizes ``values`` (an existing one that
        serves them, or a new one); None where they are to be lowered on their own."""
        for variant in self.variants:
            if variant.serves(values):
                if self.first_failures.get(id(variant.runner), 0) >= MAX_FIRST_CALL_FAILURES:
                    return None  # its first calls failed too often: sizes lower per size
                self._count("reused")
                return variant
        if self.fallback or len(self.variants) + len(self.failures) >= self.max_variants:
            return None
        if any(repeats(values) for repeats in self.failures):
            return None
        try:
            made = self.lower(values)
        except SizeSpecificFailure as failure:
            self.failures.append(failure.repeats)
            cause = failure.__cause__ if failure.__cause__ is not None else failure
            self._fail(values, failure_reason(cause))
            return None
        except Exception as error:  # noqa: BLE001 - the size lowers on its own, as before
            self.fallback = failure_reason(error)
            self._fail(values, self.fallback)
            return None
        self.variants.append(made)
        self._count("cached" if made.from_cache else "symbolic")
        if not made.serves(values):
            # the sizes break a condition of the symbolic trace or decomposition (made at
            # the entry's first size; ``Ne(s0, 2)``): they lower on their own, and the
            # lowering serves the sizes that meet its conditions (decision 0408)
            self.failures.append(functools.partial(_same_values, dict(values)))
            self._fail(values, "sizes that the symbolic decomposition does not serve")
            return None
        dynamic_log.debug(
            "sizes %s: lowered for every size where %s",
            dict(values),
            " and ".join(made.conditions) or "always",
        )
        return made

    def first_call_failed(
        self, values: Mapping[str, int], runner: Callable[..., Any], error: Exception
    ) -> None:
        """The first call of ``runner`` (a variant's) at the sizes ``values`` it serves
        raised ``error`` (decision 0430): counted (``fallback: first call: <reason>``),
        warned (a :class:`TorchstrataFallbackWarning`, once per variant); the sizes lower
        on their own (the caller's), and after ``MAX_FIRST_CALL_FAILURES`` such sizes
        the variant serves no new size."""
        reason = failure_reason(error)
        failures = self.first_failures[id(runner)] = self.first_failures[id(runner)] + 1
        self._fail(values, f"first call: {reason}")
        if failures == 1:
            warnings.warn(
                f"torchstrata: a lowering of a symbolic graph for many sizes failed at its "
                f"first call at sizes {dict(values)} ({reason}); these sizes are lowered on "
                "their own (their result is not affected)",
                TorchstrataFallbackWarning,
                stacklevel=5,
            )
        if failures == MAX_FIRST_CALL_FAILURES:
            logger.info(
                "a symbolic lowering failed at the first call of %d sizes: new sizes it "
                "serves lower per size",
                failures,
            )

    def _fail(self, values: Mapping[str, int], reason: str) -> None:
        self._count(f"fallback: {reason}")
        logger.info("sizes %s: lowering per size (%s)", dict(values), reason)
