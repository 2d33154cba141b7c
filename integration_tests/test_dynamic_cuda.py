"""Symbolic entries for CUDA inputs (decision 0225), on a GPU: one capture and one size
guard, the graph lowered per size through the Triton backend, each call equal to eager
(training steps too);
Triton modules generated once over sizes whose rows ``(B, T)`` change; tuned launch
configurations kept per power-of-two bucket of rows; the size guard keeps devices apart;
``mode="reduce-overhead"`` records one CUDA graph per size.

Every test here needs a CUDA GPU (``gpu`` mark; skipped without one). Modules are
counted as the ``.py`` files of a fresh artifact store's ``triton`` namespace, tuned
configurations as the entries of its ``triton-tuning`` namespace.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt
from torchstrata.core import InductorOptions

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

#: (B, T) of a [B, T, 32] activation: B*T odd (no size's rows divisible by a block or by
#: 2, decisions that are in the source), B and T both changing.
BATCH_AND_LENGTH = ((3, 17), (3, 5), (5, 13), (3, 33), (5, 7), (7, 9), (3, 23), (9, 5), (3, 11))


def norm_attention_scores(x, w):
    h = F.layer_norm(x, (x.shape[-1],))
    return torch.softmax(h @ w, -1) + x.sum(-1, keepdim=True)


def softmax_scaled(x, w):
    return torch.softmax(x * 2 + 1, -1) * w


def _modules(store: Path) -> list[str]:
    # the generated modules only (namespace "triton"), not what Triton compiles from them
    return sorted(p.name for p in store.rglob("*.py") if "triton" in p.parts)


def _tuned(store: Path) -> list[str]:
    return sorted(p.name for p in store.rglob("*.json") if "triton-tuning" in p.parts)


def test_cuda_inputs_get_one_symbolic_entry_and_its_modules_once(tmp_path, caplog):
    compiled = rt.compile(norm_attention_scores, dynamic=True, options={"cache_dir": str(tmp_path)})
    w = torch.randn(32, 32, device="cuda")
    generated: list[str] = []
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        for batch, length in BATCH_AND_LENGTH:
            x = torch.randn(batch, length, 32, device="cuda")
            with torch.no_grad():
                got = compiled(x, w)
            want = norm_attention_scores(x, w)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            if not generated:
                generated = _modules(tmp_path)
                assert generated, "the first size generated no Triton module"
            else:
                assert _modules(tmp_path) == generated, f"a new module at {(batch, length)}"
    assert len(compiled.cache) == 1
    assert "with symbolic sizes" in caplog.text
    assert "static per shape" not in caplog.text


def test_a_cuda_training_entry_matches_eager_over_sizes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)).cuda()
    eager = copy.deepcopy(model)
    compiled = rt.compile(model, dynamic=True)
    for batch, length in BATCH_AND_LENGTH:
        x = torch.randn(batch, length, 32, device="cuda")
        results = []
        for fn, module in ((compiled, model), (eager, eager)):
            xs = x.clone().requires_grad_()
            out = fn(xs)
            out.square().mean().backward()
            results.append([out.detach(), xs.grad, *(p.grad.clone() for p in module.parameters())])
            module.zero_grad()
        for got, want in zip(*results, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(compiled.compiled_forward.cache) == 1  # one symbolic entry, forward and backward


def test_a_tuned_configuration_serves_its_bucket_of_row_counts(tmp_path):
    # every kernel tuned: these rows (17-63 of 256) are under the default tune_min_elements
    every = InductorOptions(tune_min_elements=0)
    options = {"cache_dir": str(tmp_path), "inductor": every}
    compiled = rt.compile(softmax_scaled, dynamic=True, options=options)
    w = torch.randn(256, device="cuda")
    tuned: dict[int, list[str]] = {}
    for rows in (17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 45, 63):
        x = torch.randn(rows, 256, device="cuda")
        torch.testing.assert_close(compiled(x, w), softmax_scaled(x, w), rtol=1e-4, atol=1e-4)
        tuned[rows] = _tuned(tmp_path)
    assert tuned[17], "no kernel was tuned"
    # 17-31: one bucket (32), timed once; 33-63: the next bucket, timed once more
    assert all(tuned[rows] == tuned[17] for rows in (19, 21, 23, 25, 27, 29, 31))
    assert len(tuned[33]) > len(tuned[17])
    assert all(tuned[rows] == tuned[33] for rows in (35, 45, 63))
    assert len(compiled.cache) == 1


def test_a_cuda_entry_never_serves_another_device():
    compiled = rt.compile(softmax_scaled, dynamic=True)
    devices = ["cuda:0", "cpu"] + (["cuda:1"] if torch.cuda.device_count() > 1 else [])
    for device in devices + devices:  # each device's entry again on the second pass
        w = torch.randn(64, device=device)
        for rows in (5, 6, 7):
            x = torch.randn(rows, 64, device=device)
            got = compiled(x, w)
            assert got.device == torch.device(device)
            torch.testing.assert_close(got, softmax_scaled(x, w), rtol=1e-5, atol=1e-5)
    assert len(compiled.cache) == len(devices)  # one symbolic entry per device


def _recordings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "recording a CUDA graph" in r.getMessage()]


def test_reduce_overhead_records_one_cuda_graph_per_size(caplog):
    compiled = rt.compile(softmax_scaled, dynamic=True, mode="reduce-overhead")
    w = torch.randn(64, device="cuda")
    sizes = (17, 5, 33, 8, 100, 3, 64, 9)
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"), torch.no_grad():
        for rows in sizes:
            earlier = None
            for _ in range(4):  # two warm-up calls, the recording, a replay
                x = torch.randn(rows, 64, device="cuda")
                got = compiled(x, w)
                torch.testing.assert_close(got, softmax_scaled(x, w), rtol=1e-5, atol=1e-5)
                if earlier is not None:  # a replay's result is not overwritten by the next
                    torch.testing.assert_close(earlier[0], softmax_scaled(earlier[1], w))
                earlier = (got, x)
            assert len(_recordings(caplog)) == sizes.index(rows) + 1, f"at {rows} rows"
        assert f"[{sizes[-1]}, 64]" in _recordings(caplog)[-1]  # names the sizes
        for rows in sizes:  # every size replays its own graph
            x = torch.randn(rows, 64, device="cuda")
            torch.testing.assert_close(compiled(x, w), softmax_scaled(x, w), rtol=1e-5, atol=1e-5)
    assert len(_recordings(caplog)) == len(sizes)
    assert len(compiled.cache) == 1
