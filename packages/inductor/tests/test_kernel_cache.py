"""The kernel caches on disk: corrupted entries rebuilt, identical kernels built once,
builds in parallel, ``$CXX``, and eight cold processes building the same kernels."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    interpret,
    prim,
    random_inputs,
)
from torchstrata.core.artifacts import CacheWarning
from torchstrata.core.artifacts import store as artifact_store
from torchstrata.inductor import compile_graph
from torchstrata.inductor.codegen.cpp import build as cpp_build

_SOURCE = """
extern "C" void {name}(const float* __restrict__ buf_{a}, float* __restrict__ buf_{b}) {{
  for (int i = 0; i < 8; ++i) {{ const float acc_{a} = buf_{a}[i]; buf_{b}[i] = acc_{a} * {k}f; }}
}}
"""


def _kernel(name: str, a: str = "x", b: str = "y", k: float = 2.0) -> cpp_build.KernelSource:
    return cpp_build.KernelSource(_SOURCE.format(name=name, a=a, b=b, k=k), name, 2)


def _run(built: cpp_build.BuiltKernel, k: float) -> None:
    x = torch.linspace(-2, 2, 8)
    y = torch.empty(8)
    built.fn(x.data_ptr(), y.data_ptr())
    torch.testing.assert_close(y, x * k)


def _count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sources: list[str] = []
    real = cpp_build._compile

    def counting(compiler: cpp_build.Compiler, source: str) -> bytes:
        sources.append(source)
        return real(compiler, source)

    monkeypatch.setattr(cpp_build, "_compile", counting)
    return sources


def layered_graph(layers: int, rows: int = 4, width: int = 8):
    """``layers`` identical blocks (a matmul, then a row softmax of its scaled output)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, width), torch.float32))
    w = b.input("w", TensorMeta((width, width), torch.float32))
    for _ in range(layers):
        e = b.call(prim("exp"), b.call(prim("mul"), b.call(aten("mm.default"), x, w), 0.125))
        total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), e, (1,)), (rows, width), (0,))
        x = b.call(prim("div"), e, total)
    return b.build([x])


def test_identical_kernels_are_one_entry_and_one_build(tmp_path, monkeypatch):
    compiles = _count_compiles(monkeypatch)
    kernels = [_kernel(f"kernel{i}", f"mm_{i}", f"div_{i}") for i in range(16)]
    built = cpp_build.build_kernels(kernels, tmp_path)
    assert len(compiles) == 1 and len({b.path for b in built}) == 1
    for one in built:
        _run(one, 2.0)
    assert [b.cached for b in built] == [False] + [True] * 15
    assert sum(b.compile_seconds > 0 for b in built) == 1
    # Only the names differ there; a different constant is a different kernel.
    other = cpp_build.build_kernels([_kernel("kernel99", k=3.0)], tmp_path)[0]
    _run(other, 3.0)
    assert len(compiles) == 2 and other.path != built[0].path


def test_repeated_layers_of_a_graph_are_built_once(tmp_path, monkeypatch):
    compiles = _count_compiles(monkeypatch)
    graph = layered_graph(6)
    compiled = compile_graph(graph, "cpu", CompileOptions(codegen="cpp", cache_dir=str(tmp_path)))
    assert len(compiled.kernels) >= 6
    assert len(compiles) == len({kernel.path for kernel in compiled.kernels}) < 6
    args = random_inputs(graph, seed=0)
    torch.testing.assert_close(compiled(*args), interpret(graph, *args))


def test_a_graphs_kernels_compile_in_parallel(tmp_path, monkeypatch):
    # Two compiles must be in flight at once to pass the barrier: sequential builds
    # would break it (after its timeout) and fail the build.
    barrier = threading.Barrier(2, timeout=60)
    real = cpp_build._compile

    def meeting(compiler: cpp_build.Compiler, source: str) -> bytes:
        barrier.wait()
        return real(compiler, source)

    monkeypatch.setattr(cpp_build, "_compile", meeting)
    monkeypatch.setattr(cpp_build, "_cores", lambda: 4)
    built = cpp_build.build_kernels([_kernel("a", k=4.0), _kernel("b", k=5.0)], tmp_path)
    _run(built[0], 4.0)
    _run(built[1], 5.0)


def test_cxx_is_the_compiler_that_runs(tmp_path, monkeypatch):
    log = tmp_path / "cxx.log"
    wrapper = tmp_path / "my-cxx"
    real = cpp_build.find_compiler(None).command[0]
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o700)
    monkeypatch.setenv("CXX", f"{wrapper} -DTS_FROM_CXX=1")
    built = cpp_build.build_kernel(_SOURCE.format(name="k", a="x", b="y", k=6.0), "k", 2, tmp_path)
    _run(built, 6.0)
    assert "-DTS_FROM_CXX=1" in log.read_text() and "-O3" in log.read_text()


