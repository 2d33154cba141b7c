"""Runners with more than outputs in the compiled-graph cache (decision 0505).

A lowering for many sizes whose runner writes into its inputs in training (a batch norm's
running statistics, a buffer's ``add_``), returns views or aliases of its inputs or of
its other outputs, or runs under autocast is stored, and a fresh process at sizes the
cold one never saw reads it back and lowers nothing (``size_lowering_stats()``:
``cached`` and ``reused`` only), through ``tsr.compile(dynamic=True)`` and through
Dynamo's backend. Every call is checked against eager: outputs, gradients, the inputs it
writes, and which outputs are views of which inputs or outputs. The other tests check
that an entry never serves another autocast state and that a damaged recipe is removed
with a warning and lowered again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions
from torchstrata.core.artifacts import LAYOUT, CacheSettings, CacheWarning, open_store

pytestmark = [pytest.mark.graph_cache, pytest.mark.usefixtures("size_counts_no_fallback")]


def _compiled(
    fn: Callable[..., Any], cache_dir: str, via: str, dynamic: bool | None = True
) -> Callable[..., Any]:
    """``fn`` compiled with symbolic sizes through ``tsr.compile`` (``tsr``: C++ kernels;
    ``triton-cpu``, ``triton-cuda``: Triton kernels) or Dynamo (``dynamic``:
    ``torch.compile``'s)."""
    if via.startswith("triton"):
        options = CompileOptions(cache_dir=cache_dir)
        return tsr.compile(fn, dynamic=True, codegen="triton", options=options)
    if via == "dynamo":
        return torch.compile(
            fn, backend="torchstrata", dynamic=dynamic, options={"cache_dir": cache_dir}
        )
    return tsr.compile(fn, dynamic=True, codegen="cpp", options=CompileOptions(cache_dir=cache_dir))


def views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Views of the input (``view``, a slice its sizes decide), a computed output and a
    view of it, and the input itself."""
    t = x.shape[1] // 2
    y = torch.tanh(x) * 2.0
    return x.view(-1), x[:, :t], y, y.transpose(0, 1), x


def _aliasing(outputs: Sequence[Any], inputs: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Which input or output each output is, is a view of (``_base``), or shares memory
    with; its strides and offset."""
    values = [*inputs, *outputs]

    def position(tensor: Any) -> int | None:
        return next((i for i, value in enumerate(values) if value is tensor), None)

    def shares(tensor: torch.Tensor) -> tuple[int, ...]:
        pointer = tensor.untyped_storage().data_ptr()
        return tuple(
            i for i, value in enumerate(values) if value.untyped_storage().data_ptr() == pointer
        )

    return [
        (position(o), position(o._base), shares(o), o.stride(), o.storage_offset()) for o in outputs
    ]


def _device(via: str) -> str:
    return "cuda" if via == "triton-cuda" else "cpu"


def run_views(cache_dir: str, sizes: Sequence[int], via: str) -> None:
    """:func:`views` at ``(3, size)`` under ``no_grad``: values and aliasing as eager's."""
    compiled = _compiled(views, cache_dir, via)
    with torch.no_grad():
        for size in sizes:
            x = torch.randn(3, size, device=_device(via))
            got, expected = compiled(x), views(x)
            assert _aliasing(got, (x,)) == _aliasing(expected, (x,))
            for a, b in zip(got, expected, strict=True):
                torch.testing.assert_close(a, b)
            x.add_(1.0)  # the views see a write into their input
            for a, b in zip(got[:2], expected[:2], strict=True):
                torch.testing.assert_close(a, b)


class Stats(nn.Module):
    """Linear, batch norm (running statistics written in training), a buffer updated
    with ``add_`` and rows of a cache written where the sizes say (as a KV cache is),
    a loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm = nn.Linear(8, 16), nn.BatchNorm1d(16)
        self.register_buffer("seen", torch.zeros(16))
        self.register_buffer("memory", torch.zeros(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(self.fc(x))
        self.seen.add_(x.shape[0])
        self.memory[: x.shape[0]] = hidden.detach()
        return torch.relu(hidden).square().mean()


def run_stats(cache_dir: str, sizes: Sequence[int], via: str) -> None:
    """Training steps of :class:`Stats` at ``sizes`` rows: the loss, every gradient and
    every buffer it writes as eager's. Through Dynamo ``dynamic=None``: the first size
    is a static graph (under ``dynamic=True`` the batch norm's ``momentum`` reaches the
    backend as a symbolic float, which it does not import)."""
    torch.manual_seed(0)
    model, eager = Stats().to(_device(via)), Stats().to(_device(via))
    eager.load_state_dict(model.state_dict())
    compiled = _compiled(model, cache_dir, via, dynamic=None)
    for rows in sizes:
        x = torch.randn(rows, 8, device=_device(via))
        loss, expected = compiled(x), eager(x)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
            p.grad = q.grad = None
        for a, b in zip(model.buffers(), eager.buffers(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


class Projected(nn.Module):
    """A linear layer's output, views of it, and a slice of the input, in training."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.fc(x)
        t = x.shape[0] // 2
        return hidden, hidden.transpose(0, 1), hidden[:t], x[:t]


def run_projected(cache_dir: str, sizes: Sequence[int], via: str) -> None:
    """Training steps of :class:`Projected` at ``sizes`` rows: outputs, their aliasing,
    and the gradients of the input and the parameters as eager's."""
    torch.manual_seed(0)
    model, eager = Projected(), Projected()
    eager.load_state_dict(model.state_dict())
    compiled = _compiled(model, cache_dir, via)
    for rows in sizes:
        x = torch.randn(rows, 8, requires_grad=True)
        same = x.detach().clone().requires_grad_()
        got, expected = compiled(x), eager(same)
        assert _aliasing(got, (x,)) == _aliasing(expected, (same,))
        assert [o.requires_grad for o in got] == [o.requires_grad for o in expected]
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b)
        sum(o.square().sum() for o in got).backward()
        sum(o.square().sum() for o in expected).backward()
        torch.testing.assert_close(x.grad, same.grad)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None


