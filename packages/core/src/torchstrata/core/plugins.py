"""The plugin manager: entry-point discovery, duplicate refusal, blocking by name."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from typing import Any

import pluggy

from torchstrata.core import hookspecs

#: Entry-point group that stages and third-party plugins register under.
ENTRY_POINT_GROUP = "torchstrata"


class DuplicatePluginError(ValueError):
    """Two plugins claim the same name."""


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    points = list(importlib.metadata.entry_points(group=group))
    seen: dict[str, importlib.metadata.EntryPoint] = {}
    for point in points:
        if point.name in seen and seen[point.name].value != point.value:
            raise DuplicatePluginError(
                f"two plugins are named {point.name!r} in entry-point group {group!r}: "
                f"{seen[point.name].value} and {point.value}"
            )
        seen[point.name] = point
    return list(seen.values())


def create_plugin_manager(
    *,
    blocked: Iterable[str] = (),
    load_entrypoints: bool = True,
    plugins: Iterable[tuple[str, Any]] = (),
) -> pluggy.PluginManager:
    """A plugin manager with the pipeline hookspecs and the installed plugins.

    :param blocked: plugin names that must not be registered (built-in or third party).
    :param load_entrypoints: load every plugin of the ``torchstrata`` entry-point group.
    :param plugins: extra ``(name, plugin)`` pairs to register (tests, in-process plugins).
    :raises DuplicatePluginError: two plugins share a name.
    """
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    for name in blocked:
        manager.set_blocked(name)
    if load_entrypoints:
        for point in _entry_points(ENTRY_POINT_GROUP):
            if manager.is_blocked(point.name):
                continue
            register(manager, point.name, point.load())
    for name, plugin in plugins:
        if not manager.is_blocked(name):
            register(manager, name, plugin)
    # Historic: stages registered above (and any registered later) add their own hookspecs.
    manager.hook.torchstrata_addhooks.call_historic(kwargs={"pluginmanager": manager})
    return manager


def register(manager: pluggy.PluginManager, name: str, plugin: Any) -> None:
    """Register ``plugin`` as ``name``; a second plugin of the same name is an error."""
    if manager.get_plugin(name) is not None:
        raise DuplicatePluginError(f"a plugin named {name!r} is already registered")
    manager.register(plugin, name=name)
