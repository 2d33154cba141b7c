"""Lowerings made once for many sizes in the compiled-graph cache (decision 0450).

The cold compile runs in this process; the warm one in a fresh process with the same
cache directory, at sizes the cold one never saw: it lowers nothing
(``size_lowering_stats()``: ``cached`` and ``reused`` only) and computes what eager does.
The other tests check that an entry never serves what it was not made for (another
program, dtype, option, grad mode, torch version, or sizes outside its conditions) and
that a damaged entry is rebuilt with a warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions, InductorOptions
from torchstrata.core.artifacts import LAYOUT, CacheSettings, CacheWarning, open_store
from torchstrata.runtime import graph_cache_key

pytestmark = [pytest.mark.graph_cache, pytest.mark.usefixtures("size_counts_no_fallback")]


def scaled_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 2.0, -1) + 1.0


def scaled_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * 2.0) + 1.0


class Net(nn.Module):
    """Linear, LayerNorm, GELU, linear, cross-entropy (``forward(x, target)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.norm(self.fc1(x)))
        return torch.nn.functional.cross_entropy(self.fc2(hidden), target)


def inference(
    cache_dir: str,
    rows: Sequence[int],
    fn: Callable[..., Any] = scaled_softmax,
    device: str = "cpu",
    **options: Any,
) -> None:
    """``fn`` compiled with symbolic sizes under ``no_grad`` and called at each of
    ``rows`` (by 33 columns) on ``device``, checked against eager."""
    torch.manual_seed(0)
    compiled = tsr.compile(fn, dynamic=True, options=CompileOptions(cache_dir=cache_dir, **options))
    with torch.no_grad():
        for count in rows:
            x = torch.randn(count, 33, device=device)
            torch.testing.assert_close(compiled(x), fn(x))


def training(cache_dir: str, rows: Sequence[int]) -> None:
    """Training steps of :class:`Net` with symbolic sizes, at each of ``rows``: the loss
    and every gradient checked against eager's."""
    torch.manual_seed(0)
    model, eager = Net(), Net()
    eager.load_state_dict(model.state_dict())
    compiled = tsr.compile(model, dynamic=True, options=CompileOptions(cache_dir=cache_dir))
    for count in rows:
        x, target = torch.randn(count, 32), torch.randint(0, 10, (count,))
        loss, eager_loss = compiled(x, target), eager(x, target)
        loss.backward()
        eager_loss.backward()
        torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


WARM = """
import importlib.util, json, sys, warnings
import torchstrata.runtime as tsr

spec = importlib.util.spec_from_file_location("programs", sys.argv[2])
programs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(programs)

warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
kind, options = sys.argv[3], json.loads(sys.argv[5])
rows = [int(count) for count in sys.argv[4].split(",")]
if kind == "training":
    programs.training(sys.argv[1], rows)
else:
    programs.inference(sys.argv[1], rows, **options)
stats = tsr.graph_cache_stats()
print(json.dumps({"sizes": tsr.size_lowering_stats(), "misses": stats.misses,
                  "stores": stats.stores, "rebuilt": stats.rebuilt}))
"""


def _warm(cache_dir: Path, kind: str, rows: Sequence[int], **options: Any) -> dict[str, Any]:
    """Run ``kind`` at ``rows`` in a fresh process on ``cache_dir``: what it counted."""
    env = {**os.environ, "TRITON_INTERPRET": "1"} if options.get("device") == "cpu" else None
    done = subprocess.run(
        [sys.executable, "-c", WARM, str(cache_dir), __file__, kind, *_arguments(rows, options)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _arguments(rows: Sequence[int], options: dict[str, Any]) -> list[str]:
    return [",".join(map(str, rows)), json.dumps(options)]


def _served_from_the_cache(warm: dict[str, Any], new_sizes: int) -> None:
    sizes = warm["sizes"]
    assert set(sizes) == {"cached", "reused"}, sizes  # nothing lowered, nothing failed
    assert sizes["cached"] + sizes["reused"] == new_sizes, sizes
    assert (warm["misses"], warm["stores"], warm["rebuilt"]) == (0, 0, 0), warm


#: cold: one lowering below 8 rows and one from 8 (the C++ column loop's condition);
#: warm: sizes never seen, on both sides
COLD_ROWS, WARM_ROWS = (5, 6, 9, 10), (3, 7, 11, 12)


def test_a_fresh_process_serves_new_sizes_of_an_inference_forward_without_lowering(
    tmp_path: Path,
) -> None:
    inference(str(tmp_path), COLD_ROWS, codegen="cpp")
    assert tsr.size_lowering_stats().get("symbolic", 0) >= 1
    _served_from_the_cache(_warm(tmp_path, "inference", WARM_ROWS, codegen="cpp"), 4)


def test_a_fresh_process_serves_new_sizes_of_a_training_step_without_lowering(
    tmp_path: Path,
) -> None:
    training(str(tmp_path), COLD_ROWS)
    assert tsr.size_lowering_stats().get("symbolic", 0) >= 1
    _served_from_the_cache(_warm(tmp_path, "training", WARM_ROWS), 4)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu", marks=pytest.mark.triton),
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
            ],
        ),
    ],
)
def test_triton_kernels_of_sizes_serve_new_sizes_in_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """The Triton kernels of a lowering for many sizes are stored with their sizes as
    expressions over the symbols (the interpreter on CPU tensors, compiled on a GPU,
    where each bucket of rows reads its tuned choice from the tuning cache)."""
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    options = {"codegen": "triton", "device": device}
    inference(str(tmp_path), (5, 6), **options)
    assert tsr.size_lowering_stats().get("symbolic", 0) == 1
    _served_from_the_cache(_warm(tmp_path, "inference", (3, 4, 7), **options), 3)


