"""Peak tensor memory of one call, from the allocator's own records (any device).

``torch.profiler`` with ``profile_memory=True`` records every allocation and free of the
caching (or CPU) allocator as a ``[memory]`` event with a signed byte count; their running
sum over one call, in time order, is the memory the call's tensors hold, and its maximum
the call's peak above what was allocated before it. Unlike a resident-set estimate it
sees only tensors (no allocator caching, no page reuse), exactly and repeatably, so two
compilers' steps compare byte for byte (decision 0411).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.profiler import ProfilerActivity, profile


def allocator_peak(call: Callable[[], Any]) -> tuple[int, int]:
    """``(peak, end)``: the most bytes the tensors allocated during ``call()`` held at
    once, and the bytes they still hold when it returns (both above the start)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    held = peak = 0
    for event in events:
        held += event.nbytes()
        peak = max(peak, held)
    return peak, held
