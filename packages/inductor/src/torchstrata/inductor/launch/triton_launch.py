"""Launching a compiled Triton kernel without Triton's per-call dispatch.

``fn[grid](*args, XBLOCK=..., num_warps=...)`` binds the arguments, specialises each one
(pointer alignment, integer values) and hashes a cache key on every call. On the H200
machine's host, a tiny LayerNorm training step (four launches) took 376 us against eager's
141, and under cProfile a third of it was Triton's ``JITFunction.run``
(bench/results/2026-11-30-h200-training-host-time.txt): for such steps the host, not
the GPU, sets the time.

:class:`DirectLaunch` makes the first call through Triton's dispatch, takes the compiled
kernel it used, and from then on calls that kernel's launcher itself with the fixed grid
and constants (for a kernel without scratch memory, the C function under Triton's
Python ``CudaLauncher``, whose ``__call__`` only allocates scratch). The compiled kernel
assumed what Triton specialised it on, so every call checks the one thing that can
change under the runtime's guards (which fix shapes, strides and dtypes): each pointer's
16-byte alignment, and the current device (the kernel was loaded on one). A different alignment or device, a launch hook (a profiler),
or any error in taking the kernel goes through Triton's dispatch.

On by default; ``InductorOptions(direct_launch=False)`` turns it off. Checked on the H200 (Triton
3.6): the benchmark workloads' kernels, launched directly, match eager
(``a one-off device script (git history)``), as do ``test_triton_launch.py``'s
pointwise, persistent and looped kernels and their misaligned inputs; a tiny LayerNorm
training step went from 183 to 165 us of host time (``prof_train.py``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

Launch = Callable[..., None]


def _alignment(args: Sequence[Any]) -> tuple[bool, ...] | None:
    """Each argument's 16-byte alignment, the specialisation Triton keys pointers on;
    None when an argument is not a tensor (then Triton specialises its value)."""
    if not all(isinstance(arg, torch.Tensor) for arg in args):
        return None
    return _aligned(args)


def _aligned(tensors: Sequence[torch.Tensor]) -> tuple[bool, ...]:
    """Each tensor's 16-byte alignment (``DirectLaunch.__call__``'s hot path computes the
    same inline: the launcher always passes tensors where the kernel was taken with
    tensors)."""
    return tuple([not tensor.data_ptr() & 15 for tensor in tensors])


class DirectLaunch:
    """A launcher of ``jit_fn`` on ``grid`` with ``constants`` (the constexpr values by
    name, and ``num_warps``/``num_stages``); ``fallback`` launches through Triton.

    It keeps the binary its first call compiled, specialized on that call's argument
    dtypes, and checks only alignment and device on later calls: a caller must key its
    launchers by the arguments' dtypes (generated kernels are, through their graph's
    guards; the unit-gradient scaling caches one per dtype pair)."""

    def __init__(
        self,
        jit_fn: Any,
        grid: tuple[int, ...],
        constants: dict[str, int],
        fallback: Launch,
        compile_scope: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> None:
        self.jit_fn = jit_fn
        self.compile_scope = compile_scope
        self.grid = (*grid, 1, 1)[:3]
        self.constants = constants
        self.fallback = fallback
        self.kernel: Any = None
        self.launcher: Launch = fallback
        self.head: tuple[Any, ...] = ()
        self.aligned: tuple[bool, ...] | None = None
        self.extra: tuple[int, ...] = ()
        self.device: Any = None  # the current device when the kernel was taken
        self.get_device, self.get_stream = _late_getters()
        self.usable = True
        self.proven = False  # a direct launch has succeeded
        #: Called once with :meth:`hot_path` after the first direct launch succeeded (the
        #: owner calls that function from then on); None: nobody asks.
        self.on_proven: Callable[[Launch], None] | None = None

    def __call__(self, *args: Any) -> None:
        """Launch on ``args``."""
        if (  # the hot path in one frame (host time per launch)
            self.proven
            and self.get_device() == self.device
            and not _hooked()
            and tuple([not arg.data_ptr() & 15 for arg in args]) == self.aligned
        ):
            gx, gy, gz = self.grid
            stream = self.get_stream(self.device)
            self.launcher(gx, gy, gz, stream, *self.head, *args, *self.extra)
            return
        if (
            self.kernel is None
            or not self.usable
            or _hooked()
            or _aligned(args) != self.aligned
            or _current_device() != self.device
        ):
            with self.compile_scope():  # Triton compiles (or reads its cache) here
                self.fallback(*args)
                if self.kernel is None and self.usable:
                    self._take_kernel(args)
            return
        try:  # the first direct launch: a launcher of another signature raises here
            self._launch(args)
        except Exception:  # noqa: BLE001 - keep dispatching through Triton
            self.usable = False
            self.fallback(*args)
            return
        self.proven = True
        if self.on_proven is not None:
            self._hand_on(len(args))

    def _hand_on(self, count: int) -> None:
        """Hand :attr:`on_proven` the hot path that passes pointers as ints, wrapped to
        fall back, on its first call, to the one that passes the tensors where this
        Triton's launcher refuses ints (its arguments are read before anything is
        launched)."""
        assert self.on_proven is not None
        handed = self.on_proven
        by_pointer = self.hot_path(count, pointers=True)
        if by_pointer is None:
            return

        def first(*args: Any) -> None:
            try:
                by_pointer(*args)
            except (TypeError, ValueError, OverflowError):
                handed(self.hot_path(count, pointers=False) or self)
                self(*args)
                return
            handed(by_pointer)

        handed(first)

    def hot_path(self, count: int, pointers: bool = True) -> Launch | None:
        """A launcher of ``count`` tensors that makes this object's hot-path tests and
        launch in one generated function, its constants bound: the device is the one the
        kernel was taken on, no launch hook is set (Triton's hook objects of now, still
        empty), and each pointer has the alignment it had (all the aligned ones ORed:
        one test); else it calls this object (every other case). None where the hooks
        are not ones it can test so (a function set as a hook).

        ``pointers``: the launcher is passed each tensor's ``data_ptr()`` (read for the
        alignment anyway) instead of the tensor, so that Triton's launcher neither calls
        ``data_ptr`` again nor asks the driver (``cuPointerGetAttribute``) for the device
        pointer of each: the tensors are CUDA tensors of the device (the runtime's guards,
        the launcher's own allocations), whose ``data_ptr`` is that pointer."""
        runtime = _runtime_knobs()
        if runtime is None or self.aligned is None or len(self.aligned) != count:
            return None
        names: dict[str, Any] = {"runtime": runtime, "slow": self, "launcher": self.launcher}
        names |= {"get_device": self.get_device, "get_stream": self.get_stream}
        names["device"] = self.device
        tests = ["get_device() == device"]
        for hook in ("launch_enter_hook", "launch_exit_hook"):
            value = getattr(runtime, hook)
            if value is None:
                tests.append(f"runtime.{hook} is None")
            elif isinstance(getattr(value, "calls", None), list):
                names[f"_{hook}"] = value
                tests.append(f"runtime.{hook} is _{hook} and not _{hook}.calls")
            else:
                return None
        args = [f"a{index}" for index in range(count)]
        if pointers:
            passed = [f"p{index}" for index in range(count)]
            reads = [f"    {p} = {a}.data_ptr()\n" for p, a in zip(passed, args, strict=True)]
            pointer = passed
        else:
            passed, reads = args, []
            pointer = [f"{arg}.data_ptr()" for arg in args]
        aligned = [ptr for ptr, ok in zip(pointer, self.aligned, strict=True) if ok]
        if aligned:
            tests.append(f"not (({' | '.join(aligned)}) & 15)")
        tests += [f"{ptr} & 15" for ptr, ok in zip(pointer, self.aligned, strict=True) if not ok]
        values = [*self.grid, *self.head]
        constants = [f"_k{index}" for index in range(len(values))]
        names |= dict(zip(constants, values, strict=True))
        extra = [f"_e{index}" for index in range(len(self.extra))]
        names |= dict(zip(extra, self.extra, strict=True))
        gx, gy, gz, *head = constants
        launched = ", ".join([gx, gy, gz, "get_stream(device)", *head, *passed, *extra])
        source = (
            f"def direct_launch({', '.join(args)}):\n"
            + "".join(reads)
            + f"    if {' and '.join(tests)}:\n"
            f"        launcher({launched})\n"
            f"    else:\n"
            f"        slow({', '.join(args)})\n"
        )
        exec(compile(source, "<torchstrata direct launch>", "exec"), names)  # our own code
        hot: Launch = names["direct_launch"]
        hot.__doc__ = source
        return hot

    def _launch(self, args: Sequence[Any]) -> None:
        gx, gy, gz = self.grid
        self.launcher(gx, gy, gz, self.get_stream(self.device), *self.head, *args, *self.extra)

    def _take_kernel(self, args: Sequence[Any]) -> None:
        """The compiled kernel Triton's dispatch used for ``args`` (a cache hit: nothing
        is compiled or launched), or give up on launching directly."""
        try:
            names = list(self.jit_fn.arg_names)
            extra = tuple(self.constants[name] for name in names[len(args) :])
            aligned = _alignment(args)
            kernel = self.jit_fn.warmup(*args, grid=self.grid, **self.constants)
            kernel._init_handles()
            device = _current_device()
            if aligned is None or not hasattr(kernel, "packed_metadata"):
                raise TypeError("not a launch this class knows how to repeat")
        except Exception:  # noqa: BLE001 - any Triton version difference: keep dispatching
            self.usable = False
            return
        self.kernel, self.aligned, self.extra, self.device = kernel, aligned, extra, device
        self.launcher, self.head = _launcher_of(kernel)
        self.get_device, self.get_stream = _getters()


def _launcher_of(kernel: Any) -> tuple[Launch, tuple[Any, ...]]:
    """``(launch, head)``: ``launch(gx, gy, gz, stream, *head, *args)`` launches
    ``kernel``. When the kernel needs no scratch memory, that is the C launcher of
    Triton's ``CudaLauncher`` itself (its Python ``__call__`` only allocates scratch
    memory, a few microseconds of host time per launch); otherwise its ``run``."""
    run = kernel.run
    metadata = (kernel.packed_metadata, None, None, None)
    try:
        if run.global_scratch_size == 0 and run.profile_scratch_size == 0:
            flags = (run.launch_cooperative_grid, run.launch_pdl, None, None)
            return run.launch, (kernel.function, *flags, *metadata)
    except AttributeError:  # another Triton's launcher: its own call
        pass
    return run, (kernel.function, *metadata)


def cluster_launch_supported() -> bool:
    """The current GPU launches thread-block clusters (compute capability 9.0 or later);
    ``InductorOptions(cluster_rows=False)`` keeps the autotuner from offering them."""
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability() >= (9, 0)


class ClusterLaunch:
    """A launcher of ``jit_fn`` as ``clusters`` thread-block clusters of ``size`` programs
    each (Hopper and later), for kernels whose programs meet at cluster barriers
    (``generate_triton`` with ``cluster``, see ``triton_cluster``).

    Triton compiles the kernel for one program (``num_ctas=1``: its own multi-CTA mode
    splits tensors across the cluster, which is not wanted here) and its launcher is then
    called with ``num_ctas=size`` in the packed metadata, so it launches ``clusters * size``
    programs grouped as clusters of ``size`` consecutive program ids. There is no fallback
    through Triton's dispatch: that would launch without clusters. Failures raise (the
    autotuner skips such a configuration; the runtime falls back to eager). A kernel is
    compiled per pointer alignment and device, as Triton's dispatch would.
    """

    def __init__(self, jit_fn: Any, clusters: int, size: int, constants: dict[str, int]) -> None:
        self.jit_fn = jit_fn
        self.clusters = clusters
        self.size = size
        self.constants = constants
        self.kernels: dict[tuple[Any, tuple[bool, ...]], tuple[Any, tuple[Any, ...]]] = {}
        names = list(jit_fn.arg_names)
        self.extra = tuple(constants[name] for name in names if name in constants)

    def __call__(self, *args: Any) -> None:
        """Launch on ``args`` (tensors)."""
        device = _current_device()
        key = (device, _aligned(args))
        taken = self.kernels.get(key)
        if taken is None:
            taken = self.kernels[key] = self._take_kernel(args)
        kernel, metadata = taken
        kernel.run(
            self.clusters, 1, 1, current_stream(device), kernel.function, metadata,
            None, None, None, *args, *self.extra,
        )  # fmt: skip

    def _take_kernel(self, args: Sequence[Any]) -> tuple[Any, tuple[Any, ...]]:
        grid = (self.clusters * self.size,)
        kernel = self.jit_fn.warmup(*args, grid=grid, **self.constants)
        kernel._init_handles()
        num_warps, num_ctas, shared = kernel.packed_metadata
        if num_ctas != 1:
            raise RuntimeError(f"{self.jit_fn.__name__} was compiled for {num_ctas} CTAs, not 1")
        return kernel, (num_warps, self.size, shared)


@functools.cache
def _driver() -> Any:
    """Triton's active driver (imported once: a per-call import costs a lookup each launch)."""
    from triton.runtime import driver

    return driver.active


def _late_getters() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """Getters that call this module's ``_current_device`` and ``current_stream`` (looked
    up at each call)."""
    return (lambda: _current_device()), (lambda device: current_stream(device))


def _getters() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """The current device's and stream's getters of Triton's dispatch, for the hot path.

    Triton's CUDA driver asks torch: ``torch.cuda.current_device`` (two Python frames of
    lazy-init checks around ``torch._C._cuda_getDevice``) and the C
    ``_cuda_getCurrentRawStream``. Once CUDA is initialised (a kernel was loaded) the
    device is read from the C function directly."""
    get_device, get_stream = _late_getters()
    try:
        driver = _driver()
    except Exception:  # noqa: BLE001 - no active driver: Triton's dispatch decides
        return get_device, get_stream
    torch_device = getattr(driver, "get_current_device", None) is torch.cuda.current_device
    if torch_device and torch.cuda.is_initialized() and hasattr(torch._C, "_cuda_getDevice"):
        get_device = torch._C._cuda_getDevice
    if getattr(driver, "get_current_stream", None) is getattr(
        torch._C, "_cuda_getCurrentRawStream", False
    ):
        get_stream = driver.get_current_stream
    return get_device, get_stream


def _current_device() -> Any:
    """The device Triton's dispatch would launch on (a kernel is loaded per device)."""
    return _driver().get_current_device()


def current_stream(device: Any) -> Any:
    """The current stream of ``device``, which Triton's dispatch would launch on."""
    return _driver().get_current_stream(device)


@functools.cache
def _runtime_knobs() -> Any:
    """``triton.knobs.runtime`` (where launch hooks are set), or None on an older Triton."""
    try:
        from triton import knobs
    except ImportError:  # pragma: no cover - older Triton: no direct launches
        return None
    return knobs.runtime


def _hooked() -> bool:
    """True when a launch hook is set (a profiler watches launches: let Triton call it)."""
    runtime = _runtime_knobs()
    if runtime is None:  # pragma: no cover - older Triton
        return True
    return _is_set(runtime.launch_enter_hook) or _is_set(runtime.launch_exit_hook)


def _is_set(hook: Any) -> bool:
    """A hook is set: a function (older Triton), or a chain of hooks that is not empty
    (newer Triton keeps an empty ``HookChain`` there by default)."""
    return hook is not None and bool(getattr(hook, "calls", True))
