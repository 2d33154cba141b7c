"""K7/train with unit gradients: per-kernel GPU times (torch.profiler) and the sources."""
import sys, torch, torch.nn.functional as F
import torchstrata.runtime as ts
from torchstrata.runtime import explain
from torch.profiler import profile, ProfilerActivity

def ce(logits, t):
    return F.cross_entropy(logits.float(), t)

g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(8192, 32000, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, 32000, (8192,), device="cuda", generator=g)
c = ts.compile(ce, fullgraph=True)
one = torch.ones((), device="cuda")
for seed in (one, torch.tensor(0.7, device="cuda")):
    for _ in range(3):
        x.grad = None
        c(x, t).backward(seed)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            x.grad = None
            c(x, t).backward(seed)
        torch.cuda.synchronize()
    print("seed", float(seed))
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
rep = explain(c, x, t)
for k in rep.kernels:
    print("=====", k.name, k.backend, k.ops[:6])
    if "to_copy_1_unit" in k.source:
        print(k.source[-5000:])
