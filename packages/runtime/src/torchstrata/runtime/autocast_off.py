"""Compiled graphs run with autocast off: the capture wrote its casts into them.

Under autocast the capture traces every op with the casts autocast makes in eager
(``torchstrata.capture``'s ``autocast.py``), so the graph computes eager's dtypes by
itself. Running it under autocast again would let ATen calls in the compiled code (a
matmul left to ATen, say) be cast a second time, so the stages compile it, and the
runner runs it, with autocast switched off for the device types it was on for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch


@contextlib.contextmanager
def autocast_off(devices: Sequence[str]) -> Iterator[None]:
    """Autocast switched off for ``devices`` within the block (then as it was)."""
    for device in devices:
        torch.set_autocast_enabled(device, False)
    try:
        yield
    finally:
        for device in devices:
            torch.set_autocast_enabled(device, True)


def without_autocast(fn: Callable[..., Any], devices: Sequence[str]) -> Callable[..., Any]:
    """``fn`` run with autocast off for ``devices`` (each on when it is called: the
    runner belongs to an entry guarded on that state)."""
    devices = tuple(devices)

    def run(*args: Any) -> Any:
        for device in devices:
            torch.set_autocast_enabled(device, False)
        try:
            return fn(*args)
        finally:
            for device in devices:
                torch.set_autocast_enabled(device, True)

    return run
