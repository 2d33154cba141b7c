"""The launcher's ``empty_strided``: a small C++ extension that allocates through ATen's
C++ fast path instead of ``torch.empty_strided``'s (decision 0510).

Every generated launcher allocates each kernel output with
``empty_strided(sizes, strides, dtype=dtypeN, device=deviceM)``. Bound to
``torch.empty_strided`` that call goes through Python's argument parser and the
dispatcher: 0.8-1.0 us on a small CPU tensor, most of M1/tiny's host time. Bound to
the extension's ``empty_strided`` (:mod:`.native_alloc_source`), the same call reads the
two tuples and the two keywords and calls ``at::detail::empty_strided_cpu`` (or
``empty_strided_cuda``) directly: about 0.3 us. Anything unusual takes
``torch.empty_strided`` itself, with the same arguments (the source module lists what).

The extension is built by :mod:`torchstrata.core.native_build` (namespace ``native`` of
the artifact store under the compile options' cache settings; linked with c10,
torch_cpu and torch_python, and torch_cuda where torch has it). Before it is used, the
loader registers the dtypes (read from tensors the extension makes, never from torch's
C structs) and runs a self-test: over every registered dtype, layouts with zero sizes,
non-contiguous and zero strides and no dims, in and out of inference mode, its tensors
must equal ``torch.empty_strided``'s in type, dtype, device, sizes, strides, storage
offset and size, ``requires_grad``, ``is_inference`` and layout, and an argument it does
not take must go to torch's path. Where there is no compiler, the build or the self-test
fails, or ``InductorOptions(native_alloc=False)``, launchers call ``torch.empty_strided``
(the failure is logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from torchstrata.core import CompileOptions
from torchstrata.core.artifacts import CacheSettings
from torchstrata.core.native_build import (
    Extension,
    NativeBuildError,
    OncePerProcess,
    load_extension,
    torch_library_exists,
)
from torchstrata.inductor.launch.native_alloc_source import SOURCE, SOURCE_VERSION

logger = logging.getLogger("torchstrata.inductor")

#: The extension's module name (its ``PyInit_`` function's).
MODULE_NAME = "torchstrata_empty_strided"
#: Looked up first (in this order): the dtypes kernels mostly allocate.
COMMON_DTYPES = (
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.bool,
    torch.int32,
    torch.float64,
)
#: ``(sizes, strides)`` the self-test allocates in every dtype: contiguous, transposed,
#: zero sizes, no dims, a zero stride, a gap between rows.
SELF_TEST_LAYOUTS: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((8,), (1,)),
    ((2, 3), (1, 2)),
    ((0, 4), (4, 1)),
    ((3, 0), (1, 3)),
    ((), ()),
    ((4, 5), (0, 1)),
    ((2, 3), (5, 1)),
    ((2, 1, 3), (3, 7, 1)),
)


class NativeAllocUnavailable(NativeBuildError):
    """The extension cannot be built, loaded or trusted here (the message says why)."""


def extension() -> Extension:
    """What :mod:`torchstrata.core.native_build` builds: the CUDA part only where torch
    has ``libtorch_cuda``."""
    cuda = torch_library_exists("torch_cuda")
    libraries = ("c10", "torch_cpu", "torch_python", *(("torch_cuda",) if cuda else ()))
    defines = ("TORCHSTRATA_CUDA",) if cuda else ()
    return Extension(MODULE_NAME, SOURCE, SOURCE_VERSION, libraries, defines)


#: The extension of this process, loaded and checked on first use.
LOADED: OncePerProcess[ModuleType] = OncePerProcess(
    logger, "native allocation unavailable, torch.empty_strided used"
)
#: One object per device value: a launcher's device globals are interned, so that the
#: extension, which remembers device objects by identity, meets few of them.
_DEVICES: dict[torch.device, torch.device] = {}


def launcher_allocator(options: CompileOptions) -> Callable[..., torch.Tensor]:
    """The ``empty_strided`` that launchers compiled under ``options`` call: the
    extension's (built or read from the store under the options' cache settings on first
    use), or ``torch.empty_strided`` where ``options.inductor.native_alloc`` is off or the
    extension is unavailable here (logged once)."""
    if not options.inductor.native_alloc:
        return torch.empty_strided
    module = native_module(options.cache_dir, options.cache_size_limit)
    return torch.empty_strided if module is None else module.empty_strided


def native_module(cache_dir: str | None = None, size_limit: int | None = None) -> ModuleType | None:
    """The extension of this process, loaded and checked on first use (from the store
    under ``cache_dir``), or None where it is unavailable (the reason:
    :func:`unavailable_reason`)."""
    return LOADED.get(lambda: load_module(CacheSettings.resolve(cache_dir, size_limit)))


def unavailable_reason() -> str | None:
    """Why the extension is not used in this process (None: used, or not tried)."""
    return LOADED.reason


def interned_device(device: torch.device) -> torch.device:
    """The one object of this process for ``device``'s value."""
    return _DEVICES.setdefault(device, device)


