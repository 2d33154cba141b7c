"""Does our K5/K4 training step synchronise with the GPU (session 10)? Full-size steps took
~410 us where the GPU needs ~180 and a tiny step's host time is ~255: host time plus GPU
time, as if each step waited. torch.cuda.set_sync_debug_mode("warn") names every
synchronising call; then wall time per step with and without the profiler's view."""
import sys
import time
import traceback
import warnings

import torch

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402
import torchstrata.runtime as rt  # noqa: E402

if __name__ == "__main__":
    ws = {w["id"]: w for w in gk.workloads(False, "cuda")}
    for wid in ("K5/train", "K4/train"):
        w = ws[wid]
        runner, _ = gk.prepare(w["fn"], w["make"](), True)
        run = runner(rt.compile(w["fn"]))
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                run()
        torch.cuda.set_sync_debug_mode(0)
        print(f"== {wid}: {len(caught)} synchronising calls in 3 steps", flush=True)
        for c in caught[:3]:
            print("  ", str(c.message)[:200], c.filename, c.lineno)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200):
            run()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / 200 * 1e6
        t = time.perf_counter()
        for _ in range(200):
            run()
        host = (time.perf_counter() - t) / 200 * 1e6
        torch.cuda.synchronize()
        print(f"   wall {wall:.1f} us/step; host (no final sync) {host:.1f} us/step", flush=True)