class Mixed(nn.Module):
    """Linear, ReLU, linear: run under CPU autocast to bfloat16."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) * 0.5


def run_autocast(
    cache_dir: str, sizes: Sequence[int], via: str, dtype: str = "bfloat16", train: bool = True
) -> None:
    """:class:`Mixed` under CPU autocast to ``dtype`` at ``sizes`` rows: the output (its
    dtype too) and, where ``train``, the gradients as eager's."""
    torch.manual_seed(0)
    model, eager = Mixed(), Mixed()
    eager.load_state_dict(model.state_dict())
    compiled = _compiled(model, cache_dir, via)
    for rows in sizes:
        x = torch.randn(rows, 8)
        with torch.set_grad_enabled(train), torch.autocast("cpu", dtype=getattr(torch, dtype)):
            out, expected = compiled(x), eager(x)
        assert out.dtype == expected.dtype
        torch.testing.assert_close(out, expected)
        if train:
            out.float().sum().backward()
            expected.float().sum().backward()
            for p, q in zip(model.parameters(), eager.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-2)
                p.grad = q.grad = None


PROGRAMS = {
    "views": run_views,
    "projected": run_projected,
    "stats": run_stats,
    "autocast": run_autocast,
}

WARM = """
import importlib.util, json, sys, warnings
import torchstrata.runtime as tsr
from torchstrata.core.artifacts import CacheWarning

spec = importlib.util.spec_from_file_location("programs", sys.argv[2])
programs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(programs)

warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
warnings.simplefilter("error", CacheWarning)
name, via = sys.argv[3], sys.argv[5]
sizes = [int(size) for size in sys.argv[4].split(",")]
programs.PROGRAMS[name](sys.argv[1], sizes, via)
stats = tsr.graph_cache_stats()
print(json.dumps({"sizes": tsr.size_lowering_stats(), "misses": stats.misses,
                  "stores": stats.stores, "rebuilt": stats.rebuilt}))
"""


def _warm(cache_dir: Path, name: str, sizes: Sequence[int], via: str) -> dict[str, Any]:
    """Run ``name`` at ``sizes`` in a fresh process on ``cache_dir``: what it counted."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            WARM,
            str(cache_dir),
            __file__,
            name,
            ",".join(map(str, sizes)),
            via,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **_interpreted(via)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _interpreted(via: str) -> dict[str, str]:
    """Triton's interpreter for Triton kernels of CPU tensors."""
    return {"TRITON_INTERPRET": "1"} if via == "triton-cpu" else {}


def _served_from_the_cache(warm: dict[str, Any], new_sizes: int) -> None:
    sizes = warm["sizes"]
    assert set(sizes) <= {"cached", "reused"} and sizes.get("cached", 0) >= 1, sizes
    assert sizes["cached"] + sizes.get("reused", 0) == new_sizes, sizes
    assert (warm["misses"], warm["stores"], warm["rebuilt"]) == (0, 0, 0), warm


