"""Norm training steps (step time and, from torch.profiler, GPU time of our kernels per step) (K4/train RMSNorm, K5/train LayerNorm, [16384, 4096] bf16) with the column
partial sums' rows per program (split_sums.HOSTED_CHUNK) varied: more programs for the fused
dx + partials kernel against a larger second-level sum."""
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402

import torchstrata.runtime as rt  # noqa: E402
from torchstrata.inductor import split_sums  # noqa: E402


def rn(*shape):
    return torch.randn(shape, device="cuda").bfloat16()


cases = (("K4/train", gk.rms_norm, lambda: [rn(16384, 4096), rn(4096)]),
         ("K5/train", gk.layer_norm, lambda: [rn(16384, 4096), rn(4096), rn(4096)]))
for name, fn, make in cases:
    inputs = make()
    runner, traffic = gk.prepare(fn, inputs, True)
    for chunk in (16, 32, 64, 128, 256):
        split_sums.HOSTED_CHUNK = chunk
        run = runner(rt.compile(fn, options={"cache_dir": tempfile.mkdtemp()}))
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        t = do_bench(run, warmup=10, rep=50, return_mode="median")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                run()
            torch.cuda.synchronize()
        ours = [e for e in prof.key_averages() if e.key.startswith("kernel")]
        gpu = sum(e.device_time_total for e in ours) / 20
        parts = " ".join(f"{e.key}={e.device_time_total / 20:.1f}" for e in ours)
        print(f"{name} chunk {chunk:4d}: step {t*1000:6.1f} us, our kernels {gpu:6.1f} us ({parts})", flush=True)
