"""The Dynamo backend's lowerings for many sizes in the compiled-graph cache (decision 0497).

``torch.compile(fn, backend="torchstrata")`` lowers a graph that Dynamo hands over with
symbolic sizes once for many sizes (decision 0455); that lowering is stored as the
runtime's own symbolic entries' are (decision 0450). The cold compile runs in this
process; the warm one in a fresh process with the same cache directory, at sizes the cold
one never saw: it lowers nothing (``size_lowering_stats()``: ``cached`` and ``reused``
only) and computes what eager does (outputs, the inputs it writes, gradients). The other
tests check that an entry never serves another program, dtype, option or torch version,
and that a damaged entry is lowered again with a warning. Dynamo is the harness here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchstrata.runtime as tsr
from torchstrata.core.artifacts import LAYOUT, CacheSettings, CacheWarning, open_store
from torchstrata.runtime import graph_cache_key

pytestmark = [
    pytest.mark.graph_cache,
    pytest.mark.usefixtures("dynamo_reset_no_fallback", "size_counts_no_fallback"),
]


def decode_step(k_cache, v_cache, q, k, v):
    """One decode step: append this token's key and value, attend with its query."""
    keys = torch.cat([k_cache, k], dim=1)
    values = torch.cat([v_cache, v], dim=1)
    # a constant scale (``math.sqrt`` of the head width, which ``dynamic=True`` makes
    # symbolic too, is ``scaled_scores``' float of a size: decision 0500)
    weights = torch.softmax(q @ keys.transpose(1, 2) * 0.25, -1)
    return weights @ values, keys, values


def decode_tanh(k_cache, v_cache, q, k, v):
    """Another program of the same inputs (tanh for softmax)."""
    keys = torch.cat([k_cache, k], dim=1)
    values = torch.cat([v_cache, v], dim=1)
    return torch.tanh(q @ keys.transpose(1, 2)) @ values, keys, values


