"""``mode=`` and ``options=`` given to ``torch.compile`` with ``backend="torchstrata"``.

``torch.compile`` hands them to the backend as keyword arguments (``mode`` only when it
is not ``"default"``, ``options`` only when it is not empty). They become fields of
:class:`~torchstrata.core.CompileOptions`; anything that means nothing to this backend
is refused by name rather than dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from torchstrata.core import CompileOptions

#: CompileOptions fields that the Dynamo backend honours.
BACKEND_FIELDS = frozenset(
    {
        "codegen",
        "fullgraph",
        "mode",
        "debug",
        "validate_passes",
        "blocked_plugins",
        "cache_dir",
        "stage_options",
        "shared_decomposition_from",
        "symbolic_lowering",
        "symbolic_lowerings",
    }
)

#: CompileOptions fields that Dynamo owns when it drives the compilation: why each is
#: refused.
DYNAMO_OWNED = {
    "dynamic": "pass dynamic= to torch.compile itself (Dynamo decides which sizes are symbolic)",
    "recompile_limit": "Dynamo recompiles frames, not torchstrata: set "
    "Dynamo's config.recompile_limit",
}


class BackendOptionError(ValueError):
    """``torch.compile`` with ``backend="torchstrata"`` was given an option it cannot honour."""


def backend_options(base: CompileOptions, given: Mapping[str, Any]) -> CompileOptions:
    """``base`` with the keyword arguments ``torch.compile`` passed to the backend
    (``mode``, ``options``) applied.

    ``options`` may be a dict of :data:`BACKEND_FIELDS` or a whole
    :class:`~torchstrata.core.CompileOptions`.

    :raises BackendOptionError: an unknown keyword argument or option (named in the
        message), one that Dynamo owns, or a value the field does not accept.
    """
    unknown_kwargs = sorted(set(given) - {"mode", "options"})
    if unknown_kwargs:
        raise BackendOptionError(
            f"torchstrata dynamo backend: unknown keyword argument(s) {unknown_kwargs} "
            "(torch.compile passes only mode= and options=)"
        )
    changes: dict[str, Any] = {}
    options = given.get("options")
    if isinstance(options, CompileOptions):
        base = options
    elif options is not None:
        if not isinstance(options, Mapping):
            raise BackendOptionError(
                "torchstrata dynamo backend: options= must be a dict or a CompileOptions, "
                f"not {type(options).__name__}"
            )
        changes.update(_checked_fields(options))
    if given.get("mode") is not None:
        changes["mode"] = given["mode"]
    try:
        return attrs.evolve(base, **changes) if changes else base
    except (TypeError, ValueError) as error:
        raise BackendOptionError(f"torchstrata dynamo backend: {error}") from None


def _checked_fields(options: Mapping[str, Any]) -> dict[str, Any]:
    owned = sorted(set(options) & set(DYNAMO_OWNED))
    if owned:
        reasons = "; ".join(f"{name}: {DYNAMO_OWNED[name]}" for name in owned)
        raise BackendOptionError(
            f"torchstrata dynamo backend: option(s) {owned} are not taken here ({reasons})"
        )
    unknown = sorted(str(name) for name in set(options) - BACKEND_FIELDS)
    if unknown:
        raise BackendOptionError(
            f"torchstrata dynamo backend: unknown option(s) {unknown}; known: "
            f"{sorted(BACKEND_FIELDS)}"
        )
    return dict(options)
