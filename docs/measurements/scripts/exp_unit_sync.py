"""Where the K7/train step with unit gradients waits for the GPU."""
import os, time, traceback, warnings, torch, torch.nn.functional as F
import torchstrata.runtime as ts
from torch.profiler import profile, ProfilerActivity

def ce(logits, t):
    return F.cross_entropy(logits.float(), t)

g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(8192, 32000, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, 32000, (8192,), device="cuda", generator=g)
c = ts.compile(ce, fullgraph=True)
one = torch.ones((), device="cuda")
def step():
    x.grad = None
    c(x, t).backward(one)
for _ in range(5):
    step()
torch.cuda.synchronize()
torch.cuda.set_sync_debug_mode(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    step()
torch.cuda.set_sync_debug_mode(0)
for w in caught[:5]:
    print("SYNC:", w.message)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
print("memory", torch.cuda.memory_stats()["num_alloc_retries"], torch.cuda.memory_reserved() / 2**30)