def _counts_of(run: Callable[[], None]) -> dict[str, int]:
    tsr.reset()
    tsr.reset_size_lowering_stats()
    run()
    return tsr.size_lowering_stats()


def test_sizes_outside_a_stored_lowerings_conditions_are_lowered_not_served(
    tmp_path: Path,
) -> None:
    inference(str(tmp_path), (5, 6), codegen="cpp")
    # 9 rows break the stored lowering's ``s0 < 8``: lowered (and stored) anew
    assert _counts_of(lambda: inference(str(tmp_path), (9,), codegen="cpp")) == {"symbolic": 1}
    assert _counts_of(lambda: inference(str(tmp_path), (10, 4), codegen="cpp")) == {"cached": 2}
    (entry,) = _symbolic_entries(tmp_path)
    variants = json.loads(entry.read_bytes())["variants"]
    assert [list(variant["hints"].values()) for variant in variants] == [[5, 33], [9, 33]]


def test_another_program_dtype_option_grad_mode_or_torch_version_is_another_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path)
    inference(cache, (5, 6), codegen="cpp")
    assert _counts_of(lambda: inference(cache, (4,), codegen="cpp")) == {"cached": 1}

    def lowered(run: Callable[[], None]) -> None:
        assert _counts_of(run) == {"symbolic": 1}

    lowered(lambda: inference(cache, (4,), fn=scaled_tanh, codegen="cpp"))
    tails_off = InductorOptions(tails=False)
    lowered(lambda: inference(cache, (4,), codegen="cpp", inductor=tails_off))

    def with_grad() -> None:
        compiled = tsr.compile(
            scaled_softmax, dynamic=True, codegen="cpp", options={"cache_dir": cache}
        )
        x = torch.randn(4, 33)
        torch.testing.assert_close(compiled(x), scaled_softmax(x))

    lowered(with_grad)
    float64 = CompileOptions(cache_dir=cache)

    def doubles() -> None:
        compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="cpp", options=float64)
        with torch.no_grad():
            x = torch.randn(4, 33, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), scaled_softmax(x))

    lowered(doubles)
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    monkeypatch.setattr(graph_cache_key, "_IDENTITIES", {})
    lowered(lambda: inference(cache, (4,), codegen="cpp"))


def _symbolic_entries(cache_dir: Path) -> list[Path]:
    paths = sorted((cache_dir / LAYOUT / "graphs").glob("*/*.json"))
    return [path for path in paths if json.loads(path.read_bytes())["entry"][1] == "symbolic"]


def test_a_corrupted_symbolic_entry_is_removed_and_lowered_again(tmp_path: Path) -> None:
    inference(str(tmp_path), (5, 6), codegen="cpp")
    (entry,) = _symbolic_entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x20
    entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="bad cache entry"):
        counts = _counts_of(lambda: inference(str(tmp_path), (4,), codegen="cpp"))
    assert counts == {"symbolic": 1}
    assert _counts_of(lambda: inference(str(tmp_path), (7,), codegen="cpp")) == {"cached": 1}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda variant: variant.pop("forward"), id="no-forward"),
        pytest.param(lambda variant: variant["forward"]["kernels"].clear(), id="no-kernels"),
        pytest.param(lambda variant: variant["conditions"].append("Lt(s77"), id="bad-condition"),
        pytest.param(lambda variant: variant["aot"].pop("forward"), id="no-aot-graph"),
    ],
)
def test_a_partial_symbolic_entry_falls_back_with_a_warning(
    tmp_path: Path, damage: Callable[[dict[str, Any]], Any]
) -> None:
    """An entry that passes the store's hash check but does not make a lowering (a part
    missing or unreadable) is removed with a warning; the sizes are lowered again."""
    training(str(tmp_path), (5, 6))
    (entry,) = _symbolic_entries(tmp_path)
    document = json.loads(entry.read_bytes())
    damage(document["variants"][0])
    store = open_store(CacheSettings.resolve(str(tmp_path)))
    store.put("graphs", entry.stem, ".json", json.dumps(document).encode())
    before = tsr.graph_cache_stats()
    with pytest.warns(CacheWarning, match="bad cache entry"):
        counts = _counts_of(lambda: training(str(tmp_path), (4,)))
    assert counts == {"symbolic": 1}
    assert tsr.graph_cache_stats().rebuilt == before.rebuilt + 1
    assert _counts_of(lambda: training(str(tmp_path), (7,))) == {"cached": 1}


