"""Cold compile time: the first call in a fresh process with empty compiler caches.

The parent calls :func:`cold_first_call` once per compiler (and once for eager),
each in a new ``python -m bench.cold`` process with fresh temporary
``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR`` and ``TORCHSTRATA_CACHE_DIR``.
Cold compile seconds = compiler's first call - eager's first call, so one-time
device and library initialisation cancels out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.compilers import compile_with, describe_error
from bench.execution import grad_leaves, grad_mode, run_step, synchronize
from bench.workloads import DeviceProfile, select_workloads
from bench.workloads.spec import DTYPES

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHSTRATA_CACHE_DIR")


def first_call_seconds(workload_id: str, compiler: str, profile: DeviceProfile) -> float:
    """Build the workload (outside the clock), then time compile + first step."""
    [workload] = [w for w in select_workloads(profile, [workload_id]) if w.id == workload_id]
    case = workload.make()
    leaves = grad_leaves(case)
    synchronize(profile.device)
    with grad_mode(workload.train):
        start = time.perf_counter()
        run_step(compile_with(compiler, case.fn), case, workload.train, leaves)
        synchronize(profile.device)
        return time.perf_counter() - start


def cold_first_call(
    workload_id: str, compiler: str, profile: DeviceProfile, timeout_s: float
) -> float | str:
    """Run :func:`first_call_seconds` in a fresh process; seconds, or an error string."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    env = dict(os.environ)
    for variable in CACHE_VARIABLES:
        env[variable] = str(scratch / variable.lower())
    command = [sys.executable, "-m", "bench.cold", "--workload", workload_id]
    command += ["--compiler", compiler, "--device", profile.kind]
    command += ["--quick"] if profile.quick else []
    command += ["--dtype", profile.dtype_name] if profile.dtype_name else []
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout_s:.0f} s"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"error: exit {done.returncode}: {tail[:160]}"
    return answer["seconds"] if "seconds" in answer else str(answer.get("error"))


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.cold --workload K1 --compiler inductor --device cpu``: print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", choices=sorted(DTYPES))
    args = parser.parse_args(argv)
    profile = DeviceProfile(args.device, args.quick, args.dtype)
    try:
        seconds = first_call_seconds(args.workload, args.compiler, profile)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a status
        print(json.dumps({"error": describe_error(exc)}))
        return 1
    print(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
