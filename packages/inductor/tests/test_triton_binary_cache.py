"""Triton's binaries of our kernels live in the verified store: our compiles and launches
through Triton's dispatch run with the verified manager selected (on the CPU: a stand-in
kernel, and a generated kernel compiled for an sm_90 target into ``cache_dir``), and on
a GPU a corrupted binary is found and rebuilt by the next process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.cache import get_cache_manager

from torchstrata.core import CompileOptions, GraphBuilder, InductorOptions, Level, TensorMeta, prim
from torchstrata.core.artifacts import ArtifactStore, CacheSettings, CacheWarning
from torchstrata.inductor.codegen.triton import tuning as triton_tuning
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.codegen.triton.verified_cache import (
    NAMESPACE,
    ScopedTritonCache,
    VerifiedTritonCache,
    verified_triton_cache,
)
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


class RecordingJit:
    """A jit function's stand-in: each ``fn[grid](*args, **constants)`` records the cache
    manager Triton's compile would get at that moment."""

    __name__ = "triton_fused_exp"

    def __init__(self) -> None:
        self.managers: list[object] = []

    def __getitem__(self, grid):
        def launch(*args, **constants):
            self.managers.append(get_cache_manager("ab" * 32))

        return launch


@pytest.mark.parametrize("direct_launch", [False, True])
def test_first_call_and_dispatch_launches_use_the_verified_manager(
    tmp_path, monkeypatch, direct_launch
):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-own"))
    store = ArtifactStore(CacheSettings.resolve(tmp_path / "cache"))
    configs = [triton_tuning.Config(1024, 1, 4, True)]
    jit = RecordingJit()
    kernel = triton_tuning.TunedKernel(
        {configs[0].variant: jit},
        configs,
        4096,
        None,
        compiled=True,
        direct_launch=direct_launch,
        compile_scope=lambda: verified_triton_cache(store),
    )
    x = torch.zeros(8)
    for _ in range(3):
        kernel(x)
    assert len(jit.managers) == 3  # the stand-in cannot launch directly: every call dispatches
    for manager in jit.managers:
        assert isinstance(manager, ScopedTritonCache)
        assert isinstance(manager.files, VerifiedTritonCache) and manager.files.store is store
    assert not isinstance(get_cache_manager("ab" * 32), ScopedTritonCache)  # only inside


def test_a_generated_kernel_compiles_into_the_configured_cache_dir(tmp_path, monkeypatch):
    """The Triton backend builds a GPU kernel (no GPU needed to build) whose compile scope
    is the store of ``CompileOptions.cache_dir``: Triton's compile of that very kernel
    (for an sm_90 target) writes its cubin there and nothing to Triton's own cache."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-own"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "no GPU: built only")
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 96), torch.float32, device="cuda"))
    graph = b.build([b.call(prim("mul"), b.call(prim("exp"), x), 0.5)])
    inductor = InductorOptions(cluster_rows=False)
    options = CompileOptions(cache_dir=str(tmp_path / "cache"), inductor=inductor)
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = [s for s in plan_graph(graph, lowered).steps if isinstance(s, Kernel)]
    tuned = TritonBackend(False, inductor).build(kernel, options).launch.handle
    (jit,) = tuned.variants.values()
    config = tuned.configs[0]
    *buffers, xnumel, xblock, rblock = jit.arg_names
    assert (xnumel, xblock, rblock) == ("xnumel", "XBLOCK", "RBLOCK")
    signature = {name: "*fp32" for name in buffers}
    signature |= {xnumel: "i32", xblock: "constexpr", rblock: "constexpr"}
    constants = {(len(buffers) + 1,): config.xblock, (len(buffers) + 2,): config.rblock}
    with tuned.compile_scope():
        compiled = triton.compile(
            ASTSource(jit, signature, constants), target=GPUTarget("cuda", 90, 32)
        )
    (cubin,) = (tmp_path / "cache" / "v1" / NAMESPACE).rglob("*.cubin")
    assert cubin.read_bytes() == compiled.asm["cubin"]
    assert not list((tmp_path / "triton-own").rglob("*.cubin"))


_CHILD = textwrap.dedent(
    """
    import sys, warnings
    import torch
    from torchstrata.core import CompileOptions, GraphBuilder, Level, TensorMeta, prim
    from torchstrata.inductor import compile_graph

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 96), torch.float32, device="cuda"))
    graph = b.build([b.call(prim("mul"), b.call(prim("exp"), x), 0.5)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = CompileOptions(codegen="triton", cache_dir=sys.argv[1])
        compiled = compile_graph(graph, "cuda", options)
        x = torch.randn(64, 96, device="cuda")
        (out,) = compiled.fn(x)
        torch.testing.assert_close(out, torch.exp(x) * 0.5)
    print(sum("bad cache entry" in str(w.message) for w in caught))
    """
)


def _child(root: Path, triton_dir: Path) -> int:
    env = {**os.environ, "TRITON_CACHE_DIR": str(triton_dir)}
    env.pop("TRITON_INTERPRET", None)
    env.pop("TRITON_CACHE_MANAGER", None)
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("fault", ["truncated", "bit_flip"])
def test_a_corrupted_triton_binary_is_rebuilt_by_the_next_process(tmp_path, fault):
    """Two fresh processes compile the same kernel; between them every cubin in the store
    is damaged. The second finds the one it needs bad, warns, has Triton rebuild it and
    computes right; Triton's own cache directory never receives our binaries."""
    root, triton_dir = tmp_path / "cache", tmp_path / "triton-own"
    assert _child(root, triton_dir) == 0
    cubins = sorted((root / "v1" / NAMESPACE).rglob("*.cubin"))
    assert cubins, "no Triton binary in the store"
    damaged = {}
    for cubin in cubins:
        data = bytearray(cubin.read_bytes())
        if fault == "truncated":
            data = data[: len(data) // 2]
        else:
            data[len(data) // 2] ^= 0x10
        cubin.write_bytes(bytes(data))
        damaged[cubin] = bytes(data)
    warned = _child(root, triton_dir)
    rebuilt = [c for c in cubins if c.exists() and c.read_bytes() != damaged[c]]
    assert warned >= 1 and len(rebuilt) == warned
    store = ArtifactStore(CacheSettings.resolve(root))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        for cubin in rebuilt:
            key, suffix = cubin.name.split(".", 1)
            assert store.get(NAMESPACE, key, f".{suffix}") == cubin
    assert not list(triton_dir.rglob("*.cubin"))


def test_the_runtimes_direct_launches_compile_through_the_verified_manager(tmp_path):
    """The unit-gradient scaling kernel (launched through ``torchstrata_direct_launch``)
    compiles in the verified scope of its compile's cache settings, never in Triton's
    unverified cache."""
    from torchstrata.core import CompileOptions
    from torchstrata.inductor.plugin import torchstrata_direct_launch

    managers = []

    def fallback(*args):
        managers.append(get_cache_manager("cd" * 32))

    options = CompileOptions(cache_dir=str(tmp_path / "cache"))
    launch = torchstrata_direct_launch(
        kernel=object(), grid=(1,), constants={}, fallback=fallback, options=options
    )
    launch(torch.zeros(4), torch.ones(1))
    assert len(managers) == 1 and isinstance(managers[0], ScopedTritonCache)
    assert managers[0].store.root == ArtifactStore(CacheSettings.resolve(options.cache_dir)).root
    assert get_cache_manager("cd" * 32).__class__ is not ScopedTritonCache  # scope closed
