"""The compiled-graph cache on disk: a second process skips autograd, decomposition and
code generation, and still computes what eager does.

The cold compile runs in this process; the warm one in a fresh process with the same
cache directory. In-process tests compile again after ``reset()`` (which empties the
in-memory caches only), so what they reuse came from the disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.capture import graph_break
from torchstrata.core import CompileOptions, InductorOptions
from torchstrata.core.artifacts import LAYOUT, CacheSettings, CacheWarning, open_store
from torchstrata.runtime.graph_cache_key import entry_key, options_identity

pytestmark = pytest.mark.graph_cache


class Net(nn.Module):
    """A small classifier: linear, LayerNorm, GELU, linear, cross-entropy."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.norm(self.fc1(x)))
        return torch.nn.functional.cross_entropy(self.fc2(hidden), target)


def make() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model and one batch, the same in every process."""
    torch.manual_seed(0)
    return Net(), torch.randn(16, 32), torch.randint(0, 10, (16,))


WARM = """
import json, sys
import torch
import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions

sys.path.insert(0, sys.argv[2])
from test_graph_cache import make

model, x, target = make()
eager_model, _, _ = make()
compiled = tsr.compile(model, options=CompileOptions(cache_dir=sys.argv[1]))
loss = compiled(x, target)
loss.backward()
stats = tsr.graph_cache_stats()
eager_loss = eager_model(x, target)
eager_loss.backward()
same = torch.allclose(loss, eager_loss, rtol=1e-5, atol=1e-6) and all(
    torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    for p, q in zip(model.parameters(), eager_model.parameters())
)
report = tsr.explain(compiled, x, target)
print(json.dumps({
    "same": bool(same),
    "hits": stats.hits, "misses": stats.misses, "stores": stats.stores,
    "from_cache": report.from_graph_cache, "events": list(report.graph_cache),
}))
"""


def _train_step(cache_dir: Path, **options: object) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model, x, target = make()
    compiled = tsr.compile(model, options=CompileOptions(cache_dir=str(cache_dir), **options))
    loss = compiled(x, target)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def _eager_step() -> tuple[torch.Tensor, list[torch.Tensor]]:
    model, x, target = make()
    loss = model(x, target)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def _assert_eager(result: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    loss, grads = result
    eager_loss, eager_grads = _eager_step()
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
    for grad, eager_grad in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(grad, eager_grad, rtol=1e-4, atol=1e-6)


def _entries(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / LAYOUT / "graphs").glob("*/*.json"))


def _delta(before: tsr.GraphCacheStats) -> dict[str, int]:
    after = tsr.graph_cache_stats()
    return {
        name: getattr(after, name) - getattr(before, name)
        for name in attrs.fields_dict(tsr.GraphCacheStats)
    }


def test_a_second_process_takes_the_compiled_graphs_from_the_cache(tmp_path: Path) -> None:
    before = tsr.graph_cache_stats()
    _assert_eager(_train_step(tmp_path))
    cold = _delta(before)
    # the forward's autograd entry, and the forward's and backward's lowered entries
    assert cold["stores"] == 3 and cold["hits"] == 0
    done = subprocess.run(
        [sys.executable, "-c", WARM, str(tmp_path), str(Path(__file__).parent)],
        env={**os.environ, "TORCHSTRATA_LOGS": "cache"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    warm = json.loads(done.stdout.strip().splitlines()[-1])
    assert warm["same"]
    assert (warm["hits"], warm["misses"], warm["stores"]) == (3, 0, 0)
    assert warm["from_cache"], warm["events"]
    assert any(event.endswith("code generation: hit") for event in warm["events"])
    assert "[cache] graph cache hit: autograd" in done.stderr
    assert "[cache] graph cache hit: code generation" in done.stderr
    assert "graph cache miss" not in done.stderr


def test_a_corrupted_entry_is_removed_and_rebuilt(tmp_path: Path) -> None:
    _train_step(tmp_path)
    entries = _entries(tmp_path)
    victim = max(entries, key=lambda path: path.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x20
    victim.write_bytes(bytes(data))
    tsr.reset()
    before = tsr.graph_cache_stats()
    with pytest.warns(CacheWarning, match="bad cache entry"):
        result = _train_step(tmp_path)
    _assert_eager(result)
    assert _delta(before)["stores"] == 1  # the bad one, written again
    assert victim.read_bytes() != bytes(data)
    tsr.reset()
    before = tsr.graph_cache_stats()
    _train_step(tmp_path)
    assert _delta(before)["hits"] == 3


def test_an_entry_that_passes_the_hash_but_does_not_decode_is_rebuilt(tmp_path: Path) -> None:
    _train_step(tmp_path)
    store = open_store(CacheSettings.resolve(str(tmp_path)))
    for path in _entries(tmp_path):
        document = json.loads(path.read_bytes())
        if "aot" in document:
            document["aot"]["forward"] = "graph aten {\n  nonsense\n}\n"
            store.put("graphs", path.stem, ".json", json.dumps(document).encode())
    tsr.reset()
    before = tsr.graph_cache_stats()
    with pytest.warns(CacheWarning, match="does not parse"):
        result = _train_step(tmp_path)
    _assert_eager(result)
    delta = _delta(before)
    assert delta["rebuilt"] == 1 and delta["stores"] >= 1


def test_the_key_follows_options_and_input_dtypes_not_the_cache_location() -> None:
    text = "graph torch {\n}\n"
    base = CompileOptions()
    key = entry_key("aot", text, base, "installation")
    assert entry_key("aot", text, attrs.evolve(base, cache_dir="/elsewhere"), "installation") == key
    assert entry_key("aot", text, attrs.evolve(base, graph_cache=True), "installation") == key
    tails_off = attrs.evolve(base, inductor=InductorOptions(tails=False))
    assert options_identity(tails_off) != options_identity(base)
    assert entry_key("aot", text, tails_off, "installation") != key
    assert entry_key("aot", text, attrs.evolve(base, codegen="cpp"), "installation") != key
    assert entry_key("aot", text, base, "another installation") != key
    assert entry_key("lowered", text, base, "installation") != key


def test_another_input_dtype_or_option_is_another_entry(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2 + 1

    options = CompileOptions(cache_dir=str(tmp_path))
    tsr.set_logs("cache")
    try:
        with torch.no_grad():
            tsr.compile(f, options=options)(torch.randn(8, 4))
    finally:
        tsr.set_logs()
    logged = capfd.readouterr().err
    assert "[cache] graph cache miss: autograd" in logged
    assert "[cache] graph cache stored: decomposition and code generation" in logged
    with torch.no_grad():
        count = len(_entries(tmp_path))
        assert count == 2  # autograd, lowered
        x64 = torch.randn(8, 4, dtype=torch.float64)
        torch.testing.assert_close(tsr.compile(f, options=options)(x64), f(x64))
        assert len(_entries(tmp_path)) == 2 * count
        other = attrs.evolve(options, inductor=InductorOptions(reciprocals=False))
        tsr.compile(f, options=other)(x64)
        assert len(_entries(tmp_path)) == 3 * count


def test_a_moved_cache_directory_still_hits(tmp_path: Path) -> None:
    first = tmp_path / "first"
    _train_step(first)
    for path in _entries(first):
        assert str(tmp_path) not in path.read_text()  # no absolute path inside an entry
    moved = tmp_path / "moved"
    shutil.move(first, moved)
    tsr.reset()
    before = tsr.graph_cache_stats()
    _assert_eager(_train_step(moved))
    assert _delta(before) == {"hits": 3, "misses": 0, "stores": 0, "rebuilt": 0, "not_cacheable": 0}


def test_graph_cache_off_neither_reads_nor_writes(tmp_path: Path) -> None:
    before = tsr.graph_cache_stats()
    _assert_eager(_train_step(tmp_path, graph_cache=False))
    assert _entries(tmp_path) == []
    assert _delta(before) == {"hits": 0, "misses": 0, "stores": 0, "rebuilt": 0, "not_cacheable": 0}
    assert any((tmp_path / LAYOUT / "cpp").rglob("*.so"))  # kernels are still cached


def test_graphs_on_both_sides_of_a_graph_break_come_from_the_cache(tmp_path: Path) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x) * 3
        graph_break()
        return torch.cos(y) + x

    options = CompileOptions(cache_dir=str(tmp_path))
    x = torch.randn(6, 5)
    with torch.no_grad():
        tsr.compile(f, options=options)(x)
        tsr.reset()
        before = tsr.graph_cache_stats()
        result = tsr.compile(f, options=options)(x)
    torch.testing.assert_close(result, f(x))
    assert _delta(before) == {"hits": 4, "misses": 0, "stores": 0, "rebuilt": 0, "not_cacheable": 0}


def test_the_sizes_of_a_symbolic_training_entry_come_from_the_cache(tmp_path: Path) -> None:
    """A symbolic training entry's lowering made once for many sizes (decisions 0395,
    0450) is stored with the conditions it relied on: after ``reset()`` the sizes seen
    before and a new one are read from it, with nothing lowered or stored, and every
    step is eager's."""
    options = CompileOptions(cache_dir=str(tmp_path), shared_decomposition_from=1)

    def steps(batches: tuple[int, ...]) -> None:
        torch.manual_seed(0)
        model, eager = Net(), Net()
        eager.load_state_dict(model.state_dict())
        compiled = tsr.compile(model, dynamic=True, options=options)
        for rows in batches:
            x, target = torch.randn(rows, 32), torch.randint(0, 10, (rows,))
            loss, eager_loss = compiled(x, target), eager(x, target)
            loss.backward()
            eager_loss.backward()
            torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
            for p, q in zip(model.parameters(), eager.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)

    steps((5, 6))
    tsr.reset()
    tsr.reset_size_lowering_stats()
    before = tsr.graph_cache_stats()
    steps((5, 6, 7))
    warm = _delta(before)
    assert warm["hits"] > 0 and (warm["misses"], warm["stores"]) == (0, 0), warm
    assert tsr.size_lowering_stats() == {"cached": 1, "reused": 2}