def decode_args(length: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Caches of ``length`` tokens of width 8 (no length below 9 is used: Dynamo would
    give a length equal to the width one symbol, another graph)."""
    caches = [torch.randn(2, length, 8, dtype=dtype) for _ in range(2)]
    return (*caches, *(torch.randn(2, 1, 8, dtype=dtype) for _ in range(3)))


def kv_cache_slice_write(cache, k):
    """A cache written where the sizes say (a write-back into an input)."""
    t = k.shape[1]
    cache[:, t : 2 * t] = k
    return cache.sum(1)


def kv_args(length: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    return torch.randn(2, 80, 4, dtype=dtype), torch.randn(2, length, 4, dtype=dtype)


def scaled_scores(q, k):
    """Attention scores scaled by the square root of the width: a float of a size,
    computed by the stored kernels from the size symbols (decision 0500)."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.layer_norm(s.softmax(-1), (s.shape[-1],), eps=1e-5)


def scaled_args(length: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Queries and keys of ``length`` tokens and a width that changes with it."""
    return tuple(torch.randn(2, length, 2 * length, dtype=dtype) for _ in range(2))


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[int, torch.dtype], tuple[Any, ...]]]] = {
    "decode": (decode_step, decode_args),
    "decode_tanh": (decode_tanh, decode_args),
    "kv_write": (kv_cache_slice_write, kv_args),
    "scaled_scores": (scaled_scores, scaled_args),
}


def inference(
    cache_dir: str,
    name: str,
    sizes: Sequence[int],
    dynamic: bool | None = True,
    dtype: str = "float32",
    device: str = "cpu",
    **options: Any,
) -> None:
    """Program ``name`` through ``torch.compile(backend="torchstrata")`` at each of
    ``sizes`` on ``device``: its outputs and the inputs it writes checked against eager's."""
    torch.manual_seed(0)
    fn, make_args = PROGRAMS[name]
    compiled = torch.compile(
        fn, backend="torchstrata", dynamic=dynamic, options={"cache_dir": cache_dir, **options}
    )
    with torch.no_grad():
        for size in sizes:
            args = tuple(arg.to(device) for arg in make_args(size, getattr(torch, dtype)))
            eager_args = tuple(arg.clone() for arg in args)
            torch.testing.assert_close(compiled(*args), fn(*eager_args))
            torch.testing.assert_close(args, eager_args)  # what it wrote


class Block(nn.Module):
    """Linear, LayerNorm, GELU, linear: a training graph through Dynamo."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.norm(self.fc1(x))))


def training(cache_dir: str, sizes: Sequence[int]) -> None:
    """Training steps of :class:`Block` through Dynamo at each of ``sizes`` (rows): the
    output and every gradient checked against eager's. ``dynamic=None``: the first size
    is a static graph (under ``dynamic=True`` LayerNorm's ``eps`` is a symbolic float,
    which the backend does not import)."""
    torch.manual_seed(0)
    model, eager = Block(), Block()
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="torchstrata", options={"cache_dir": cache_dir})
    for rows in sizes:
        x = torch.randn(rows, 16)
        out, expected = compiled(x), eager(x)
        out.square().mean().backward()
        expected.square().mean().backward()
        torch.testing.assert_close(out, expected)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
            p.grad = q.grad = None


WARM = """
import importlib.util, json, sys, warnings
import torch
import torchstrata.runtime as tsr
from torchstrata.core.artifacts import CacheWarning

spec = importlib.util.spec_from_file_location("programs", sys.argv[2])
programs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(programs)

warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
warnings.simplefilter("error", CacheWarning)
name, sizes = sys.argv[3], [int(size) for size in sys.argv[4].split(",")]
if name == "training":
    programs.training(sys.argv[1], sizes)
else:
    programs.inference(sys.argv[1], name, sizes, **json.loads(sys.argv[5]))
stats = tsr.graph_cache_stats()
print(json.dumps({"sizes": tsr.size_lowering_stats(), "hits": stats.hits,
                  "misses": stats.misses, "stores": stats.stores, "rebuilt": stats.rebuilt}))
"""


def _warm(cache_dir: Path, name: str, sizes: Sequence[int], **options: Any) -> dict[str, Any]:
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
            json.dumps(options),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **_interpreted(options)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _interpreted(options: dict[str, Any]) -> dict[str, str]:
    """Triton's interpreter for Triton kernels of CPU tensors."""
    cpu = options.get("device", "cpu") == "cpu"
    return {"TRITON_INTERPRET": "1"} if options.get("codegen") == "triton" and cpu else {}


def _served_from_the_cache(warm: dict[str, Any], new_sizes: int) -> None:
    sizes = warm["sizes"]
    assert set(sizes) <= {"cached", "reused"} and sizes.get("cached", 0) >= 1, sizes
    assert sizes["cached"] + sizes.get("reused", 0) == new_sizes, sizes
    assert (warm["misses"], warm["stores"], warm["rebuilt"]) == (0, 0, 0), warm


def test_a_fresh_process_serves_new_lengths_of_a_decode_step_without_lowering(
    tmp_path: Path,
) -> None:
    inference(str(tmp_path), "decode", (16, 17, 18))
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 2}
    _served_from_the_cache(_warm(tmp_path, "decode", (21, 30, 23)), 3)


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
def test_triton_kernels_of_a_dynamo_graph_serve_new_lengths_in_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """Triton kernels of the Dynamo graph's lowering for many sizes, stored with their
    sizes as expressions (decision 0451; the interpreter on CPU tensors)."""
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    options = {"codegen": "triton", "device": device}
    # lengths none of which is a multiple of 16: on a GPU, Triton specialises an aligned
    # size argument, which is a lowering of its own (decision 0400)
    inference(str(tmp_path), "decode", (17, 18), **options)
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 1}
    _served_from_the_cache(_warm(tmp_path, "decode", (20, 25), **options), 2)


def test_automatic_dynamic_reads_the_lowering_at_the_second_length_of_a_fresh_process(
    tmp_path: Path,
) -> None:
    """``dynamic=None``: Dynamo's first length is a static graph (its ``aot`` and
    ``lowered`` entries hit at the same length), its second the graph with symbolic
    sizes, whose lowering is read (the cold process lowered it at other lengths)."""
    inference(str(tmp_path), "decode", (16, 17, 18), dynamic=None)
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 1}
    warm = _warm(tmp_path, "decode", (16, 25, 31), dynamic=None)
    assert warm["hits"] >= 2, warm  # the static graph's entries, and the symbolic one
    _served_from_the_cache(warm, 2)


