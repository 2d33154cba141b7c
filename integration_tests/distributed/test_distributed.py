"""Compiled models under DDP and FSDP2, gloo processes on the CPU: trained for 10 steps
eagerly and compiled, the parameters compared after every step.

World sizes: the plain transformer under DDP and under FSDP2 runs with 2 and with 4
processes (4: a 4-way all-reduce and reduce-scatter, a quarter of each parameter per
rank); the variants (unused parameters with ``no_sync()`` accumulation, a parameter read
through ``detach()`` only, mixed precision, activation checkpointing) run with 2 only,
each world size in one spawn. FSDP2 shards over an explicit CPU mesh (its default mesh is
on the accelerator when there is one). The 4-process spawn is marked slow: on CI's 2
cores its four processes each import torch and torchstrata and compile their own graphs,
about 45 CPU-seconds (the 2-process spawn of all eight scenarios: about 45; 50 s wall
with the machine's load at 4).

Tolerances: float32 runs must match eager to 1e-5 (absolute and relative): the compiled
kernels reassociate sums (layer norm, softmax, matmul epilogues), about 1e-7 per step
here. bfloat16 parameters (``MixedPrecisionPolicy``) compute in bfloat16, whose unit
of rounding is 2**-8: 2e-3 absolute after 10 steps of SGD.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

import pytest
import torch
import torch.multiprocessing as mp
from filelock import FileLock

from .workers import SCENARIOS, run_all

#: The scenarios each world size runs (see the module docstring).
WORLDS = {2: list(SCENARIOS), 4: ["ddp", "fsdp"]}
FLOAT32 = {"atol": 1e-5, "rtol": 1e-5}
BFLOAT16 = {"atol": 2e-3, "rtol": 1e-2}
#: Parametrizes a test over both world sizes (``results`` is 2 processes' otherwise).
BOTH_WORLDS = pytest.mark.parametrize(
    "results",
    [pytest.param(2, id="world2"), pytest.param(4, id="world4", marks=pytest.mark.slow)],
    indirect=True,
)


@pytest.fixture(scope="module")
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Every scenario's results on each rank of a world (``request.param`` processes, 2 by
    default): one spawn per world size for the whole file, shared by pytest-xdist workers
    (the first to take the lock runs it; under xdist the base temporary directory's
    parent belongs to this session)."""
    world = getattr(request, "param", 2)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out_dir = shared / f"distributed-results-world{world}"
    with FileLock(str(out_dir) + ".lock"):
        if not (out_dir / "done").exists():
            out_dir.mkdir(exist_ok=True)
            _spawn(str(out_dir), world)
            (out_dir / "done").touch()
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(world)]


def _spawn(out_dir: str, world: int) -> None:
    # The spawned processes import this package's ``workers`` by the name pytest gave
    # it (``--import-mode=importlib``: ``distributed.workers``), from sys.path.
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = run_all.__module__.split(".")[0]
    assert os.path.isdir(os.path.join(here, package)), run_all.__module__
    with tempfile.TemporaryDirectory() as scratch, _on_sys_path(here):
        init_file = os.path.join(scratch, "init")
        mp.spawn(run_all, args=(world, init_file, out_dir, WORLDS[world]), nprocs=world, join=True)


@contextlib.contextmanager
def _on_sys_path(path: str) -> Iterator[None]:
    sys.path.insert(0, path)
    try:
        yield
    finally:
        sys.path.remove(path)


def _assert_steps_match(result: dict, tolerance: dict) -> None:
    eager, compiled = result[False]["params"], result[True]["params"]
    assert len(eager) == len(compiled) == 10
    for step, (want, got) in enumerate(zip(eager, compiled)):
        for index, (w, g) in enumerate(zip(want, got)):
            torch.testing.assert_close(g, w, **tolerance, msg=f"step {step}, parameter {index}")


def _assert_ranks_agree(results: list[dict], name: str) -> None:
    """Replicas hold the same parameters after every step (gradients were reduced)."""
    for other in results[1:]:
        for want, got in zip(results[0][name][True]["params"], other[name][True]["params"]):
            for w, g in zip(want, got):
                torch.testing.assert_close(g, w, atol=0, rtol=0)


def _assert_compiled_without_breaks(result: dict) -> None:
    entries = result[True]["entries"]
    assert entries, "nothing was compiled"
    for reason, has_breaks in entries:
        assert reason == "", f"ran eagerly: {reason}"
        assert not has_breaks


@BOTH_WORLDS
def test_ddp_matches_eager_every_step(results):
    for rank_results in results:
        _assert_steps_match(rank_results["ddp"], FLOAT32)
        _assert_compiled_without_breaks(rank_results["ddp"])
    _assert_ranks_agree(results, "ddp")


def test_ddp_unused_parameters_and_accumulation_match_eager(results):
    """``find_unused_parameters`` with a layer ``forward`` reads on every third step only
    (steps 2, 5, 8), two micro-batches a step, the first under ``no_sync()``."""
    for rank_results in results:
        result = rank_results["ddp_unused_accumulate"]
        _assert_steps_match(result, FLOAT32)
        _assert_compiled_without_breaks(result)
        assert len(result[True]["entries"]) == 2  # a graph with the layer, one without
        unused_weight = [params[-2] for params in result[True]["params"]]
        for step in range(1, 10):
            changed = not torch.equal(unused_weight[step], unused_weight[step - 1])
            assert changed == (step % 3 == 2), step
    _assert_ranks_agree(results, "ddp_unused_accumulate")


