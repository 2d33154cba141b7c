"""K3 softmax over rows of 65536 bf16: the whole row in one program's registers (persistent,
1024 threads, 64 elements each), converted to float32 at the load or at each use (the row
then held as packed bf16), against the looped kernels' best (exp_group.py)."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling

@triton.jit
def persist(x_ptr, y_ptr, N: tl.constexpr, LATE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, N)
    raw = tl.load(x_ptr + row * N + r)
    if LATE:
        m = tl.max(raw, 0).to(tl.float32)
        e = tl.exp(raw.to(tl.float32) - m)
        s = tl.sum(e, 0)
        y = tl.exp(raw.to(tl.float32) - m) * (1.0 / s)
    else:
        x = raw.to(tl.float32)
        m = tl.max(x, 0)
        e = tl.exp(x - m)
        y = e * (1.0 / tl.sum(e, 0))
    tl.store(y_ptr + row * N + r, y.to(tl.bfloat16), cache_modifier=".cs")

ceiling = copy_ceiling()
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
for n in (32768, 65536):
    x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1).bfloat16().float()
    for late in (False, True):
        for w in (16, 32):
            try:
                f = lambda: persist[(x.shape[0],)](x, y, n, late, num_warps=w)
                y.zero_(); f(); torch.cuda.synchronize()
                k = persist.warmup(x, y, n, late, num_warps=w, grid=(1,))
                regs, spills = getattr(k, "n_regs", "?"), getattr(k, "n_spills", "?")
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                print(f"N={n} late={late} w{w}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% regs {regs} spills {spills} err {err:.1e}", flush=True)
            except Exception as e:
                print(f"N={n} late={late} w{w}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
