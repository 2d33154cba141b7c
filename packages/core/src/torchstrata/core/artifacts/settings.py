"""Where the on-disk cache lives and how large it may grow.

The location, first match wins: ``CompileOptions.cache_dir``, ``$TORCHSTRATA_CACHE_DIR``,
``$XDG_CACHE_HOME/torchstrata`` (an absolute path, as the XDG spec requires),
``~/.cache/torchstrata``. Whichever chose it, the layout below it is the same
(:mod:`torchstrata.core.artifacts.store`).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from torchstrata.core.env_options import CACHE_DIR_VARIABLE, XDG_CACHE_VARIABLE, Environment

#: The default size cap: least recently used entries are evicted above it.
DEFAULT_SIZE_LIMIT = 1 << 30


def _check_limit(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"cache size limit must be a positive number of bytes, got {value!r}")


@attrs.frozen
class CacheSettings:
    """The cache's root directory, what chose it (for ``cache info``) and its size cap."""

    root: Path
    origin: str
    size_limit: int = attrs.field(default=DEFAULT_SIZE_LIMIT, validator=_check_limit)

    @classmethod
    def resolve(
        cls,
        cache_dir: str | Path | None = None,
        size_limit: int | None = None,
        environment: Environment | None = None,
    ) -> CacheSettings:
        """The settings for an explicit ``cache_dir`` / ``size_limit`` (``CompileOptions``'
        fields; None: not given) over the environment (default: read now)."""
        env = environment if environment is not None else Environment.from_env()
        limit = DEFAULT_SIZE_LIMIT if size_limit is None else size_limit
        if cache_dir:
            return cls(Path(cache_dir).expanduser(), "CompileOptions.cache_dir", limit)
        if env.cache_dir:
            return cls(Path(env.cache_dir).expanduser(), f"${CACHE_DIR_VARIABLE}", limit)
        if env.xdg_cache_home and Path(env.xdg_cache_home).is_absolute():
            return cls(Path(env.xdg_cache_home) / "torchstrata", f"${XDG_CACHE_VARIABLE}", limit)
        return cls(env.home / ".cache" / "torchstrata", "default (~/.cache)", limit)