def test_ddp_detached_parameter_with_unused_parameters_matches_eager(results):
    """A weight read through ``p.detach()`` only, under ``find_unused_parameters``: no
    gradient reaches it or its bias (``.grad`` stays None, as in eager), DDP does not
    wait for one, and every step matches eager."""
    for rank_results in results:
        result = rank_results["ddp_detached"]
        _assert_steps_match(result, FLOAT32)
        _assert_compiled_without_breaks(result)
        eager, compiled = result[False]["without_grad"], result[True]["without_grad"]
        assert compiled == eager
        assert all(flags[-2:] == [True, True] for flags in compiled)  # frozen weight, bias
        assert not any(any(flags[:-2]) for flags in compiled)
    _assert_ranks_agree(results, "ddp_detached")


def test_no_sync_defers_the_all_reduce(results):
    """Under ``no_sync()`` no bucket is all-reduced; the next micro-batch all-reduces
    each bucket once, as in eager. (Parameters alone cannot tell: all-reducing both
    micro-batches' gradients gives the same sum.)"""
    for rank_results in results:
        result = rank_results["ddp_unused_accumulate"]
        eager, compiled = ([len(flags) for flags in result[c]["embed_done"]] for c in (False, True))
        assert len(compiled) == 20  # 10 steps of 2 micro-batches
        assert compiled[0::2] == [0] * 10  # under no_sync()
        assert min(compiled[1::2]) > 1
        assert compiled == eager


@BOTH_WORLDS
def test_ddp_graph_is_split_at_buckets_and_has_no_breaks(results):
    for rank_results in results:
        compiled = rank_results["ddp"][True]
        assert compiled["breaks"] == []  # explain: none, so none in torch.nn.parallel
        assert max(compiled["pieces"]) > 2


@BOTH_WORLDS
def test_ddp_all_reduces_before_the_backward_ends(results):
    """After DDP rebuilt its buckets (step 1 on), the first bucket is all-reduced while
    the embedding, read first in the forward, has no gradient yet: the all-reduce
    overlaps the rest of the backward, compiled as in eager."""
    for rank_results in results:
        for compiled in (False, True):
            steps = rank_results["ddp"][compiled]["embed_done"]
            assert len(steps) == 10
            for flags in steps[1:]:
                assert len(flags) > 2, flags  # several buckets
                assert flags[-1]  # the embedding's bucket is the last one
                assert not flags[0], (compiled, steps)


def _assert_fsdp2_matches(results: list[dict], name: str, tolerance: dict) -> None:
    for rank_results in results:
        _assert_steps_match(rank_results[name], tolerance)
        _assert_compiled_without_breaks(rank_results[name])
        # both blocks are regions compiled between FSDP's hooks
        assert sum("Block" in r for r in rank_results[name][True]["regions"]) == 2
        assert rank_results[name][True]["warnings"] == []
    _assert_ranks_agree(results, name)


@BOTH_WORLDS
def test_fsdp2_matches_eager_every_step(results):
    _assert_fsdp2_matches(results, "fsdp", FLOAT32)


@pytest.mark.parametrize(
    ("name", "tolerance"), [("fsdp_mixed", BFLOAT16), ("fsdp_checkpointed", FLOAT32)]
)
def test_fsdp2_variants_match_eager_every_step(results, name, tolerance):
    _assert_fsdp2_matches(results, name, tolerance)


@BOTH_WORLDS
def test_fsdp2_block_graph_has_no_breaks(results):
    """A block, explained between FSDP's hooks, is one graph. The root (explained from
    outside) is glue: its graph breaks at its calls of the regions and units, all in the
    model's own code, none in torch.distributed."""
    for rank_results in results:
        compiled = rank_results["fsdp"][True]
        assert compiled["graphs"] == [1]
        assert compiled["breaks"] == [[]]
        root_breaks = compiled["root_breaks"]
        assert root_breaks and all(f.endswith("models.py") for f, _, _ in root_breaks)
        assert any("FSDPBlock" in reason for _, _, reason in root_breaks), root_breaks


def test_checkpoint_inside_forward_is_captured_and_matches(results):
    """``torch.utils.checkpoint.checkpoint`` called inside a compiled forward (under DDP;
    inside each FSDP2 block) is captured: no graph break, no warning, the numbers are
    eager's (what the backward recomputes is tested in the autograd package)."""
    for rank_results in results:
        result = rank_results["inline_checkpoint"]
        _assert_steps_match(result, FLOAT32)
        _assert_compiled_without_breaks(result)
        assert result[True]["breaks"] == []
        assert result[True]["warnings"] == []
    _assert_ranks_agree(results, "inline_checkpoint")
    _assert_fsdp2_matches(results, "fsdp_inline_checkpoint", FLOAT32)
