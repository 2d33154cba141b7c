"""Where a cross-entropy training step (K7/train) spends its time: do_bench per step, and
each kernel's GPU time from torch.profiler over 5 steps, ours against torch.compile."""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402
import torchstrata.runtime as rt  # noqa: E402

if __name__ == "__main__":
    ws = {w["id"]: w for w in gk.workloads(False, "cuda")}
    for wid in sys.argv[1].split(";"):
        w = ws[wid]
        args = w["make"]()
        runner, traffic = gk.prepare(w["fn"], args, w["train"])
        compilers = [("ours", rt.compile)] + [("tc", torch.compile)] * (not os.environ.get("NO_TC"))
        for label, compile_ in compilers:
            f = compile_(w["fn"])
            run = runner(f)
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            t = do_bench(run, warmup=10, rep=50, return_mode="median")
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(5):
                    run()
                torch.cuda.synchronize()
            print(f"== {wid} {label}: {t * 1000:.1f} us per step (do_bench), "
                  f"{traffic / t / 1e6:.0f} GB/s", flush=True)
            for e in sorted(p.key_averages(), key=lambda e: -e.device_time_total)[:8]:
                print(f"   {e.device_time_total / 5:8.1f} us/step  x{e.count // 5}  {e.key[:90]}")
