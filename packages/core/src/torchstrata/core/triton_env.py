"""``TRITON_INTERPRET`` for a block (no Triton import here).

``@triton.jit`` reads the variable when it decorates: set, it makes an interpreted
function (Triton's interpreter runs it on CPU tensors), unset a compiled one. The stages
that decorate Triton kernels (the inductor, the runtime's gradient scaling) set it only
around their own decorating and interpreted launches, and leave the process's value as
it was: left set, every kernel decorated later in the process would be interpreted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def triton_interpret(enabled: bool) -> Iterator[None]:
    """``TRITON_INTERPRET`` set to ``enabled`` for the block, restored afterwards."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if enabled else "0"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous
