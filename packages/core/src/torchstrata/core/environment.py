"""The environment variables of the cache and the C++ build, read in one place.

These variables are read nowhere else: code that needs one of them gets it
from :meth:`Environment.from_env`, called when the value is needed (never at import), so a
variable set by a script before it compiles is honoured.

==========================  ==================================================================
variable                    meaning
==========================  ==================================================================
``TORCHSTRATA_CACHE_DIR``   root of the on-disk cache (``CompileOptions.cache_dir`` wins)
``XDG_CACHE_HOME``          the cache lives in ``$XDG_CACHE_HOME/torchstrata`` when neither of
                            the above is set (else ``~/.cache/torchstrata``)
``CXX``                     the C++ compiler the CPU backend runs (else ``g++``, else ``c++``);
                            may carry arguments (``"ccache g++"``)
==========================  ==================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

#: Overrides the cache location (below ``CompileOptions.cache_dir``).
CACHE_DIR_VARIABLE = "TORCHSTRATA_CACHE_DIR"
#: The XDG base directory for caches.
XDG_CACHE_VARIABLE = "XDG_CACHE_HOME"
#: The C++ compiler.
CXX_VARIABLE = "CXX"


def _nonempty(value: str | None) -> str | None:
    return value if value else None


@attrs.frozen
class Environment:
    """What the environment says about torchstrata's settings (None where unset or empty)."""

    cache_dir: str | None = None
    xdg_cache_home: str | None = None
    cxx: str | None = None
    home: Path = attrs.field(factory=Path.home)

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
        )
