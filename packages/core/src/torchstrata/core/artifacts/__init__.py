"""The on-disk artifact cache shared by every stage: verified, content-addressed entries.

See :mod:`torchstrata.core.artifacts.store` for the layout and the guarantees, and
:mod:`torchstrata.core.artifacts.settings` for where the cache lives.
"""

from torchstrata.core.artifacts.canonical import canonical_source
from torchstrata.core.artifacts.files import UnsafeDirectoryError
from torchstrata.core.artifacts.settings import DEFAULT_SIZE_LIMIT, CacheSettings
from torchstrata.core.artifacts.store import (
    LAYOUT,
    ArtifactStore,
    CacheInfo,
    CacheWarning,
    NamespaceInfo,
    open_store,
)

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "LAYOUT",
    "ArtifactStore",
    "CacheInfo",
    "CacheSettings",
    "CacheWarning",
    "NamespaceInfo",
    "UnsafeDirectoryError",
    "canonical_source",
    "open_store",
]
