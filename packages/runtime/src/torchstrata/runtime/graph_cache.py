"""The compiled-graph cache: what the stages after capture made of a graph, on disk.

Two kinds of entry, both JSON documents in the artifact store's ``graphs`` namespace
(:mod:`torchstrata.core.artifacts`: content hash checked on every read, atomic writes,
``flock``, LRU cap):

- ``aot``, keyed by the torch-level graph (after the ``post_capture`` passes): the
  autograd stage's :class:`~torchstrata.core.AotResult` and the forward after the
  ``post_aot`` passes;
- ``lowered``, keyed by an ATen graph (a forward, a backward) and the options it is
  lowered with: the prims graph after ``post_decomp`` and the codegen stage's package
  (:attr:`~torchstrata.core.CompiledGraph.package`: kernel sources, the launcher and its
  globals as plain data), which its ``torchstrata_codegen_load`` hook loads again.

So a second process with the same graphs runs capture, then reads: no autograd trace, no
decomposition, no scheduling or code generation (C++ libraries, Triton modules and
Triton's binaries come from the artifact store). Keys: :mod:`.graph_cache_key`. Only plain data is stored, never a pickle:
capture's guards and programs hold Python objects and are rebuilt by capture every time.

An entry that fails the store's check is removed by the store with a
:class:`~torchstrata.core.artifacts.CacheWarning`; one that passes it but does not
decode (another writer's format, a graph that no longer parses, a package its backend
cannot load) is discarded the same way. Either way the stages run and store it anew.
``CompileOptions(graph_cache=False)`` neither reads nor writes entries.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import attrs
import pluggy
import torch

from torchstrata.core import (
    NO_CONTRACT,
    AotResult,
    CompiledGraph,
    CompileOptions,
    Graph,
    GraphContract,
)
from torchstrata.core.artifacts import ArtifactStore, CacheSettings, CacheWarning, open_store
from torchstrata.core.logs import artifact_logger
from torchstrata.runtime.compile_trace import current_trace
from torchstrata.runtime.graph_cache_key import (
    ENTRY_VERSION,
    accelerator_identity,
    entry_key,
    installation_identity,
)
from torchstrata.runtime.graph_records import (
    BadRecord,
    NotCacheable,
    aot_record,
    graph_text,
    read_aot,
    read_graph,
)

cache_log = artifact_logger(__name__, "cache")

#: The artifact store's namespace of compiled-graph entries.
NAMESPACE = "graphs"
SUFFIX = ".json"


@attrs.define
class GraphCacheStats:
    """What the compiled-graph cache did in this process (see :func:`graph_cache_stats`).

    ``hits``/``misses``/``stores`` count entries of both kinds; ``rebuilt``: entries
    found bad and removed; ``not_cacheable``: results that cannot be written as plain
    data (compiled each time).
    """

    hits: int = 0
    misses: int = 0
    stores: int = 0
    rebuilt: int = 0
    not_cacheable: int = 0


_STATS = GraphCacheStats()


def graph_cache_stats() -> GraphCacheStats:
    """A copy of this process's compiled-graph cache counters."""
    return attrs.evolve(_STATS)


@attrs.frozen
class AotHit:
    """An ``aot`` entry read back: the AOT result and its forward after ``post_aot``."""

    aot: AotResult
    aten_graph: Graph


@attrs.frozen
class LoweredHit:
    """A ``lowered`` entry read back: the prims graph, and the codegen package (None
    when code generation was not saved)."""

    prims_graph: Graph
    package: Mapping[str, Any] | None


@attrs.frozen
class Lookup:
    """A key looked up: ``key`` None when the cache is off (nothing to store)."""

    key: str | None
    hit: Any = None


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _never_fatal(fallback: Any) -> Callable[[_Fn], _Fn]:
    """The cache must never fail a compile: an unexpected error in ``fn`` is logged and
    ``fallback`` (a miss, or nothing stored) returned; the stages then run as without
    a cache."""

    def wrap(fn: _Fn) -> _Fn:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - see above
                cache_log.debug("graph cache: %s failed: %r", fn.__name__, error)
                warnings.warn(
                    f"the compiled-graph cache failed ({type(error).__name__}: {error}); "
                    "compiling without it",
                    CacheWarning,
                    stacklevel=3,
                )
                return fallback

        return guarded  # type: ignore[return-value]

    return wrap