def test_a_fresh_process_serves_new_sizes_of_a_write_into_an_input(tmp_path: Path) -> None:
    """An inference forward's write-backs are part of its stored recipe: the cache
    written at each new size as eager writes it."""
    inference(str(tmp_path), "kv_write", (5, 6, 9))
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 2}
    (entry,) = _symbolic_entries(tmp_path)
    (variant,) = json.loads(entry.read_bytes())["variants"]
    assert variant["aot"]["mutated_inputs"], variant["aot"]  # the cache, written back
    _served_from_the_cache(_warm(tmp_path, "kv_write", (7, 11, 3)), 3)


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_a_fresh_process_serves_a_scale_computed_from_the_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codegen: str
) -> None:
    """A float of the sizes (``1 / math.sqrt(width)``) in the stored lowering's kernels:
    computed from the size symbols at each call, so new widths are served (0500)."""
    if codegen == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    inference(str(tmp_path), "scaled_scores", (9, 10, 11), codegen=codegen)
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 2}
    _served_from_the_cache(_warm(tmp_path, "scaled_scores", (12, 14, 13), codegen=codegen), 3)


def test_a_fresh_process_serves_new_sizes_of_a_training_block_without_lowering(
    tmp_path: Path,
) -> None:
    training(str(tmp_path), (5, 6, 9))
    assert tsr.size_lowering_stats().get("symbolic", 0) >= 1
    # 5: Dynamo's static graph, its entries read; 7 and 11 from the stored lowering
    _served_from_the_cache(_warm(tmp_path, "training", (5, 7, 11)), 2)


def _counts_of(run: Callable[[], None]) -> dict[str, int]:
    torch.compiler.reset()
    tsr.reset_size_lowering_stats()
    run()
    return tsr.size_lowering_stats()


def test_another_program_dtype_option_or_torch_version_is_another_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path)
    inference(cache, "decode", (16, 17))
    assert _counts_of(lambda: inference(cache, "decode", (20,))) == {"cached": 1}

    def lowered(run: Callable[[], None]) -> None:
        assert _counts_of(run) == {"symbolic": 1}

    lowered(lambda: inference(cache, "decode_tanh", (20,)))
    lowered(lambda: inference(cache, "decode", (20,), dtype="float64"))
    lowered(lambda: inference(cache, "decode", (20,), codegen="cpp"))
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    monkeypatch.setattr(graph_cache_key, "_IDENTITIES", {})
    lowered(lambda: inference(cache, "decode", (20,)))


def _symbolic_entries(cache_dir: Path) -> list[Path]:
    paths = sorted((cache_dir / LAYOUT / "graphs").glob("*/*.json"))
    return [path for path in paths if json.loads(path.read_bytes())["entry"][1] == "symbolic"]


def test_a_corrupted_entry_is_removed_and_lowered_again(tmp_path: Path) -> None:
    inference(str(tmp_path), "decode", (16, 17))
    (entry,) = _symbolic_entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x20
    entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="bad cache entry"):
        counts = _counts_of(lambda: inference(str(tmp_path), "decode", (20,)))
    assert counts == {"symbolic": 1}
    assert _counts_of(lambda: inference(str(tmp_path), "decode", (22,))) == {"cached": 1}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda variant: variant.pop("forward"), id="no-forward"),
        pytest.param(lambda variant: variant["aot"].update(mutated_inputs=[9]), id="bad-writes"),
    ],
)
def test_a_mismatched_entry_falls_back_with_a_warning(
    tmp_path: Path, damage: Callable[[dict[str, Any]], Any]
) -> None:
    """An entry that passes the store's hash check but does not make a lowering for
    this graph (a part missing, a write into an input the graph does not have) is
    removed with a warning; the size is lowered again, its result eager's."""
    inference(str(tmp_path), "kv_write", (5, 6))
    (entry,) = _symbolic_entries(tmp_path)
    document = json.loads(entry.read_bytes())
    damage(document["variants"][0])
    store = open_store(CacheSettings.resolve(str(tmp_path)))
    store.put("graphs", entry.stem, ".json", json.dumps(document).encode())
    before = tsr.graph_cache_stats()
    with pytest.warns(CacheWarning, match="bad cache entry"):
        counts = _counts_of(lambda: inference(str(tmp_path), "kv_write", (7,)))
    assert counts == {"symbolic": 1}
    assert tsr.graph_cache_stats().rebuilt == before.rebuilt + 1
    assert _counts_of(lambda: inference(str(tmp_path), "kv_write", (3,))) == {"cached": 1}
