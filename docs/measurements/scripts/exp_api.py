"""The CUDA API calls and host time of a tiny training step (K5/train and K4/train at
[8,64] bf16, ours): torch.profiler over 50 steps, the top entries by self CPU time, then a
cProfile of 300 steps by own time."""
import cProfile
import pstats
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402

import torchstrata.runtime as rt  # noqa: E402


def rn(*s):
    return torch.randn(s, device="cuda").bfloat16()


for name, fn, inputs in (("K5/train", gk.layer_norm, [rn(8, 64), rn(64), rn(64)]),
                         ("K4/train", gk.rms_norm, [rn(8, 64), rn(64)])):
    runner, _ = gk.prepare(fn, inputs, True)
    run = runner(rt.compile(fn))
    for _ in range(30):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            run()
        torch.cuda.synchronize()
    print(f"== {name}: torch.profiler, 50 steps", flush=True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=28), flush=True)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        run()
    torch.cuda.synchronize()
    pr.disable()
    print(f"== {name}: cProfile, 300 steps", flush=True)
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
