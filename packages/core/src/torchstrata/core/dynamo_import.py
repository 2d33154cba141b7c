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
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
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
        return original(name, globals, locals, fromlist, level)

    def enter(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth == 1:
                self.original_import = builtins.__import__
                builtins.__import__ = self.hooked_import

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth:
                return
            if builtins.__import__ == self.hooked_import and self.original_import is not None:
                builtins.__import__ = self.original_import
            self.original_import = None
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
