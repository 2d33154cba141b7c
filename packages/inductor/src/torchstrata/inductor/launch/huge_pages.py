"""Large CPU buffers backed by transparent huge pages (decision 0233).

glibc serves an allocation above its largest mmap threshold (32 MB on 64-bit) with a
fresh ``mmap`` and unmaps it when freed, so a kernel that writes such a buffer faults in
every 4 KB page on every call: a cross-entropy gradient over a 50304-word vocabulary
(``[256, 50304]`` fp32, 51 MB) took 25 ms to write fresh against 7 ms into memory
already mapped (one thread). Where the kernel says ``madvise`` (transparent huge pages
in ``madvise`` mode, the usual default), advising the buffer's whole pages with
``MADV_HUGEPAGE`` before the first write makes 2 MB faults: 10-12 ms. Advice is a hint:
a kernel that refuses it, or a system without ``madvise``, runs as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

import torch

#: Bytes from which a CPU buffer is advised: glibc's largest mmap threshold (smaller
#: buffers come from the heap once one was freed, already mapped).
HUGE_PAGE_MIN_BYTES = 32 * 1024 * 1024
_MADV_HUGEPAGE = 14
_PAGE = 4096


def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _madvise()


def wants_huge_pages(nbytes: int, device: torch.device) -> bool:
    """Whether the launcher advises a fresh buffer of ``nbytes`` on ``device``."""
    return _MADVISE is not None and device.type == "cpu" and nbytes >= HUGE_PAGE_MIN_BYTES


def advise_huge_pages(tensor: torch.Tensor) -> None:
    """Ask for huge pages under the whole pages of ``tensor``'s storage (before it is
    written; a failure is ignored, the buffer stays as it is)."""
    if _MADVISE is None:
        return
    storage = tensor.untyped_storage()
    start = (storage.data_ptr() + _PAGE - 1) & ~(_PAGE - 1)
    end = (storage.data_ptr() + storage.nbytes()) & ~(_PAGE - 1)
    if end > start:
        _MADVISE(start, end - start, _MADV_HUGEPAGE)


def call_with_out(fn: Any, out: torch.Tensor, *args: Any) -> torch.Tensor:
    """``fn(*args, out=out)`` without autograd recording (ATen refuses ``out=`` when an
    operand requires grad under grad mode; a launcher's results carry no graph anyway)."""
    with torch.no_grad():
        return fn(*args, out=out)