def _store(options: CompileOptions) -> ArtifactStore:
    return open_store(CacheSettings.resolve(options.cache_dir, options.cache_size_limit))


def _note(event: str, what: str, key: str, stage: str = "", result: Any = None) -> None:
    """Log and trace a cache event; a hit reports what it stands for as the ``stage``
    hook's result (``graphs``/``output_code`` logs, the debug directory)."""
    cache_log.debug("graph cache %s: %s %s", event, what, key[:16])
    trace = current_trace()
    if trace is not None:
        trace.cache_event(f"{what}: {event}")
        if result is not None:
            trace.produced(stage, result)


def _read(options: CompileOptions, key: str, kind: str) -> Mapping[str, Any] | None:
    store = _store(options)
    path = store.get(NAMESPACE, key, SUFFIX)
    if path is None:
        return None
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        _discard(store, key, f"unreadable: {error}")
        return None
    if not isinstance(document, dict) or document.get("entry") != [ENTRY_VERSION, kind]:
        _discard(store, key, "not an entry of this version")
        return None
    return document


def _discard(store: ArtifactStore, key: str, reason: str) -> None:
    _STATS.rebuilt += 1
    store.discard(NAMESPACE, key, SUFFIX, reason)


def _write(options: CompileOptions, key: str, kind: str, what: str, body: dict[str, Any]) -> None:
    data = json.dumps({"entry": [ENTRY_VERSION, kind], **body}).encode()
    try:
        _store(options).put(NAMESPACE, key, SUFFIX, data)
    except OSError as error:  # a full disk: the compile goes on without the entry
        cache_log.debug("graph cache store failed for %s: %s", what, error)
        return
    _STATS.stores += 1
    _note("stored", what, key)


#: the capture's size of a symbol, in a graph's text (``symbol s0 = ..., hint 17``)
_HINT = re.compile(r"^(\s*symbol .*), hint -?\d+$", re.MULTILINE)

_SUSPENDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "torchstrata_graph_cache_suspended", default=False
)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Within the block no entry is read or written, whatever the options say: for test
    suites whose tests count stage calls or expect a stage's warnings, and would
    otherwise find the entries an earlier test (or an earlier run) wrote."""
    token = _SUSPENDED.set(True)
    try:
        yield
    finally:
        _SUSPENDED.reset(token)


def _key(
    kind: str,
    graph: Graph,
    options: CompileOptions,
    manager: pluggy.PluginManager,
    contract: str = "",
    hints: bool = True,
) -> str | None:
    """The key of ``graph``'s ``kind`` entry; ``hints=False``: without the sizes a
    graph with symbolic sizes was captured at (an entry that serves the sizes that
    meet its recorded conditions, whatever sizes its graph was captured at)."""
    if not options.graph_cache or _SUSPENDED.get():
        return None
    try:
        text = str(graph)
    except TypeError as error:  # an argument the text form cannot spell: no exact key
        _STATS.not_cacheable += 1
        cache_log.debug("graph cache: graph not cacheable: %s", error)
        return None
    if not hints:
        text = _HINT.sub(r"\1", text)
    return entry_key(
        kind,
        text + _accelerators(graph) + contract,
        options,
        installation_identity(manager, options),
    )


def _accelerators(graph: Graph) -> str:
    """What makes a graph compiled for the CUDA devices of its inputs wrong on another
    machine (see :func:`~torchstrata.runtime.graph_cache_key.accelerator_identity`)."""
    return accelerator_identity(meta.device for meta in graph.input_metas)


# ---------------------------------------------------------------------------- aot


@_never_fatal(Lookup(None))
def lookup_aot(
    torch_graph: Graph, options: CompileOptions, manager: pluggy.PluginManager
) -> Lookup:
    """The ``aot`` entry of ``torch_graph`` (a miss: ``hit`` None)."""
    key = _key("aot", torch_graph, options, manager)
    if key is None:
        return Lookup(None)
    document = _read(options, key, "aot")
    if document is not None:
        try:
            aot = read_aot(document["aot"])
            aten_text = document["aten_graph"]  # None: the forward, unchanged by post_aot
            hit = AotHit(aot, aot.forward if aten_text is None else read_graph(aten_text))
        except (BadRecord, KeyError) as error:
            _discard(_store(options), key, str(error))
        else:
            _STATS.hits += 1
            _note("hit", "autograd", key, "autograd", hit.aot)
            return Lookup(key, hit)
    _STATS.misses += 1
    _note("miss", "autograd", key)
    return Lookup(key)


@_never_fatal(None)
def store_aot(lookup: Lookup, aot: AotResult, aten_graph: Graph, options: CompileOptions) -> None:
    """Write the ``aot`` entry that ``lookup`` missed (nothing when the cache is off or
    the result is not plain data)."""
    if lookup.key is None or lookup.hit is not None:
        return
    try:
        record = aot_record(aot)
        aten_text = None if aten_graph is aot.forward else graph_text(aten_graph)
        body = {"aot": record, "aten_graph": None if aten_text == record["forward"] else aten_text}
    except NotCacheable as reason:
        _STATS.not_cacheable += 1
        cache_log.debug("graph cache: autograd result not stored: %s", reason)
        return
    _write(options, lookup.key, "aot", "autograd", body)


# ------------------------------------------------------------------------ lowered


@_never_fatal(Lookup(None))
def lookup_lowered(
    aten_graph: Graph,
    options: CompileOptions,
    manager: pluggy.PluginManager,
    contract: GraphContract = NO_CONTRACT,
) -> Lookup:
    """The ``lowered`` entry of ``aten_graph`` under ``options`` and ``contract`` (a miss:
    ``hit`` None). The contract is part of the key: its input layouts and write-backs
    change the prims graph and the kernels."""
    key = _key("lowered", aten_graph, options, manager, repr(contract))
    if key is None:
        return Lookup(None)
    document = _read(options, key, "lowered")
    if document is not None:
        package = document.get("package")
        if package is None or isinstance(package, dict):
            try:
                hit = LoweredHit(read_graph(document.get("prims_graph")), package)
            except BadRecord as error:
                _discard(_store(options), key, str(error))
            else:
                _STATS.hits += 1
                _note("hit", "decomposition", key, "decomp", hit.prims_graph)
                return Lookup(key, hit)
        else:
            _discard(_store(options), key, "a codegen package that is not a JSON object")
    _STATS.misses += 1
    _note("miss", "decomposition and code generation", key)
    return Lookup(key)


def load_compiled(
    lookup: Lookup,
    device: torch.device,
    options: CompileOptions,
    manager: pluggy.PluginManager,
) -> CompiledGraph | None:
    """The compiled graph of a ``lowered`` hit's package, through the codegen stage's
    ``torchstrata_codegen_load``; None when there is no package or no plugin loads it
    (the entry is then discarded: the caller generates code and stores it again)."""
    hit = lookup.hit
    if not isinstance(hit, LoweredHit) or hit.package is None or lookup.key is None:
        return None
    try:
        compiled = manager.hook.torchstrata_codegen_load(
            package=hit.package, device=device, options=options
        )
    except Exception as error:  # noqa: BLE001 - a bad entry is rebuilt, never fatal
        compiled, reason = None, f"its package does not load: {type(error).__name__}: {error}"
    else:
        reason = "no codegen plugin loads its package"
    if not isinstance(compiled, CompiledGraph):
        _discard(_store(options), lookup.key, reason)
        return None
    _note("hit", "code generation", lookup.key, "codegen", compiled)
    return compiled


@_never_fatal(None)
def store_lowered(
    lookup: Lookup,
    prims_graph: Graph,
    compiled: CompiledGraph | None,
    options: CompileOptions,
) -> None:
    """Write the ``lowered`` entry for ``lookup`` after code was generated afresh (a
    miss, a hit without a package, or one whose package did not load and was
    discarded)."""
    if lookup.key is None:
        return
    package = compiled.package if compiled is not None else None
    if isinstance(lookup.hit, LoweredHit) and package is None:
        return  # still no package: the entry read is as good as any
    try:
        body = {"prims_graph": graph_text(prims_graph), "package": package}
    except NotCacheable as reason:
        _STATS.not_cacheable += 1
        cache_log.debug("graph cache: prims graph not stored: %s", reason)
        return
    if cache_log.isEnabledFor(logging.DEBUG) and package is None:
        cache_log.debug("graph cache: the codegen stage gave no package; prims graph only")
    _write(options, lookup.key, "lowered", "decomposition and code generation", body)
