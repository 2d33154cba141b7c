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
from pathlib import Path

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
