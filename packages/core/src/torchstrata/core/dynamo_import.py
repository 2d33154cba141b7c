"""``dynamo_import_deferred``: keep torch from importing Dynamo while torchstrata compiles.

Many of torch's own Python functions are wrapped by ``torch._disable_dynamo``: the
elementwise references that serve as ``meta`` kernels (``aten.add`` on meta tensors runs
torch's reference ``add``), ``TorchDispatchMode.__torch_dispatch__`` of every subclass... On
its first call each wrapper imports Dynamo (1.5-2.5 s on a 2-core box,
most of a cold compile) only to build a function that turns Dynamo's frame hook off
while the wrapped function runs. Before anything imported Dynamo that hook cannot be
on, so calling the wrapped function directly does exactly the same.

Within :func:`dynamo_import_deferred`, and only while Dynamo is not imported,
the wrapper's import statement receives a stand-in whose ``disable`` returns the
function itself; the wrapper caches that on the function (``fn.__dynamo_disable``), and
the context manager removes every such cache when the outermost block exits, so that
after it torch behaves as if nothing happened (the next call outside imports Dynamo).
Only imports made from the wrapper's own code object are answered; every other import
goes to the original ``__import__``.

Fake tensors read three settings of Dynamo's config (``FakeTensorMode.__init__`` imports
``torch._dynamo.config``, which runs all of Dynamo's package first; its dispatch reads
``torch._dynamo.config._custom_ops_profile``). Within the block, and only while Dynamo is
not imported, those reads get a copy of the config module: the same file run on its own
(:func:`_config_copy`, never entered in ``sys.modules`` under Dynamo's name), so the same
defaults and environment variables give the same values; nothing can have changed the
real ones, which do not exist yet. Two pieces do it: the import statement in
``fake_tensor``'s code is answered with ``torch`` itself, without importing the config,
and ``torch._dynamo`` is a stand-in (:class:`_DynamoStandIn`) that gives the copy to
``fake_tensor``'s code and, to any other code or for any other name, imports Dynamo
as torch's lazy attribute would and answers from it (the import replaces the stand-in).
The stand-in is removed when the outermost block exits, so after it torch behaves as if
nothing happened.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

_CACHE_ATTRIBUTE = "__dynamo_disable"
#: The module this file keeps torch from importing (never imported here).
_DYNAMO = "torch._dynamo"  # comparator: the name looked up in sys.modules, not imported


def _wrapper_code() -> Any:
    """The code object shared by every wrapper ``torch._disable_dynamo`` makes, or None
    if it does not cache on ``fn.__dynamo_disable`` as this module expects."""
    code = getattr(torch._disable_dynamo(lambda: None), "__code__", None)
    if code is None or "fn" not in code.co_freevars or _CACHE_ATTRIBUTE not in code.co_consts:
        return None
    return code


_WRAPPER_CODE = _wrapper_code()

#: The module whose reads of Dynamo's config get the copy, and what it imports.
_FAKE_MODULE = "torch._subclasses.fake_tensor"
_DYNAMO_CONFIG = "torch._dynamo.config"  # comparator: an import answered, never made here


def _fake_reads_config() -> bool:
    """Whether ``FakeTensorMode.__init__`` imports Dynamo's config as the module
    docstring describes (else fake tensors import Dynamo as they always did)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    code = getattr(FakeTensorMode.__init__, "__code__", None)
    return code is not None and _DYNAMO_CONFIG in code.co_names


@functools.cache
def _config_copy() -> ModuleType | None:
    """Dynamo's config module run on its own from torch's file, under a name of ours
    (its settings object finds itself in ``sys.modules`` while it runs), or None when
    the file is not where torch keeps it."""
    path = Path(torch.__file__).parent / "_dynamo" / "config.py"
    name = f"{__name__}._dynamo_config_copy"
    spec = importlib.util.spec_from_file_location(name, path)
    if not path.is_file() or spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def _real_dynamo() -> ModuleType:
    return importlib.import_module(_DYNAMO)


class _DynamoStandIn:
    """``torch._dynamo`` within the block while Dynamo is not imported: its config copy
    for ``fake_tensor``'s code, Dynamo itself (imported then) for everything else."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name == "config" and sys._getframe(1).f_globals.get("__name__") == _FAKE_MODULE:
            copy = _config_copy()
            if copy is not None:
                return copy
        return getattr(_real_dynamo(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(_real_dynamo(), name, value)


_STAND_IN = _DynamoStandIn()
_FAKE_READS_CONFIG = functools.cache(_fake_reads_config)


def _identity_disable(fn: Callable[..., Any], recursive: bool = True, **_: Any) -> Any:
    return fn


class _StandInDynamo:
    disable = staticmethod(_identity_disable)


class _StandInTorch:
    """What the wrapper's Dynamo import binds (``torch``) inside a deferred wrapper."""

    _dynamo = _StandInDynamo


class _Deferral:
    """The process-wide state: nesting depth, the import hook, the functions it primed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.original_import: Callable[..., Any] | None = None
        self.primed: list[Any] = []

    def hooked_import(
        self,
        name: str,
        globals: Any = None,
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> Any:
        original = self.original_import or builtins.__import__
        if name == _DYNAMO and _DYNAMO not in sys.modules:
            caller = sys._getframe(1)
            if caller.f_code is _WRAPPER_CODE:
                self.primed.append(caller.f_locals.get("fn"))
                return _StandInTorch
        elif (
            name == _DYNAMO_CONFIG
            and not fromlist
            and not level
            and torch.__dict__.get("_dynamo") is _STAND_IN
            and sys._getframe(1).f_globals.get("__name__") == _FAKE_MODULE
        ):
            # ``import torch._dynamo.config`` binds ``torch``; its reads reach the stand-in
            return torch
        return original(name, globals, locals, fromlist, level)

    def enter(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth == 1:
                self.original_import = builtins.__import__
                builtins.__import__ = self.hooked_import
                if "_dynamo" not in torch.__dict__ and _FAKE_READS_CONFIG():
                    torch.__dict__["_dynamo"] = _STAND_IN

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth:
                return
            if builtins.__import__ == self.hooked_import and self.original_import is not None:
                builtins.__import__ = self.original_import
            self.original_import = None
            if torch.__dict__.get("_dynamo") is _STAND_IN:
                del torch.__dict__["_dynamo"]
            primed, self.primed = self.primed, []
        for fn in primed:
            if getattr(fn, "__dict__", {}).get(_CACHE_ATTRIBUTE) is fn:
                delattr(fn, _CACHE_ATTRIBUTE)


_STATE = _Deferral()


@contextlib.contextmanager
def dynamo_import_deferred() -> Iterator[None]:
    """Within the block, torch's ``_disable_dynamo`` wrappers do not import Dynamo.

    A no-op when Dynamo is already imported, or when this torch's wrappers look
    different from the ones described in the module docstring.
    """
    if _WRAPPER_CODE is None or _DYNAMO in sys.modules:
        yield
        return
    _STATE.enter()
    try:
        yield
    finally:
        _STATE.exit()
