"""The process environment, read (and, for Triton's own variable, scoped) in one place.

The variables below are read nowhere else: code that needs one of them gets it from
:meth:`Environment.from_env`, called when the value is needed (never at import), so a
variable set by a script before it compiles is honoured. :func:`triton_interpret` is the
one variable torchstrata sets, for a block.

==========================  ==================================================================
variable                    meaning
==========================  ==================================================================
``TORCHSTRATA_CACHE_DIR``   root of the on-disk cache (``CompileOptions.cache_dir`` wins)
``XDG_CACHE_HOME``          the cache lives in ``$XDG_CACHE_HOME/torchstrata`` when neither of
                            the above is set (else ``~/.cache/torchstrata``)
``CXX``                     the C++ compiler the CPU backend runs (else ``g++``, else ``c++``);
                            may carry arguments (``"ccache g++"``)
``TORCHSTRATA_LOGS``        what to log (:mod:`torchstrata.core.logs`), with
``TORCHSTRATA_DEBUG_DIR``   a directory for one compile's dumps and
``TORCHSTRATA_PROGRESS``    progress lines on stderr (``1``/``0``)
``TRITON_INTERPRET``        Triton's own: ``1`` makes ``@triton.jit`` build interpreted kernels
==========================  ==================================================================
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

#: Overrides the cache location (below ``CompileOptions.cache_dir``).
CACHE_DIR_VARIABLE = "TORCHSTRATA_CACHE_DIR"
#: The XDG base directory for caches.
XDG_CACHE_VARIABLE = "XDG_CACHE_HOME"
#: The C++ compiler.
CXX_VARIABLE = "CXX"
#: The log settings (:mod:`torchstrata.core.logs`).
LOGS_VARIABLE = "TORCHSTRATA_LOGS"
DEBUG_DIR_VARIABLE = "TORCHSTRATA_DEBUG_DIR"
PROGRESS_VARIABLE = "TORCHSTRATA_PROGRESS"
LOG_VARIABLES = (LOGS_VARIABLE, DEBUG_DIR_VARIABLE, PROGRESS_VARIABLE)
#: Triton's interpreter switch, read by ``@triton.jit`` when it decorates.
TRITON_INTERPRET_VARIABLE = "TRITON_INTERPRET"


def _nonempty(value: str | None) -> str | None:
    return value if value else None


@attrs.frozen
class Environment:
    """What the environment says about torchstrata's settings (None where unset or empty)."""

    cache_dir: str | None = None
    xdg_cache_home: str | None = None
    cxx: str | None = None
    home: Path = attrs.field(factory=Path.home)
    #: The log variables that are set (:data:`LOG_VARIABLES`), as given.
    logs: Mapping[str, str] = attrs.field(factory=dict)
    #: ``TRITON_INTERPRET=1``.
    triton_interpret: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Environment:
        """Read the variables in the module docstring from ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        home = env.get("HOME")
        return cls(
            cache_dir=_nonempty(env.get(CACHE_DIR_VARIABLE)),
            xdg_cache_home=_nonempty(env.get(XDG_CACHE_VARIABLE)),
            cxx=_nonempty(env.get(CXX_VARIABLE)),
            home=Path(home) if home else Path.home(),
            logs={name: env[name] for name in LOG_VARIABLES if name in env},
            triton_interpret=env.get(TRITON_INTERPRET_VARIABLE, "0") == "1",
        )


@contextlib.contextmanager
def triton_interpret(enabled: bool) -> Iterator[None]:
    """``TRITON_INTERPRET`` set to ``enabled`` for the block, restored afterwards.

    ``@triton.jit`` reads the variable when it decorates: set, it makes an interpreted
    function (Triton's interpreter runs it on CPU tensors), unset a compiled one. The
    stages that decorate Triton kernels (the inductor, the runtime's gradient scaling) set
    it only around their own decorating and interpreted launches, and leave the process's
    value as it was: left set, every kernel decorated later would be interpreted."""
    previous = os.environ.get(TRITON_INTERPRET_VARIABLE)
    os.environ[TRITON_INTERPRET_VARIABLE] = "1" if enabled else "0"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[TRITON_INTERPRET_VARIABLE]
        else:
            os.environ[TRITON_INTERPRET_VARIABLE] = previous