def load_module(settings: CacheSettings) -> ModuleType:
    """The extension from the artifact store under ``settings`` (built into it when
    missing), its dtypes registered (:func:`register`) and checked (:func:`verify`).
    Raises :class:`NativeAllocUnavailable`."""
    try:
        module = load_extension(extension(), settings)
    except NativeBuildError as error:
        raise NativeAllocUnavailable(str(error)) from error
    register(module)
    verify(module)
    return module


def register(module: ModuleType) -> None:
    """Give ``module`` ``torch.empty_strided`` (every call it does not allocate itself),
    ``torch.device`` and the dtype object of each scalar type code, read from an empty
    tensor of that type it made (:data:`COMMON_DTYPES` looked up first). A dtype that
    ``torch.empty_strided`` refuses is left to it (its error)."""
    codes: dict[torch.dtype, int] = {}
    for code, tensor in module.samples():
        try:
            torch.empty_strided((0,), (1,), dtype=tensor.dtype)
        except Exception:  # noqa: BLE001 - torch's path says what it says of this dtype
            continue
        codes.setdefault(tensor.dtype, code)
    rank = {dtype: index for index, dtype in enumerate(COMMON_DTYPES)}
    ordered = sorted(codes, key=lambda dtype: rank.get(dtype, len(rank)))
    module.init(torch.empty_strided, torch.device, tuple((d, codes[d]) for d in ordered))


def registered_dtypes(module: ModuleType) -> tuple[torch.dtype, ...]:
    """The dtypes ``module`` allocates itself, in lookup order."""
    return tuple(module.dtypes())


def properties(tensor: torch.Tensor) -> tuple[Any, ...]:
    """What the self-test compares: type, dtype, device, sizes, strides, storage offset and
    bytes, ``requires_grad``, ``is_inference``, layout, no ``grad_fn``."""
    return (
        type(tensor),
        tensor.dtype,
        tensor.device,
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.untyped_storage().nbytes(),
        tensor.requires_grad,
        tensor.is_inference(),
        tensor.layout,
        tensor.grad_fn is None,
    )


def verify(module: ModuleType, device: torch.device | None = None) -> None:
    """Raise :class:`NativeAllocUnavailable` unless ``module.empty_strided`` makes the
    tensors ``torch.empty_strided`` makes on ``device`` (default: the CPU) in every
    registered dtype and :data:`SELF_TEST_LAYOUTS`, in and out of inference mode, and
    gives a call it does not take (a list of sizes) to torch."""
    device = interned_device(device if device is not None else torch.device("cpu"))
    empty = module.empty_strided
    dtypes = registered_dtypes(module)
    empty((1,), (1,), dtype=torch.float32, device=device)  # a new device: torch's path
    before = module.torch_calls()
    for inference in (False, True):
        with torch.inference_mode(inference):
            for dtype in dtypes:
                for sizes, strides in SELF_TEST_LAYOUTS:
                    ours = empty(sizes, strides, dtype=dtype, device=device)
                    theirs = torch.empty_strided(sizes, strides, dtype=dtype, device=device)
                    if properties(ours) != properties(theirs):
                        raise NativeAllocUnavailable(
                            f"the self-test failed: {dtype} {sizes} {strides} "
                            f"(inference mode {inference}): {properties(ours)} against "
                            f"{properties(theirs)}"
                        )
    if module.torch_calls() != before:
        raise NativeAllocUnavailable("the self-test failed: an allocation took torch's path")
    listed = empty([2], (1,), dtype=torch.float32, device=device)
    if module.torch_calls() != before + 1 or tuple(listed.shape) != (2,):
        raise NativeAllocUnavailable("the self-test failed: a list of sizes was allocated")
