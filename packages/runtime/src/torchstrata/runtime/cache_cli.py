"""``python -m torchstrata.runtime cache info|clear``: look at and empty the on-disk cache.

The cache is the artifact store of :mod:`torchstrata.core.artifacts`: compiled C++
kernel libraries (``cpp``), generated Triton modules (``triton``), tuned Triton launch
configurations (``triton-tuning``) and what Triton compiled from them (``triton-compiled``). ``--dir`` names a cache root as
``CompileOptions.cache_dir`` would; without it, the location comes from the environment
(``$TORCHSTRATA_CACHE_DIR``, ``$XDG_CACHE_HOME/torchstrata``, ``~/.cache/torchstrata``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

import attrs

from torchstrata.core.artifacts import LAYOUT, CacheInfo, CacheSettings, open_store


def format_size(size: int) -> str:
    """``size`` bytes in the largest binary unit that keeps it at or above 1."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_info(info: CacheInfo) -> str:
    """The report ``cache info`` prints."""
    lines = [
        f"cache directory: {info.root}  (chosen by {info.origin})",
        f"layout: {info.root / LAYOUT}/<kind>/<key[:2]>/<key>.<ext> + <key>.meta",
        f"size: {format_size(info.total_bytes)} of a {format_size(info.size_limit)} cap",
    ]
    if not info.namespaces:
        lines.append("  (no entries)")
    for name, namespace in info.namespaces.items():
        lines.append(
            f"  {name:<15} {namespace.entries:>6} entries  {format_size(namespace.bytes):>10}"
        )
    if info.legacy.entries:
        lines.append(
            f"files of an older cache layout (never read; `cache clear` removes them): "
            f"{info.legacy.entries}, {format_size(info.legacy.bytes)}"
        )
    if info.stray_files:
        lines.append(f"files of no complete entry (removed by eviction): {info.stray_files}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m torchstrata.runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    cache = commands.add_parser("cache", help="the on-disk compilation cache")
    actions = cache.add_subparsers(dest="action", required=True)
    for action, text in (("info", "where it is and what it holds"), ("clear", "remove it all")):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("--dir", help="the cache root (as CompileOptions.cache_dir)")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    out = out if out is not None else sys.stdout
    arguments = _parser().parse_args(argv)
    settings = CacheSettings.resolve(arguments.dir)
    if arguments.dir:
        settings = attrs.evolve(settings, origin="--dir")
    if not settings.root.exists():  # nothing to show or remove: create nothing either
        print(f"cache directory: {settings.root}  (chosen by {settings.origin}; empty)", file=out)
        return 0
    store = open_store(settings)
    if arguments.action == "info":
        print(format_info(store.info()), file=out)
    else:
        removed = store.clear()
        print(f"removed {removed} entries from {store.root / LAYOUT}", file=out)
    return 0