def _symbolic_entries(cache_dir: Path) -> list[Path]:
    paths = sorted((cache_dir / LAYOUT / "graphs").glob("*/*.json"))
    return [path for path in paths if json.loads(path.read_bytes())["entry"][1] == "symbolic"]


def _variant(cache_dir: Path) -> dict[str, Any]:
    """The one stored lowering of the one symbolic entry."""
    (entry,) = _symbolic_entries(cache_dir)
    (variant,) = json.loads(entry.read_bytes())["variants"]
    result: dict[str, Any] = variant
    return result


@pytest.fixture(params=["tsr", "dynamo"])
def via(request: pytest.FixtureRequest) -> Iterator[str]:
    """``tsr.compile(dynamic=True)`` or ``torch.compile(backend="torchstrata")``."""
    torch.compiler.reset()
    yield request.param
    torch.compiler.reset()


def test_output_views_and_aliases_are_stored_and_served(tmp_path: Path, via: str) -> None:
    """Outputs that view the input, the input itself, and a view of another output:
    rebuilt in a fresh process at new sizes as eager's views (decision 0505)."""
    run_views(str(tmp_path), (6, 8), via)
    assert tsr.size_lowering_stats().get("symbolic", 0) == 1
    assert _variant(tmp_path)["outputs"] is not None
    _served_from_the_cache(_warm(tmp_path, "views", (10, 13, 20), via), 3)


def test_a_training_runners_output_views_are_stored_and_served(tmp_path: Path, via: str) -> None:
    """A training step's outputs that view another output or the input (which requires
    grad): rebuilt from the cache as eager's views, gradients through them as eager's."""
    run_projected(str(tmp_path), (5, 6, 7), via)
    assert tsr.size_lowering_stats().get("symbolic", 0) == 1
    variant = _variant(tmp_path)
    assert variant["backward"] is not None and variant["outputs"] is not None
    _served_from_the_cache(_warm(tmp_path, "projected", (4, 9, 11), via), 3)


def test_a_training_runners_write_backs_are_stored_and_served(tmp_path: Path, via: str) -> None:
    """A batch norm's running statistics and a buffer's ``add_`` written by a training
    step read from the cache at new sizes (decision 0505)."""
    # cold: one lowering below 8 rows and one from 8 (the C++ row loop's condition)
    run_stats(str(tmp_path), (5, 6, 9, 10), via)
    assert tsr.size_lowering_stats().get("symbolic", 0) >= 1
    (entry,) = _symbolic_entries(tmp_path)
    for variant in json.loads(entry.read_bytes())["variants"]:
        assert variant["backward"] is not None and variant["aot"]["mutated_inputs"]
    if via == "tsr":
        _served_from_the_cache(_warm(tmp_path, "stats", (3, 7, 11, 12), via), 4)
    else:  # 5: Dynamo's static graph, its entries read; 7, 11 and 12 from the lowerings
        _served_from_the_cache(_warm(tmp_path, "stats", (5, 7, 11, 12), via), 3)


@pytest.mark.parametrize(
    "via",
    [
        pytest.param("triton-cpu", marks=pytest.mark.triton),
        pytest.param(
            "triton-cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
            ],
        ),
    ],
)
def test_triton_lowerings_with_views_and_write_backs_serve_new_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """The recipes do not depend on the codegen: Triton kernels (the interpreter on CPU
    tensors, compiled on a GPU) of a runner with output views and of a training step
    with write-backs, read back in a fresh process."""
    if via == "triton-cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    views_cache, stats_cache = tmp_path / "views", tmp_path / "stats"
    run_views(str(views_cache), (6, 8), via)
    run_stats(str(stats_cache), (5, 6), via)
    assert tsr.size_lowering_stats().get("symbolic", 0) >= 2
    _served_from_the_cache(_warm(views_cache, "views", (10, 13), via), 2)
    _served_from_the_cache(_warm(stats_cache, "stats", (7, 8), via), 2)  # 4 < rows <= 8


def test_a_lowering_under_autocast_is_stored_and_served(tmp_path: Path) -> None:
    """A training graph captured under CPU autocast (the casts in the graph) runs with
    autocast off, read from the cache as lowered (decision 0505)."""
    run_autocast(str(tmp_path), (5, 6), "tsr")
    assert tsr.size_lowering_stats().get("symbolic", 0) == 1
    assert _variant(tmp_path)["autocast"] == ["cpu"]
    _served_from_the_cache(_warm(tmp_path, "autocast", (3, 7, 11), "tsr"), 3)


def _counts_of(run: Callable[[], None]) -> dict[str, int]:
    tsr.reset()
    tsr.reset_size_lowering_stats()
    run()
    return tsr.size_lowering_stats()