_CORRUPTED_CHILD = textwrap.dedent(
    """
    import sys, warnings
    import torch
    from torchstrata.inductor.codegen.cpp import build as cpp_build
    source, root = sys.argv[1], sys.argv[2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in (2.0, 3.0, 4.0):
            name = f"k{int(k)}"
            built = cpp_build.build_kernel(source.format(name=name, a="x", b="y", k=k), name, 2, root)
            x = torch.linspace(-2, 2, 8); y = torch.empty(8)
            built.fn(x.data_ptr(), y.data_ptr())
            torch.testing.assert_close(y, x * k)
    print(sum("bad cache entry" in str(w.message) for w in caught))
    """
)


def test_corrupted_libraries_are_rebuilt_in_the_next_process(tmp_path):
    """A truncated library used to kill the next process with SIGBUS, a bit-flipped one to
    segfault it: a fresh process now finds each bad, warns, rebuilds and runs it."""
    paths = []
    for k in (2.0, 3.0, 4.0):
        built = cpp_build.build_kernel(
            _SOURCE.format(name=f"k{int(k)}", a="x", b="y", k=k), f"k{int(k)}", 2, tmp_path
        )
        paths.append(Path(built.path))
    truncated, flipped, missing = paths
    truncated.write_bytes(truncated.read_bytes()[:4096])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside the code
    flipped.write_bytes(bytes(data))
    missing.unlink()
    result = subprocess.run(
        [sys.executable, "-c", _CORRUPTED_CHILD, _SOURCE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "3"
    for path in paths:
        assert path.exists()


def test_a_bad_triton_module_is_rebuilt(tmp_path, monkeypatch):
    from torchstrata.inductor.codegen.triton import backend as triton_backend

    source = "import triton\n\n\ndef ts_kernel():\n    return 7\n"
    module, path = triton_backend.load_module(source, "ts_kernel", str(tmp_path), True)
    assert module.ts_kernel() == 7
    Path(path).write_text(source.replace("7", "8"))  # tampered: must never be executed
    monkeypatch.setattr(triton_backend, "_MODULES", {})
    with pytest.warns(CacheWarning, match="does not match"):
        module, again = triton_backend.load_module(source, "ts_kernel", str(tmp_path), True)
    assert module.ts_kernel() == 7 and again == path


def test_a_triton_module_is_executed_from_its_verified_text_without_bytecode(tmp_path, monkeypatch):
    """With bytecode writing on (a user's default), loading a kernel module leaves no
    ``__pycache__`` in the store: what runs is the text whose hash was checked, never a
    ``.pyc`` beside it; Triton still finds the function's source in the entry's file."""
    import inspect
    import sys

    from torchstrata.inductor.codegen.triton import backend as triton_backend

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(triton_backend, "_MODULES", {})
    source = "import triton\n\n\ndef ts_kernel():\n    return 9\n"
    module, path = triton_backend.load_module(source, "ts_kernel", str(tmp_path), True)
    assert module.ts_kernel() == 9
    assert module.__file__ == path
    assert "return 9" in inspect.getsource(module.ts_kernel)
    assert not list(tmp_path.rglob("__pycache__")) and not list(tmp_path.rglob("*.pyc"))


def test_eight_cold_processes_building_one_graphs_kernels(tmp_path):
    """Eight forked processes, none with anything loaded or cached in memory, build the
    same six kernels (three of them identical but for their names) into one cold cache
    at once: each distinct kernel is compiled by exactly one of them, all run right."""
    root, go, log = tmp_path / "cache", tmp_path / "go", tmp_path / "compiles"
    kernels = [_kernel(f"k{i}", f"mm_{i}", f"out_{i}", 2.0) for i in range(3)]
    kernels += [_kernel(f"k{i}", k=float(i)) for i in range(3, 6)]
    scales = [2.0, 2.0, 2.0, 3.0, 4.0, 5.0]

    def child() -> None:
        # Cold: no library loaded, no store open (a fork inherits the parent's memory).
        cpp_build._LOADED.clear()
        cpp_build._KNOWN.clear()
        artifact_store._STORES.clear()
        real = cpp_build._compile

        def logged(compiler: cpp_build.Compiler, source: str) -> bytes:
            with open(log, "a") as handle:
                handle.write(f"{os.getpid()}\n")
            return real(compiler, source)

        cpp_build._compile = logged
        while not go.exists():
            time.sleep(0.001)
        built = cpp_build.build_kernels(kernels, root)
        for one, scale in zip(built, scales, strict=True):  # ctypes only: no torch here
            x = (ctypes.c_float * 8)(*range(8))
            y = (ctypes.c_float * 8)()
            one.fn(ctypes.addressof(x), ctypes.addressof(y))
            if list(y) != [value * scale for value in range(8)]:
                os._exit(3)

    pids = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            status = 4  # an exception in the child (the child never returns into pytest)
            try:
                child()
                status = 0
            finally:
                os._exit(status)
        pids.append(pid)
    go.write_text("")
    statuses = [os.waitpid(pid, 0)[1] for pid in pids]
    assert all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in statuses), statuses
    assert len(log.read_text().split()) == 4  # one compile per distinct kernel
    assert len(list((root / "v1" / "cpp").rglob("*.so"))) == 4
    assert not list(root.rglob("*.tmp"))
