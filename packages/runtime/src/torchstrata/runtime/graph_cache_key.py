"""The key of a compiled-graph cache entry: what decides what the stages make of a graph.

An entry's key is the SHA-256 of

- the graph's text form (its ops, arguments and every input's shape, strides, dtype,
  device and ``requires_grad``), whether deterministic algorithms are on and, for the
  autograd entry, whether grad mode is;
- for a graph with inputs on CUDA devices, each device's name and compute capability,
  the CUDA version torch was built with and Triton's version (:func:`accelerator_identity`:
  what makes a package of CUDA kernels invalid on another machine);
- the options that change compilation (all of ``CompileOptions`` but where the cache
  lives, its size cap, the debug directory and the recompile limit);
- this installation: Python, torch and Triton versions, the registered plugins by name
  and module, a hash of the source files of the packages that provide them and of core
  and the runtime (a new version, or an editable install's edits, make new entries),
  and what each plugin's
  ``torchstrata_cache_key`` hook answers (the inductor's: the C++ compiler, its version,
  the host CPU).

No absolute path enters a key that differs between two copies of a cache directory: the
key is the same wherever the cache is, so a moved cache still hits.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import pluggy
import torch

from torchstrata.core import CompileOptions

#: Changes whenever what an entry holds changes: entries of another version never match.
ENTRY_VERSION = "graph-cache-1"
#: Options that say where or how much to cache, or how to report: not part of a key.
_NOT_IN_KEY = frozenset(
    {"cache_dir", "cache_size_limit", "debug_dir", "recompile_limit", "graph_cache"}
)


def _plain(value: Any) -> Any:
    """``value`` as JSON types, in a stable order (sets sorted, attrs classes as dicts)."""
    if attrs.has(type(value)):
        return {
            field.name: _plain(getattr(value, field.name)) for field in attrs.fields(type(value))
        }
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(key): _plain(item) for key, item in sorted(value.items(), key=repr)}
    if isinstance(value, frozenset | set):
        return sorted(_plain(item) for item in value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return repr(value)


def options_identity(options: CompileOptions) -> str:
    """The options that change what is compiled, as stable JSON."""
    fields = {
        field.name: _plain(getattr(options, field.name))
        for field in attrs.fields(CompileOptions)
        if field.name not in _NOT_IN_KEY
    }
    return json.dumps(fields, sort_keys=True)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.cache
def _source_hash(location: Path) -> str:
    """The SHA-256 of a module file, or of the Python files below a package directory
    (relative names and bytes)."""
    digest = hashlib.sha256()
    if location.is_file():
        files = [str(location)]
        location = location.parent
    else:
        files = [
            os.path.join(root, name)
            for root, _, names in os.walk(location)
            for name in names
            if name.endswith(".py")
        ]
    for path in sorted(files):
        digest.update(os.path.relpath(path, location).encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def _source_location(module_name: str) -> Path | None:
    """Where the code of ``module_name`` lives: the directory of its package
    (``torchstrata.<stage>`` for the namespace's stages, the top-level package
    otherwise), or the file of a top-level module that is no package (``__main__``)."""
    parts = module_name.split(".")
    package = ".".join(parts[:2] if parts[0] == "torchstrata" else parts[:1])
    module = sys.modules.get(package)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file)
    return path.parent if path.name == "__init__.py" else path


def _plugin_modules(manager: pluggy.PluginManager) -> Iterable[tuple[str, str]]:
    for name, plugin in manager.list_name_plugin():
        module = getattr(plugin, "__name__", None) or type(plugin).__module__
        yield name, str(module)


def triton_version() -> str:
    """The installed Triton's version ("not installed" without one)."""
    return _version("triton")


def accelerator_identity(devices: Iterable[torch.device]) -> str:
    """What makes code compiled for the CUDA devices among ``devices`` wrong elsewhere:
    each one's name and compute capability (ATen picks its attention kernels by GPU;
    the Triton kernels' candidate configurations, tuned choices and binaries are for
    one), the CUDA version torch was built with and Triton's version (the binaries
    Triton builds for it). Empty when no device is a CUDA one, so CPU keys need no GPU."""
    cuda = sorted({device for device in devices if device.type == "cuda"}, key=str)
    if not cuda:
        return ""
    lines = [f"cuda {torch.version.cuda}, triton {triton_version()}"]
    lines += [
        f"{device}: {torch.cuda.get_device_name(device)} "
        f"{tuple(torch.cuda.get_device_capability(device))}"
        for device in cuda
    ]
    return "".join(f"\n{line}" for line in lines)


def _installation(manager: pluggy.PluginManager) -> dict[str, Any]:
    plugins = sorted(_plugin_modules(manager))
    modules = {module for _, module in plugins} | {"torchstrata.core", "torchstrata.runtime"}
    locations = {d for d in map(_source_location, sorted(modules)) if d is not None}
    return {
        "entry": ENTRY_VERSION,
        "python": sys.version,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "plugins": plugins,
        # the code itself rather than distribution versions: an editable install's edits
        # (and a plugin outside any distribution) change it too
        "sources": sorted(_source_hash(location) for location in locations),
    }


#: (id of the manager, options) -> (the manager, kept so that its id is not reused; identity)
_IDENTITIES: dict[tuple[int, str], tuple[pluggy.PluginManager, str]] = {}
_LOCK = threading.Lock()


def installation_identity(manager: pluggy.PluginManager, options: CompileOptions) -> str:
    """This installation and its plugins' own key parts, as a hash (computed once per
    plugin manager and options in a process)."""
    options_text = options_identity(options)
    with _LOCK:
        known = _IDENTITIES.get((id(manager), options_text))
        if known is not None:
            return known[1]
    answers = manager.hook.torchstrata_cache_key(options=options)
    document = {**_installation(manager), "hooks": sorted(str(a) for a in answers if a)}
    identity = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    with _LOCK:
        _IDENTITIES[id(manager), options_text] = (manager, identity)
    return identity


def entry_key(kind: str, graph_text: str, options: CompileOptions, installation: str) -> str:
    """The key of the ``kind`` entry (``aot`` or ``lowered``) of the graph whose text is
    ``graph_text``, compiled with ``options``.

    An ``aot`` key holds the grad mode too (the pipeline drops ``requires_grad`` and the
    backward without it); a ``lowered`` one does not: an ATen graph is decomposed and
    compiled the same with grad on (``explain()``) and off (a backward run by autograd).
    """
    grad = f"grad={torch.is_grad_enabled()}" if kind == "aot" else ""
    parts = (
        ENTRY_VERSION,
        kind,
        installation,
        options_identity(options),
        grad,
        f"deterministic={torch.are_deterministic_algorithms_enabled()}",
        graph_text,
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
