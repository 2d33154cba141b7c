"""K5/train (LayerNorm fwd+bwd, [16384, 4096] bf16) and K7/train: each GPU kernel's time for ours,
eager and torch.compile (torch.profiler, 20 steps), and the whole step's time (``--ours``: ours
only)."""
import sys, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
import torchstrata.runtime as rt
from torch.profiler import profile, ProfilerActivity
from triton.testing import do_bench
rn = lambda *s: torch.randn(s, device="cuda").bfloat16()
cases = (("K5/train", gk.layer_norm, lambda: [rn(16384, 4096), rn(4096), rn(4096)]),
         ("K4/train", gk.rms_norm, lambda: [rn(16384, 4096), rn(4096)]))
for name, fn, make in cases:
    inputs = make()
    runner, traffic = gk.prepare(fn, inputs, True)
    compilers = (("ours", rt.compile(fn)), ("eager", fn), ("TC", torch.compile(fn)))
    for label, f in compilers[:1] if "--ours" in sys.argv else compilers:
        run = runner(f)
        for _ in range(3): run()
        torch.cuda.synchronize()
        t = do_bench(run, warmup=10, rep=50, return_mode="median")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20): run()
            torch.cuda.synchronize()
        print(f"== {name} {label}: step {t*1000:.0f} us, {traffic/t/1e6:.0f} GB/s", flush=True)
        rows = sorted(((e.device_time_total / 20, e.key) for e in prof.key_averages() if e.device_time_total > 0), reverse=True)
        for us, key in rows[:12]:
            print(f"   {us:8.1f} us  {key[:110]}", flush=True)
