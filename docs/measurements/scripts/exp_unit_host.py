"""K7/train seeded with 1: host time per step (cProfile) with and without unit gradients."""
import cProfile, os, pstats, sys, time, torch, torch.nn.functional as F
import torchstrata.runtime as ts

def ce(logits, t):
    return F.cross_entropy(logits.float(), t)

small = len(sys.argv) > 1
rows, vocab = (64, 1000) if small else (8192, 32000)
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(rows, vocab, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
t = torch.randint(0, vocab, (rows,), device="cuda", generator=g)
c = ts.compile(ce, fullgraph=True)
one = torch.ones((), device="cuda")
def step():
    x.grad = None
    c(x, t).backward(one)
for _ in range(5):
    step()
torch.cuda.synchronize()
n = 50
start = time.perf_counter()
for _ in range(n):
    step()
host = (time.perf_counter() - start) / n * 1e6
torch.cuda.synchronize()
wall = (time.perf_counter() - start) / n * 1e6
print(f"unit_grads={os.environ.get('TORCHSTRATA_UNIT_GRADS', '1')} shape {rows}x{vocab}: host {host:.0f} us/step, wall {wall:.0f} us/step")
if os.environ.get("PROFILE"):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        step()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
