"""K7/train [8192, 32000], F.ce and explicit: GPU kernel time per step (torch.profiler,
host-independent), wall time per step and host time per step (the step's calls returned,
no sync: what the host spends launching), ours against torch.compile, seeded with 1 and
with a random scalar."""
import sys, time, torch, torch.nn.functional as F
import torchstrata.runtime as ts
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, "packages/inductor/benchmarks")
from gpu_kernels import cross_entropy, cross_entropy_explicit

g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(8192, 32000, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, 32000, (8192,), device="cuda", generator=g)
seeds = {"seed 1": torch.ones((), device="cuda"), "seed 0.37": torch.tensor(0.37, device="cuda")}
for fname, f in (("F.ce", cross_entropy), ("explicit", cross_entropy_explicit)):
    for name, fn in (("ours", ts.compile(f, fullgraph=True)), ("torch.compile", torch.compile(f))):
        for label, seed in seeds.items():
            def step():
                x.grad = None
                fn(x, t).backward(seed)
            for _ in range(8):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
            kernels = sum(e.self_device_time_total for e in prof.key_averages()) / 10
            start = time.perf_counter()
            for _ in range(50):
                step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / 50 * 1e6
            host = []
            for _ in range(20):
                torch.cuda.synchronize()
                s0 = time.perf_counter()
                step()
                host.append((time.perf_counter() - s0) * 1e6)
            torch.cuda.synchronize()
            host.sort()
            top = sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:4]
            parts = ", ".join(f"{e.key[:24]} {e.self_device_time_total / 10:.1f}" for e in top)
            print(f"{fname:>8} {name:>13} {label:>9}: GPU {kernels:6.1f} us/step, wall {wall:6.1f}, host {host[10]:6.1f} us/step  [{parts}]")
