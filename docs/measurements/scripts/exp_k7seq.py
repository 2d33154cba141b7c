"""K7/train [8192, 32000] bf16, ours: each kernel of one training step in launch order
with its GPU time (torch.profiler events; forward and backward kernels share names),
for F.cross_entropy and the explicit form, seeded with a random scalar and with 1."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import torchstrata.runtime as ts

sys.path.insert(0, "packages/inductor/benchmarks")
from gpu_kernels import cross_entropy, cross_entropy_explicit  # noqa: E402

g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(8192, 32000, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, 32000, (8192,), device="cuda", generator=g)
for fname, f in (("F.ce", cross_entropy), ("explicit", cross_entropy_explicit)):
    fn = ts.compile(f, fullgraph=True)
    for label, seed in (("seed 0.37", torch.tensor(0.37, device="cuda")), ("seed 1", torch.ones((), device="cuda"))):
        def step():
            x.grad = None
            fn(x, t).backward(seed)
        for _ in range(8):
            step()
        torch.cuda.synchronize()
        steps = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        per = len(kernels) // steps
        line = ", ".join(f"{e.name[:18]} {e.device_time:.1f}" for e in kernels[-per:])
        total = sum(e.device_time for e in kernels[-per:])
        print(f"{fname:>8} {label:>9}: {total:6.1f} us  [{line}]", flush=True)
