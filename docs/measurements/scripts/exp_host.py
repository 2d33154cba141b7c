"""Why training steps slow down late in a long benchmark process: K5/train and K4/train step
time (do_bench), host time per step (wall clock of 200 steps without synchronising inside) and
GC activity, fresh and again after compiling and running several forward workloads."""
import gc
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402

import torchstrata.runtime as rt  # noqa: E402

collections = [0, 0.0]
_start = [0.0]


def _gc(phase, info):
    if phase == "start":
        _start[0] = time.perf_counter()
    else:
        collections[0] += 1
        collections[1] += time.perf_counter() - _start[0]


gc.callbacks.append(_gc)
rows = {row["id"]: row for row in gk.workloads(small=False, device="cuda")}
steps = {}
for name in ("K4/train", "K5/train"):
    row = rows[name]
    runner, _ = gk.prepare(row["fn"], row["make"](), True)
    steps[name] = runner(rt.compile(row["fn"]))


def report(label):
    for name, run in steps.items():
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        t = do_bench(run, warmup=10, rep=50, return_mode="median")
        collections[0], collections[1] = 0, 0.0
        start = time.perf_counter()
        for _ in range(200):
            run()
        host = (time.perf_counter() - start) / 200
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / 200
        print(f"{label} {name}: do_bench {t*1000:6.1f} us, host {host*1e6:6.1f} us/step, "
              f"wall {wall*1e6:6.1f} us/step, gc {collections[0]} runs {collections[1]*1e6/200:.1f} us/step, "
              f"objects {len(gc.get_objects())}, allocated {torch.cuda.memory_allocated()/2**20:.0f} MB, "
              f"reserved {torch.cuda.memory_reserved()/2**20:.0f} MB", flush=True)


report("fresh")
for name in ("K1", "K2", "K4 [16384,4096]", "K5 [16384,4096]", "K6 (no dropout)", "K8", "K9"):
    row = rows[name]
    inputs = row["make"]()
    f = rt.compile(row["fn"])
    f(*inputs)
    if name in ("K1", "K4 [16384,4096]", "K8"):
        torch.compile(row["fn"])(*inputs)
    torch.cuda.synchronize()
report("after 7 forward rows (ours; torch.compile for 3)")
gc.freeze()
report("after gc.freeze()")
