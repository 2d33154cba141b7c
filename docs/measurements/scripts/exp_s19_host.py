"""Session 19: host time per call of the model workloads that trail torch.compile
(M4/block, M4/resnet18, M5), ours against torch.compile and eager in one process.

For each: the benchmark's do_bench median (L2 flushed); the host time to enqueue one call
while the GPU is held busy by ``torch.cuda._sleep`` (nothing waits on the GPU, so this is
host time alone, as long as the calls' launches fit in the GPU's queue); then a cProfile of ours under the same stall."""

import cProfile
import os
import pstats
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, ".")
import torchstrata.runtime as ts
from bench.workloads.models import m4, m5
from bench.workloads.spec import DeviceProfile

profile = DeviceProfile("cuda")
workloads = {w.id: w for w in (*m4(profile), *m5(profile))}
names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(workloads)


def host_us(fn, calls):
    """Best of 5: enqueue ``calls`` calls behind a GPU sleep; host time per call."""
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        torch.cuda._sleep(300_000_000)  # long enough that the queue never drains
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


for name in names:
    case = workloads[name].make()
    model, args = case.fn, case.args
    compilers = {"ours": ts.compile(model), "tc": torch.compile(model), "eager": model}
    if os.environ.get("NO_TC"):
        del compilers["tc"]
    # few enough calls that their launches fit in the GPU's queue behind the sleep
    calls = {"M4/block": 60, "M4/resnet18": 10}.get(name, 4)
    with torch.no_grad():
        for fn in compilers.values():
            for _ in range(5):
                fn(*args)
        torch.cuda.synchronize()
        row = []
        for label, fn in compilers.items():
            bench_ms = do_bench(
                lambda fn=fn, args=args: fn(*args), warmup=25, rep=200, return_mode="median"
            )
            row.append(
                f"{label} {bench_ms * 1e3:7.1f} us (host {host_us(lambda fn=fn, args=args: fn(*args), calls):6.1f})"
            )
        print(f"{name:12s}", " | ".join(row), flush=True)
        ours = compilers["ours"]
        torch.cuda.synchronize()
        torch.cuda._sleep(300_000_000)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            ours(*args)
        prof.disable()
        torch.cuda.synchronize()
        if not os.environ.get("NO_PROFILE"):
            pstats.Stats(prof).sort_stats("tottime").print_stats(22)