def test_the_lowered_key_follows_the_graph_contract(tmp_path: Path) -> None:
    """Input layouts and write-backs change the prims graph and the kernels: an entry
    stored under one contract is not a hit under another."""
    from torchstrata.core import GraphContract, TensorMeta, WriteBack, create_plugin_manager
    from torchstrata.core import parse as parse_graph
    from torchstrata.runtime import graph_cache

    graph = parse_graph(
        "graph aten {\n"
        "  %x: f32[4, 3] = input\n"
        "  %y: f32[4, 3] = aten.tanh.default(%x)\n"
        "  return %y\n"
        "}\n"
    )
    options = CompileOptions(cache_dir=str(tmp_path))
    manager = create_plugin_manager(load_entrypoints=False)
    columns = TensorMeta((4, 3), torch.float32, strides=(1, 4))
    contracts = [
        GraphContract(),
        GraphContract(user_outputs=1),
        GraphContract(input_layouts=(columns,)),
        GraphContract(write_backs=(WriteBack(0, 0),)),
    ]
    lookups = [graph_cache.lookup_lowered(graph, options, manager, c) for c in contracts]
    assert None not in {lookup.key for lookup in lookups}
    assert len({lookup.key for lookup in lookups}) == len(contracts)
    graph_cache.store_lowered(lookups[0], graph, None, options)
    assert graph_cache.lookup_lowered(graph, options, manager, contracts[0]).hit is not None
    for contract in contracts[1:]:
        assert graph_cache.lookup_lowered(graph, options, manager, contract).hit is None