def test_the_key_does_not_hold_the_sizes_the_graph_was_captured_at() -> None:
    """A graph captured at other sizes is the same entry (its lowerings serve the sizes
    that meet their conditions, wherever the capture was)."""
    from torchstrata.core import create_plugin_manager
    from torchstrata.core import parse as parse_graph
    from torchstrata.runtime.symbolic_cache import SymbolicEntries

    text = (
        "graph torch {{\n"
        "  symbol s0 = L['x'].size()[0], hint {hint}\n"
        "  %x: f32[s0, 3] = input\n"
        "  %y: f32[s0, 3] = torch.tanh(%x)\n"
        "  return %y\n"
        "}}\n"
    )
    manager = create_plugin_manager(load_entrypoints=False)
    options = CompileOptions()

    def key(graph_text: str, options: CompileOptions = options) -> str | None:
        return SymbolicEntries(parse_graph(graph_text), options, lambda: manager).key()

    assert key(text.format(hint=5)) == key(text.format(hint=17)) is not None
    assert key(text.format(hint=5).replace("f32", "f64")) != key(text.format(hint=5))
    assert key(text.format(hint=5), attrs.evolve(options, codegen="cpp")) != key(
        text.format(hint=5)
    )
    with_grad = key(text.format(hint=5))
    with torch.no_grad():
        assert key(text.format(hint=5)) != with_grad  # grad mode is in it


def test_the_stored_conditions_decide_which_sizes_an_entry_serves(tmp_path: Path) -> None:
    """A condition added to a stored lowering (rows < 5) is checked as stored: 6 rows,
    which its lowering would compute right, are lowered anew; 3 rows are served."""
    import sympy

    from torchstrata.runtime.symbolic_records import expression_text

    inference(str(tmp_path), (5, 6), codegen="cpp")
    (entry,) = _symbolic_entries(tmp_path)
    document = json.loads(entry.read_bytes())
    (variant,) = document["variants"]
    rows = next(name for name, hint in variant["hints"].items() if hint == 5)
    symbol = sympy.Symbol(rows, integer=True, positive=True)
    variant["conditions"].append(expression_text(sympy.Lt(symbol, 5)))
    store = open_store(CacheSettings.resolve(str(tmp_path)))
    store.put("graphs", entry.stem, ".json", json.dumps(document).encode())
    assert _counts_of(lambda: inference(str(tmp_path), (6,), codegen="cpp")) == {"symbolic": 1}
    assert _counts_of(lambda: inference(str(tmp_path), (3,), codegen="cpp")) == {"cached": 1}


def test_a_stored_forward_whose_outputs_carry_no_gradient_runs_with_grad_off(
    tmp_path: Path,
) -> None:
    """A graph of parameters whose outputs are detached lowers as an inference forward
    run with grad off (decision 0395); read from the cache, it still gives outputs that
    require no grad, as eager's."""
    torch.manual_seed(0)
    layer = nn.Linear(32, 8)

    def scores(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(layer(x), -1).detach()

    def run(rows: Sequence[int]) -> None:
        options = CompileOptions(cache_dir=str(tmp_path))
        compiled = tsr.compile(scores, dynamic=True, codegen="cpp", options=options)
        for count in rows:
            x = torch.randn(count, 32)
            got = compiled(x)
            assert not got.requires_grad
            torch.testing.assert_close(got, scores(x))

    run((5, 6))
    (entry,) = _symbolic_entries(tmp_path)
    assert [v["grad_off"] for v in json.loads(entry.read_bytes())["variants"]] == [True]
    counts = _counts_of(lambda: run((3, 7)))
    assert counts == {"cached": 1, "reused": 1}, counts


def write_slice(cache: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A cache written where the sizes say (a write-back into an input), then summed."""
    t = k.shape[1]
    cache[:, t : 2 * t] = k
    return cache.sum(1)


def test_an_inference_forwards_write_backs_are_stored_and_served(tmp_path: Path) -> None:
    """An inference forward that writes into an input is stored with the inputs it
    writes (decision 0497) and read back: each new size writes as eager does."""

    def run(rows: Sequence[int]) -> None:
        options = CompileOptions(cache_dir=str(tmp_path))
        compiled = tsr.compile(write_slice, dynamic=True, codegen="cpp", options=options)
        with torch.no_grad():
            for count in rows:
                cache, k = torch.randn(2, 80, 4), torch.randn(2, count, 4)
                expected_cache = cache.clone()
                torch.testing.assert_close(compiled(cache, k), write_slice(expected_cache, k))
                torch.testing.assert_close(cache, expected_cache)

    run((5, 6))
    (entry,) = _symbolic_entries(tmp_path)
    (variant,) = json.loads(entry.read_bytes())["variants"]
    assert variant["aot"]["mutated_inputs"] == [0]
    assert _counts_of(lambda: run((3, 7))) == {"cached": 1, "reused": 1}
