"""Session 11: where a full-size K5/train step ([16384, 4096] bf16 LayerNorm fwd+bwd, ours)
spends its host time: wall per step with and without a final sync, then cProfile of 200
steps (top functions by own time)."""
import cProfile
import pstats
import sys
import time

import torch

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402

import torchstrata.runtime as rt  # noqa: E402

rn = lambda *s: torch.randn(s, device="cuda").bfloat16()  # noqa: E731
inputs = [rn(16384, 4096), rn(4096), rn(4096)]
runner, _ = gk.prepare(gk.layer_norm, inputs, True)
for label, fn in (("ours", rt.compile(gk.layer_norm)), ("eager", gk.layer_norm)):
    run = runner(fn)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        run()
    host = (time.perf_counter() - t) / 200 * 1e6
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / 200 * 1e6
    print(f"{label}: host {host:.1f} us/step (no final sync), wall {wall:.1f} us/step", flush=True)
    if label == "ours":
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            run()
        torch.cuda.synchronize()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
