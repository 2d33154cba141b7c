"""``examples/train_ddp.py`` started as torchrun starts each of its processes (``env://``
rendezvous), as a world of one: DDP, compiled with torchstrata, a tiny GPT for two steps,
on the CPU with gloo (``--device cpu``: on a machine with a GPU the example's default is
NCCL on CUDA).
The 2-process run is ``torchrun --nproc-per-node 2 examples/train_ddp.py [--fsdp]``.

The run is a fresh process (about 6 CPU-seconds: importing torch and torchstrata, then
compiling), so that no process group outlives the test in the pytest process. The
``--fsdp`` branch is left out here to save CI that time again: FSDP2 compilation is
tested in test_distributed.py, and the branch only calls ``fully_shard``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
TINY = ["--steps", "2", "--layers", "1", "--dim", "16", "--heads", "2", "--vocab", "32"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_train_ddp_example_runs_compiled():
    env = dict(os.environ)
    env.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        OMP_NUM_THREADS="1",
    )
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *TINY, "--seq", "8", "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step   1  loss" in done.stdout
    assert "DDP x1 (gloo, torchstrata): 2 steps" in done.stdout
