"""Tensor guards checked by a small C++ extension, built once per machine.

A static tensor guard in Python reads seven things through torch's getters (exact type,
shape, dtype, strides, device, ``requires_grad``, the negative bit): about 0.37 us a
tensor, 103 tensors of M4/resnet18 about half its guard check (decisions 0241, 0425).
``TensorCheck`` (:mod:`torchstrata.runtime.native_guards_source`) answers the same
question in one call that reads the tensor's ``TensorImpl`` (so does a symbolic entry's
tensor guard, its sizes and strides left to its size check): the generated check writes
``_c7(_v32)`` for that guard, in its place among the others (decision 0460). A
``LastLayout`` (:meth:`TensorChecks.last_layout`) compares a symbolic entry's tensors'
sizes and strides with the layout that passed its size guard last, in one call (decision
0475). A global-state guard whose snapshot is the common state is one call of
``same_state(key)`` (:meth:`TensorChecks.state_check`, decision 0515).

The extension is built by :mod:`torchstrata.core.native_build` (shared with the
inductor's native allocator, decision 0510): compiled with the C++ compiler the CPU
backend uses (``$CXX``, else ``g++``, else ``c++``) against torch's own headers (c10's,
three small ATen ones), in about three seconds, and kept in the artifact store (namespace ``native``), keyed by its
source, the compiler and its version, the flags, the torch build and the Python ABI;
another process takes it from there. A failed build is recorded there too
(``.failed``), so that processes do not each compile again (clearing the cache
retries). Before it is used the loader checks
that it reads the same ``TensorImpl`` as ``tensor._cdata`` for a ``Tensor`` and a
``Parameter``, and that it accepts a matching
tensor and refuses one of another size, stride, dtype, ``requires_grad``, negative bit
and type. Where there is no compiler, the build or that check fails, or
``CompileOptions(native_guards=False)``, the guards stay Python conditions (the same
semantics; the failure is logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from torchstrata.core import TENSOR_TYPES, TensorMeta, TensorTraits, global_state
from torchstrata.core.artifacts import CacheSettings
from torchstrata.core.native_build import (
    Extension,
    NativeBuildError,
    OncePerProcess,
    load_extension,
)
from torchstrata.runtime.native_guards_source import SOURCE, SOURCE_VERSION

logger = logging.getLogger("torchstrata.runtime")

#: The extension's module name (its ``PyInit_`` function's).
MODULE_NAME = "torchstrata_tensor_checks"
#: What :mod:`torchstrata.core.native_build` builds: c10 and ``torch_cpu`` (the global
#: state's flags, decision 0515).
EXTENSION = Extension(MODULE_NAME, SOURCE, SOURCE_VERSION, ("c10", "torch_cpu"))
#: The exact tensor types a static guard allows, in a fixed order.
ALLOWED_TYPES = tuple(sorted(TENSOR_TYPES, key=lambda t: t.__qualname__))


class NativeGuardsUnavailable(NativeBuildError):
    """The extension cannot be built or loaded here (the message says why)."""


class TensorChecks:
    """Makes the native check of a tensor guard (a ``TensorCheck`` of the loaded
    extension), or None where the guard keeps its Python condition."""

    def __init__(self, module: ModuleType) -> None:
        self._new: Callable[..., Any] = module.TensorCheck
        self._last_layout: Callable[..., Any] = module.LastLayout
        self._state_key: Callable[[], int] = module.state_key
        self._same_state: Callable[[int], bool] = module.same_state
        #: whether :meth:`state_check` may be used (its self-test passed: :func:`verify`)
        self.state_checked: bool = getattr(module, "state_checked", False)
        #: one empty tensor per (dtype, device): what a check reads its dtype and device from
        self._likes: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def check(self, meta: TensorMeta | TensorTraits) -> Any | None:
        """``check(value)`` is True exactly when the Python condition of a
        ``TENSOR_MATCH`` guard expecting ``meta`` holds for ``value`` (traits: a symbolic
        entry's tensor, whose sizes and strides its size check reads); None for metadata
        it does not cover (symbolic sizes, a device no tensor is on, as ``cuda`` without an
        index)."""
        shape: tuple[int, ...] | None = None
        strides: tuple[int, ...] | None = None
        if isinstance(meta, TensorMeta):
            shape, strides = tuple(meta.shape), tuple(meta.strides)
            if not all(type(size) is int for size in (*shape, *strides)):
                return None
        device = meta.device
        like = self._like(meta.dtype, device)
        if like is None or like.device != device:  # ``cuda``: no tensor's device is it
            return None
        cpu = device.type == "cpu"
        dtype = meta.dtype
        return self._new(
            ALLOWED_TYPES,
            like,
            bool(meta.requires_grad),
            shape,
            strides,
            dtype.is_floating_point or dtype.is_complex,  # no negative bit
            dtype.is_complex,  # no conjugate bit
            cpu,  # a CPU tensor: ``is_cpu``, whatever the index
        )

    def state_check(self, expected: tuple[Any, ...]) -> tuple[Callable[[int], bool], int] | None:
        """``(same_state, key)``: ``same_state(key)`` is True exactly when
        :func:`~torchstrata.core.global_state` equals ``expected`` (a global-state guard's
        snapshot), in one C call instead of reading ten items into a tuple; None where the
        snapshot is not the state now (its number is known only by reading it) or not the
        common one (autocast, a torch function or dispatch mode: the tuple compares it)."""
        if not self.state_checked or expected != global_state():
            return None
        key = self._state_key()
        return None if key < 0 else (self._same_state, key)

    def last_layout(self, count: int, traits: tuple[Any, ...] | None = None) -> Any:
        """A symbolic entry's last routed layout of ``count`` tensors (nothing remembered
        yet): ``last(*tensors)`` is the route remembered with their sizes and strides, or
        None when one differs; ``last.remember(route, *tensors)`` replaces both.
        ``traits``: per tensor a :meth:`check` (or None) that ``last`` also requires to
        hold (the tensor guards and the layout in one call, decision 0515)."""
        return self._last_layout(count, traits)

    def _like(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        key = (dtype, device)
        like = self._likes.get(key)
        if like is None:
            try:
                like = torch.empty(0, dtype=dtype, device=device)
            except Exception:  # noqa: BLE001 - a device not usable here: Python checks it
                return None
            self._likes[key] = like
        return like


#: The native checks of this process, loaded and checked on first use.
LOADED: OncePerProcess[TensorChecks] = OncePerProcess(
    logger, "native tensor guards unavailable, checked in Python"
)


def tensor_checks(enabled: bool, cache_dir: str | None = None) -> TensorChecks | None:
    """The native tensor checks of this process (built or read from the store under
    ``cache_dir`` on first use), or None when ``enabled`` is False or they are
    unavailable here (logged once)."""
    if not enabled:
        return None
    return LOADED.get(lambda: TensorChecks(load_module(CacheSettings.resolve(cache_dir))))


def unavailable_reason() -> str | None:
    """Why the native checks are not used in this process (None: used, or not tried)."""
    return LOADED.reason


def load_module(settings: CacheSettings) -> ModuleType:
    """The extension from the artifact store (built into it when missing, by
    :func:`torchstrata.core.native_build.load_extension`), imported and checked
    (:func:`verify`). Raises :class:`NativeGuardsUnavailable`."""
    try:
        module = load_extension(EXTENSION, settings)
    except NativeBuildError as error:
        if isinstance(error, NativeGuardsUnavailable):
            raise
        raise NativeGuardsUnavailable(str(error)) from error
    verify(module)
    return module


def verify(module: ModuleType) -> None:
    """Raise :class:`NativeGuardsUnavailable` unless ``module`` reads a tensor where torch
    keeps it and its checks accept and refuse what the Python condition does."""
    module.init(torch.Tensor)
    for sample in (torch.zeros(2), torch.nn.Parameter(torch.zeros(2))):
        if module.probe(sample) != sample._cdata:
            raise NativeGuardsUnavailable("a tensor object is laid out otherwise here")
    checks = TensorChecks(module)
    meta = TensorMeta((2, 3), torch.float32, strides=(3, 1))
    check = checks.check(meta)
    base = torch.zeros(2, 3)

    class Subclass(torch.Tensor):
        pass

    refused = (
        torch.zeros(3, 2),
        torch.zeros(3, 2).t(),
        torch.zeros(2, 3, dtype=torch.float64),
        torch.nn.Parameter(torch.zeros(2, 3)),
        torch._neg_view(base),
        base.as_subclass(Subclass),
        "a string",
    )
    if check is None or not check(base) or any(check(value) for value in refused):
        raise NativeGuardsUnavailable("the self-test of the tensor check failed")
    last, route = checks.last_layout(2), ("route",)
    other = torch.zeros(3)
    fresh = last(base, other)
    last.remember(route, base, other)
    if fresh is not None or last(torch.zeros(2, 3), torch.zeros(3)) is not route:
        raise NativeGuardsUnavailable("the self-test of the last layout failed")
    changed = (
        (refused[0], other),  # other sizes
        (refused[1], other),  # other strides
        (base, torch.zeros(3, 1)),  # other rank
        (base, "a string"),
        (base,),
    )
    if any(last(*values) is not None for values in changed):
        raise NativeGuardsUnavailable("the self-test of the last layout failed")
    _verify_state(module)


def _verify_state(module: ModuleType) -> None:
    """Let :class:`TensorChecks` of ``module`` compare global-state snapshots natively
    when the state's number tells the states apart that the Python snapshot does (tested
    from the common state, grad on and inference mode off whatever the caller's: a first
    compile under ``torch.no_grad()`` loads the module too; loaded in another state, as
    under autocast, the snapshot compares them)."""
    with torch.enable_grad(), torch.inference_mode(False):
        _verify_state_numbers(module)


def _verify_state_numbers(module: ModuleType) -> None:
    key = module.state_key()
    if key < 0:
        return
    keys = [key]
    with torch.no_grad():
        keys.append(module.state_key())
    with torch.inference_mode():
        keys.append(module.state_key())
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if dtype != torch.float64 else torch.float32)
    try:
        keys.append(module.state_key())
    finally:
        torch.set_default_dtype(dtype)
    with torch.autocast("cpu"):
        uncommon = module.state_key()
    if len(set(keys)) != len(keys) or uncommon != -1 or module.state_key() != key:
        raise NativeGuardsUnavailable("the self-test of the global state number failed")
    if not module.same_state(key) or module.same_state(keys[1]):
        raise NativeGuardsUnavailable("the self-test of the global state number failed")
    vars(module)["state_checked"] = True
