"""``TRITON_INTERPRET``, set only while Triton needs it for an interpreted kernel.

``@triton.jit`` reads the variable when it decorates: set, it makes an interpreted
function (run on CPU tensors by Triton's interpreter), unset a compiled one. Kernels for
CPU tensors are therefore decorated with it set, and launched with it set (parts of the
interpreter consult it while a kernel runs). Everywhere else the process keeps the value
it had: left set, it would turn every kernel decorated later in the process into an
interpreted one, the user's own Triton kernels and torch.compile's included, and on the
GPU (the runtime's unit-gradient scaling once picked its kernel by the variable, and
scaled part of each GPU gradient with an interpreted kernel).

An interpreted launch runs with NumPy's floating-point warnings off: the interpreter
computes masked-out lanes too (a reciprocal of an empty row's sum: ``1/0``), which a GPU
computes without a word, and a caller that turns warnings into errors would see them
fail (the dynamic corpus on ``codegen="triton"``; decision 0400).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy

from torchstrata.core.env_options import triton_interpret

__all__ = ["interpreted", "library_compiled", "triton_interpret"]


def interpreted(launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` (of an interpreted kernel) run with ``TRITON_INTERPRET=1``."""

    @functools.wraps(launch)
    def run(*args: Any, **kwargs: Any) -> Any:
        with triton_interpret(True), numpy.errstate(all="ignore"):
            return launch(*args, **kwargs)

    return run


def library_compiled() -> bool:
    """Whether Triton's own ``@triton.jit`` library (``tl.sum``...) was decorated as
    compiled functions: Triton was imported without ``TRITON_INTERPRET=1``. Otherwise a
    GPU kernel that calls into it fails to compile, with a message naming neither."""
    import triton
    import triton.language as tl

    return isinstance(tl.standard.sum, triton.runtime.JITFunction)
