"""K7/train seeded with 1: where the backward's host time goes (timers around the parts)."""
import sys, time, torch, torch.nn.functional as F
import torchstrata.runtime as ts
import torchstrata.runtime.runners as runners
import torchstrata.runtime.unit_scale as us
from torch.profiler import profile, ProfilerActivity

def ce(logits, t):
    return F.cross_entropy(logits.float(), t)

timers = {}
def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timers[name] = timers.get(name, 0.0) + time.perf_counter() - start
    return wrapper

us.launch_scale = timed("launch_scale", us.launch_scale)
runners.scale_in_place = timed("scale_in_place", us.scale_in_place)
rows, vocab = (8192, 32000) if len(sys.argv) < 2 else (64, 1000)
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(rows, vocab, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, vocab, (rows,), device="cuda", generator=g)
c = ts.compile(ce, fullgraph=True)
one = torch.ones((), device="cuda")
loss_holder = []
def fwd():
    x.grad = None
    loss_holder.append(c(x, t))
def bwd():
    loss_holder.pop().backward(one)
fwd_t = timed("forward", fwd)
bwd_t = timed("backward", bwd)
for _ in range(5):
    fwd_t(); bwd_t()
torch.cuda.synchronize()
timers.clear()
n = 50
start = time.perf_counter()
for _ in range(n):
    fwd_t(); bwd_t()
host = time.perf_counter() - start
torch.cuda.synchronize()
wall = time.perf_counter() - start
print(f"{rows}x{vocab}: host {host / n * 1e6:.0f} us/step, wall {wall / n * 1e6:.0f}")
for name, total in timers.items():
    print(f"  {name}: {total / n * 1e6:.1f} us/step")
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        fwd_t(); bwd_t()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=6))
