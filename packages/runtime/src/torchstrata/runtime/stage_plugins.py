"""Finding the stages: which plugin provides each, why a stage gave no answer, and a
plugin manager that survives a plugin that fails to load."""

from __future__ import annotations

import importlib.metadata

import pluggy

from torchstrata.core import ENTRY_POINT_GROUP, create_plugin_manager, register
from torchstrata.runtime.fallback import warn_once

#: Pipeline stage -> (hook name, distribution that provides it).
STAGE_PROVIDERS = {
    "capture": ("torchstrata_capture", "torchstrata-capture"),
    "autograd": ("torchstrata_aot", "torchstrata-autograd"),
    "decomp": ("torchstrata_decompose", "torchstrata-decomp"),
    "codegen": ("torchstrata_codegen", "torchstrata-inductor"),
}


def missing_stage_message(stage: str, manager: pluggy.PluginManager, fallback: str) -> str:
    """Why ``stage`` gave no answer, and what runs instead."""
    hook_name, package = STAGE_PROVIDERS[stage]
    if getattr(manager.hook, hook_name).get_hookimpls():
        return f"no plugin answered {hook_name} ({package} declined this graph); {fallback}"
    return f"{package} is not installed (nothing implements {hook_name}); {fallback}"


def load_plugins_one_by_one(blocked: frozenset[str]) -> pluggy.PluginManager:
    """A manager with every installed plugin that loads; each that fails is named in a
    warning and left out (its stage then counts as not installed)."""
    manager = create_plugin_manager(blocked=blocked, load_entrypoints=False)
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if manager.is_blocked(point.name) or manager.get_plugin(point.name) is not None:
            continue
        try:
            register(manager, point.name, point.load())
        except Exception as error:  # noqa: BLE001 - skip the broken plugin, keep the rest
            warn_once(
                ("broken-plugin", point.name, point.value),
                f"torchstrata plugin {point.name!r} ({point.value}) failed to load and is "
                f"skipped: {type(error).__name__}: {error}",
                stacklevel=7,
            )
    return manager