#: The Triton path: the interpreter on CPU tensors here, compiled kernels on a GPU.
TRITON_DEVICES = [
    pytest.param("cpu", marks=pytest.mark.triton),
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]


def _triton_step(cache_dir: Path | None, device: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A training step of the model on ``device``, compiled with Triton (eager when
    ``cache_dir`` is None); the loss and gradients on the CPU."""
    model, x, target = make()
    model = model.to(device)
    step: Any = model
    if cache_dir is not None:
        options = CompileOptions(cache_dir=str(cache_dir), codegen="triton")
        step = tsr.compile(model, options=options)
    loss = step(x.to(device), target.to(device))
    loss.backward()
    return loss.detach().cpu(), [p.grad.cpu() for p in model.parameters()]


def _assert_eager_on(device: str, result: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    loss, grads = result
    eager_loss, eager_grads = _triton_step(None, device)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
    for grad, eager_grad in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(grad, eager_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_triton_kernels_load_from_the_cache_without_code_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """A warm compile (the in-memory caches emptied: the runtime's, and the imported
    kernel modules) takes the Triton kernels from their package: the backend generates
    nothing, and on a GPU Triton writes no binary (each comes from the verified store)."""
    from torchstrata.inductor.codegen.triton import backend as triton_backend
    from torchstrata.inductor.codegen.triton.verified_cache import VerifiedTritonCache

    generated: list[str] = []
    binaries: list[str] = []
    generate, put = triton_backend.TritonBackend.generate, VerifiedTritonCache.put

    def counting_generate(self: Any, kernel: Any, clusters: bool) -> Any:
        generated.append(kernel.name)
        return generate(self, kernel, clusters)

    def counting_put(self: Any, data: Any, filename: str, binary: bool = True) -> str:
        binaries.append(filename)
        return put(self, data, filename, binary)

    monkeypatch.setattr(triton_backend.TritonBackend, "generate", counting_generate)
    monkeypatch.setattr(VerifiedTritonCache, "put", counting_put)
    before = tsr.graph_cache_stats()
    _assert_eager_on(device, _triton_step(tmp_path, device))
    assert generated and _delta(before)["stores"] == 3
    assert bool(binaries) == (device == "cuda")
    packages = [json.loads(path.read_bytes()).get("package") for path in _entries(tmp_path)]
    assert sum(p is not None and p["backend"] == "triton" for p in packages) == 2

    tsr.reset()
    monkeypatch.setattr(triton_backend, "_MODULES", {})
    generated.clear()
    binaries.clear()
    before = tsr.graph_cache_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _triton_step(tmp_path, device)
    _assert_eager_on(device, result)
    unexpected = [
        w for w in caught if issubclass(w.category, tsr.TorchstrataFallbackWarning | CacheWarning)
    ]
    assert not unexpected, [str(w.message) for w in unexpected]  # no fallback, no bad entry
    assert generated == [] and binaries == []
    assert _delta(before) == {"hits": 3, "misses": 0, "stores": 0, "rebuilt": 0, "not_cacheable": 0}
    assert triton_backend._MODULES  # the kernels' modules imported again, from the store


def test_the_key_of_a_cuda_graph_follows_the_gpu_cuda_and_triton(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package of CUDA kernels is for one GPU model, CUDA and Triton: another of any
    of them is another key (the functions the key reads are replaced here, so the test
    needs no GPU); a CPU graph's key reads none of them."""
    from torchstrata.core import create_plugin_manager
    from torchstrata.core import parse as parse_graph
    from torchstrata.runtime import graph_cache, graph_cache_key

    def graph_on(device: str) -> Any:
        return parse_graph(
            "graph aten {\n"
            f"  %x: f32[4, 3] {device} = input\n"
            f"  %y: f32[4, 3] {device} = aten.tanh.default(%x)\n"
            "  return %y\n"
            "}\n"
        )

    options = CompileOptions(cache_dir=str(tmp_path))
    manager = create_plugin_manager(load_entrypoints=False)
    gpu = {"name": "NVIDIA H100 80GB HBM3", "capability": (9, 0), "cuda": "12.8", "triton": "3.6.0"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu["name"])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: gpu["capability"])
    monkeypatch.setattr(graph_cache_key, "triton_version", lambda: gpu["triton"])

    def keys() -> tuple[str | None, str | None]:
        monkeypatch.setattr(torch.version, "cuda", gpu["cuda"])
        graph = graph_on("cuda:0")
        aot = graph_cache.lookup_aot(graph, options, manager).key
        return aot, graph_cache.lookup_lowered(graph, options, manager).key

    base = keys()
    assert None not in base and keys() == base
    for name, other in [
        ("name", "NVIDIA H200"),
        ("capability", (8, 0)),
        ("cuda", "12.6"),
        ("triton", "3.7.0"),
    ]:
        saved, gpu[name] = gpu[name], other
        changed = keys()
        assert changed[0] != base[0] and changed[1] != base[1], name
        gpu[name] = saved
    assert keys() == base

    def no_gpu(*args: object, **kwargs: object) -> None:
        raise AssertionError("a CPU graph's key asked about a GPU")

    monkeypatch.setattr(torch.cuda, "get_device_name", no_gpu)
    monkeypatch.setattr(torch.cuda, "get_device_capability", no_gpu)
    monkeypatch.setattr(graph_cache_key, "triton_version", no_gpu)
    assert graph_cache.lookup_lowered(graph_on("cpu"), options, manager).key is not None


