"""Triton's binaries of our kernels live in the verified store: our compiles and launches
through Triton's dispatch run with the verified manager selected (checked on the CPU with
a stand-in kernel), and on a GPU a corrupted binary is found and rebuilt by the next
process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from torchstrata.core.artifacts import ArtifactStore, CacheSettings, CacheWarning
from torchstrata.core.artifacts.triton_cache import (
    NAMESPACE,
    ScopedTritonCache,
    VerifiedTritonCache,
    verified_triton_cache,
)

triton_tuning = pytest.importorskip("torchstrata.inductor.codegen.triton.tuning")
from triton.runtime.cache import get_cache_manager  # noqa: E402


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
