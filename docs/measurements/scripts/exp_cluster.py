"""K3 softmax over long bf16 rows with the whole row held in registers across a thread-block
cluster (Triton's num_ctas: one program spans num_ctas CTAs, whose partial reductions meet in
distributed shared memory), against the best looped kernel (exp_prefetch.py, statistics loop
prefetched, online statistics per group of 8)."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling
from exp_prefetch import softmax_k

@triton.jit
def persist(x_ptr, y_ptr, N: tl.constexpr, LATE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, N)
    raw = tl.load(x_ptr + row * N + r, cache_modifier=".cg")
    if LATE:
        m = tl.max(raw, 0).to(tl.float32)
    else:
        m = tl.max(raw.to(tl.float32), 0)
    e = tl.exp(raw.to(tl.float32) - m)
    y = e * (1.0 / tl.sum(e, 0))
    tl.store(y_ptr + row * N + r, y.to(tl.bfloat16), cache_modifier=".cs")

@triton.jit
def persist2(x_ptr, y_ptr, N: tl.constexpr, LATE: tl.constexpr):
    """The same over a [1, N] tile: Triton 3.6 cannot plan CTAs for a 1-D reduction."""
    row = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, N)[None, :]
    raw = tl.load(x_ptr + row * N + r, cache_modifier=".cg")
    if LATE:
        m = tl.max(raw, 1, keep_dims=True).to(tl.float32)
    else:
        m = tl.max(raw.to(tl.float32), 1, keep_dims=True)
    e = tl.exp(raw.to(tl.float32) - m)
    y = e * (1.0 / tl.sum(e, 1, keep_dims=True))
    tl.store(y_ptr + row * N + r, y.to(tl.bfloat16), cache_modifier=".cs")

def regs(kernel, *args, **kw):
    try:
        k = kernel.warmup(*args, grid=(1,), **kw)
        k._init_handles()
        return f"regs {k.n_regs} spills {k.n_spills}"
    except Exception as e:  # noqa: BLE001
        return f"regs ? ({type(e).__name__})"

ceiling = copy_ceiling()
print(f"copy ceiling {ceiling:.0f} GB/s  triton {triton.__version__}", flush=True)
plans = {
    16384: [(1, 16), (2, 8), (4, 4)],
    65536: [(2, 16), (4, 8), (4, 16), (8, 4), (8, 8)],
    262144: [(8, 8), (8, 16), (8, 32), (16, 8), (16, 16)],
}
for n, shapes in plans.items():
    x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1).bfloat16().float()
    res = []
    for ctas, w in shapes:
        for late, kern in ((False, persist), (False, persist2), (True, persist2)):
            tag = f"N={n} cluster ctas={ctas} w{w} late={late} {kern.fn.__name__}"
            try:
                f = lambda: kern[(x.shape[0],)](x, y, n, late, num_warps=w, num_ctas=ctas)
                y.zero_(); f(); torch.cuda.synchronize()
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                info = regs(kern, x, y, n, late, num_warps=w, num_ctas=ctas)
                res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e} {info}"))
            except Exception as e:  # noqa: BLE001
                print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
    if n > 16384:
        for maxnreg in (None, 64, 80):
            kw = {} if maxnreg is None else {"maxnreg": maxnreg}
            try:
                f = lambda: softmax_k[(x.shape[0],)](x, y, n, 16384, 1, 0, 1, num_warps=16, **kw)
                y.zero_(); f(); torch.cuda.synchronize()
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                info = regs(softmax_k, x, y, n, 16384, 1, 0, 1, num_warps=16, **kw)
                res.append((t, f"N={n} looped pre1 group R16384 w16 maxnreg={maxnreg}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e} {info}"))
            except Exception as e:  # noqa: BLE001
                print(f"N={n} looped maxnreg={maxnreg}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
    for _, line in sorted(res):
        print(line, flush=True)