def _scaled(literal: list[float]) -> Any:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * torch.tensor(literal) + 1

    return f


def _step_with_constant(f: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of ``f`` (compiled or eager): its output and the input's gradient."""
    x = torch.linspace(-1.0, 1.0, 12).reshape(4, 3).requires_grad_()
    out = f(x)
    out.sum().backward()
    assert x.grad is not None
    return out.detach(), x.grad


def _assert_step_as_eager(f: Any, options: CompileOptions) -> None:
    out, grad = _step_with_constant(tsr.compile(f, options=options))
    expected, expected_grad = _step_with_constant(f)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)


def test_lifted_constants_come_from_the_cache(tmp_path: Path) -> None:
    """A graph that makes a tensor in its code (``torch.tensor([...])``, lifted as a
    hidden input) is stored with the constant's values, and another literal is another
    entry: never the first one's values."""
    options = CompileOptions(cache_dir=str(tmp_path))
    first, other = _scaled([1.0, -2.0, 3.0]), _scaled([4.0, 5.0, -6.0])
    before = tsr.graph_cache_stats()
    _step_with_constant(tsr.compile(first, options=options))
    assert _delta(before) == {"hits": 0, "misses": 3, "stores": 3, "rebuilt": 0, "not_cacheable": 0}
    tsr.reset()
    before = tsr.graph_cache_stats()
    _assert_step_as_eager(first, options)
    assert _delta(before) == {"hits": 3, "misses": 0, "stores": 0, "rebuilt": 0, "not_cacheable": 0}
    tsr.reset()
    before = tsr.graph_cache_stats()
    _assert_step_as_eager(other, options)
    # the autograd entry is keyed by the literal; the lowered graphs take the constant
    # as an input, so theirs serve both literals
    assert _delta(before) == {"hits": 2, "misses": 1, "stores": 1, "rebuilt": 0, "not_cacheable": 0}