def test_another_autocast_state_is_another_entry(tmp_path: Path) -> None:
    """A lowering stored under bfloat16 autocast serves no call under float16 autocast
    or without autocast (the key holds the state), and a stored record of another state
    is a bad entry."""
    cache = str(tmp_path)
    run_autocast(cache, (5, 6), "tsr", train=False)
    assert _counts_of(lambda: run_autocast(cache, (4,), "tsr", train=False)) == {"cached": 1}
    half = _counts_of(lambda: run_autocast(cache, (4,), "tsr", dtype="float16", train=False))
    assert half == {"symbolic": 1}
    assert len(_symbolic_entries(tmp_path)) == 2

    def plain() -> None:
        compiled = _compiled(Mixed(), cache, "tsr")
        with torch.no_grad():
            x = torch.randn(4, 8)
            assert compiled(x).dtype == torch.float32

    assert _counts_of(plain) == {"symbolic": 1}
    assert len(_symbolic_entries(tmp_path)) == 3


def split_at(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A view of the input up to an int argument (a symbol of the lowering, decision
    0330), and values computed from the rest."""
    return x[:, :n], torch.tanh(x[:, n:]) * 2.0


def test_a_view_bounded_by_an_int_argument_is_stored_and_served(tmp_path: Path) -> None:
    """A stored view bounded by an int argument is rebuilt at each call's value (the
    in-memory state cleared)."""

    def run(calls: Sequence[tuple[int, int]]) -> None:
        compiled = _compiled(split_at, str(tmp_path), "tsr")
        with torch.no_grad():
            for size, n in calls:
                x = torch.randn(3, size)
                got, expected = compiled(x, n), split_at(x, n)
                assert _aliasing(got, (x,)) == _aliasing(expected, (x,))
                for a, b in zip(got, expected, strict=True):
                    torch.testing.assert_close(a, b)

    run([(8, 3), (10, 4)])
    assert _variant(tmp_path)["outputs"] is not None
    assert _counts_of(lambda: run([(9, 2), (14, 6)])) == {"cached": 1, "reused": 1}


def _damaged(tmp_path: Path, damage: Callable[[dict[str, Any]], Any]) -> None:
    """The one symbolic entry with its one lowering changed by ``damage``, rewritten
    with a valid hash (only decoding it can tell)."""
    (entry,) = _symbolic_entries(tmp_path)
    document = json.loads(entry.read_bytes())
    damage(document["variants"][0])
    store = open_store(CacheSettings.resolve(str(tmp_path)))
    store.put("graphs", entry.stem, ".json", json.dumps(document).encode())


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda variant: variant.update(outputs=None), id="no-layouts"),
        pytest.param(lambda variant: variant["outputs"]["owners"].clear(), id="no-owner"),
        pytest.param(
            lambda variant: variant["outputs"]["aliases"][1][2].reverse(), id="other-view"
        ),
        pytest.param(lambda variant: variant.update(autocast=["cpu"]), id="other-autocast"),
        pytest.param(lambda variant: variant.pop("outputs"), id="no-outputs-field"),
    ],
)
def test_a_damaged_recipe_is_removed_and_lowered_again(
    tmp_path: Path, damage: Callable[[dict[str, Any]], Any]
) -> None:
    """A stored lowering whose view layouts or autocast state are not what its
    partition and key say is removed with a warning; the size is lowered again and
    stored in its place."""
    run_views(str(tmp_path), (6, 8), "tsr")
    _damaged(tmp_path, damage)
    before = tsr.graph_cache_stats()
    with pytest.warns(CacheWarning, match="bad cache entry"):
        counts = _counts_of(lambda: run_views(str(tmp_path), (10,), "tsr"))
    assert counts == {"symbolic": 1}
    assert tsr.graph_cache_stats().rebuilt == before.rebuilt + 1
    assert _counts_of(lambda: run_views(str(tmp_path), (12,), "tsr")) == {"cached": 1}


def test_a_stored_training_write_back_out_of_range_is_a_bad_entry(tmp_path: Path) -> None:
    """A training lowering that would write an input the graph does not have is removed."""
    run_stats(str(tmp_path), (5, 6), "tsr")
    _damaged(tmp_path, lambda variant: variant["aot"]["mutated_inputs"].append(99))
    with pytest.warns(CacheWarning, match="bad cache entry"):
        counts = _counts_of(lambda: run_stats(str(tmp_path), (4,), "tsr"))
    assert counts == {"symbolic": 1}
