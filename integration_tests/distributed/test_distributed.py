"""Compiled models under DDP and FSDP2, two gloo processes on the CPU: trained for 10
steps eagerly and compiled, the parameters compared after every step.

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

WORLD = 2
FLOAT32 = {"atol": 1e-5, "rtol": 1e-5}
BFLOAT16 = {"atol": 2e-3, "rtol": 1e-2}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Every scenario's results on each rank: one spawn for the whole file, shared by
    pytest-xdist workers (the first to take the lock runs it; under xdist the base
    temporary directory's parent belongs to this session)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out_dir = shared / "distributed-results"
    with FileLock(str(out_dir) + ".lock"):
        if not (out_dir / "done").exists():
            out_dir.mkdir(exist_ok=True)
            _spawn(str(out_dir))
            (out_dir / "done").touch()
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


def _spawn(out_dir: str) -> None:
    # The spawned processes import this package's ``workers`` by the name pytest gave
    # it (``--import-mode=importlib``: ``distributed.workers``), from sys.path.
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = run_all.__module__.split(".")[0]
    assert os.path.isdir(os.path.join(here, package)), run_all.__module__
    with tempfile.TemporaryDirectory() as scratch, _on_sys_path(here):
        init_file = os.path.join(scratch, "init")
        mp.spawn(
            run_all, args=(WORLD, init_file, out_dir, list(SCENARIOS)), nprocs=WORLD, join=True
        )


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


@pytest.mark.parametrize("name", ["ddp", "ddp_unused_accumulate"])
def test_ddp_matches_eager_every_step(results, name):
    for rank_results in results:
        _assert_steps_match(rank_results[name], FLOAT32)
        _assert_compiled_without_breaks(rank_results[name])
    _assert_ranks_agree(results, name)


def test_ddp_graph_is_split_at_buckets_and_has_no_breaks(results):
    for rank_results in results:
        compiled = rank_results["ddp"][True]
        assert compiled["breaks"] == []  # explain: none, so none in torch.nn.parallel
        assert max(compiled["pieces"]) > 2


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


@pytest.mark.parametrize(
    ("name", "tolerance"),
    [("fsdp", FLOAT32), ("fsdp_mixed", BFLOAT16), ("fsdp_checkpointed", FLOAT32)],
)
def test_fsdp2_matches_eager_every_step(results, name, tolerance):
    for rank_results in results:
        _assert_steps_match(rank_results[name], tolerance)
        _assert_compiled_without_breaks(rank_results[name])
        # both blocks are regions compiled between FSDP's hooks
        assert sum("Block" in r for r in rank_results[name][True]["regions"]) == 2


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
        assert any("hooks on FSDPBlock" in reason for _, _, reason in root_breaks)


def test_checkpoint_inside_forward_warns_and_matches(results):
    for rank_results in results:
        result = rank_results["inline_checkpoint"]
        _assert_steps_match(result, FLOAT32)
        assert any("checkpoint_wrapper" in w for w in result[True]["warnings"])
