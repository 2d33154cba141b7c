"""Online softmax statistics kept per group of V elements of a thread (a reshape to
[X, R/V, V] reduced along the last axis: no reduction across threads inside the loop),
against the per-row (two block reductions per tile) and per-lane forms. K3 softmax over
long bf16 rows (two loops: online max+sum, then output) and a cross-entropy-like row
logsumexp (one read) on [8192, 32000] and [4096, 128256] bf16."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling

@triton.jit
def _stats(base, N: tl.constexpr, RBLOCK: tl.constexpr, V: tl.constexpr, MODE: tl.constexpr):
    # MODE 0: per row; 1: per lane; 2: per group of V
    if MODE == 0:
        acc_m = tl.full([1, 1], float("-inf"), tl.float32)
        acc_s = tl.zeros([1, 1], tl.float32)
    elif MODE == 1:
        acc_m = tl.full([1, RBLOCK], float("-inf"), tl.float32)
        acc_s = tl.zeros([1, RBLOCK], tl.float32)
    else:
        acc_m = tl.full([1, RBLOCK // V], float("-inf"), tl.float32)
        acc_s = tl.zeros([1, RBLOCK // V], tl.float32)
    for off in range(0, N, RBLOCK):
        r = off + tl.arange(0, RBLOCK)[None, :]
        x = tl.load(base + r, r < N, other=float("-inf"), eviction_policy="evict_last").to(tl.float32)
        if MODE == 0:
            new = tl.maximum(acc_m, tl.max(x, 1, keep_dims=True))
            safe = tl.where(new == float("-inf"), 0.0, new)
            acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x - safe), 1, keep_dims=True)
            acc_m = new
        elif MODE == 1:
            new = tl.maximum(acc_m, x)
            grow = x > acc_m
            gap = tl.exp(tl.where(grow, acc_m, x) - new)
            gap = tl.where(new == float("-inf"), 0.0, gap)
            acc_s = tl.where(grow, acc_s * gap + 1.0, acc_s + gap)
            acc_m = new
        else:
            x3 = tl.reshape(x, [1, RBLOCK // V, V])
            new = tl.maximum(acc_m, tl.max(x3, 2))
            safe = tl.where(new == float("-inf"), 0.0, new)
            acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x3 - safe[:, :, None]), 2)
            acc_m = new
    m = tl.max(acc_m, 1, keep_dims=True)
    ms = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(acc_s * tl.exp(acc_m - ms), 1, keep_dims=True)
    return m, s

@triton.jit
def softmax_k(x_ptr, y_ptr, N: tl.constexpr, RBLOCK: tl.constexpr, V: tl.constexpr, MODE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * N
    m, s = _stats(base, N, RBLOCK, V, MODE)
    inv = 1.0 / s
    for step in range(0, N, RBLOCK):
        r = (N - 1) // RBLOCK * RBLOCK - step + tl.arange(0, RBLOCK)[None, :]
        x = tl.load(base + r, eviction_policy="evict_first").to(tl.float32)
        tl.store(y_ptr + row * N + r, (tl.exp(x - m) * inv).to(tl.bfloat16), cache_modifier=".cs")

@triton.jit
def lse_k(x_ptr, y_ptr, N: tl.constexpr, RBLOCK: tl.constexpr, V: tl.constexpr, MODE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m, s = _stats(x_ptr + row * N, N, RBLOCK, V, MODE)
    tl.store(y_ptr + row + tl.zeros([1, 1], tl.int64), m + tl.log(s))

ceiling = copy_ceiling()
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
modes = [("row", 0, 1), ("lane", 1, 1), ("g4", 2, 4), ("g8", 2, 8), ("g16", 2, 16)]
cfgs = [(4096, 8), (8192, 8), (8192, 16), (16384, 16), (4096, 4), (2048, 4)]
def run(label, kern, x, y, ref, nbytes):
    best = {}
    for mname, mode, v in modes:
        for R, w in cfgs:
            for st in (1, 2):
                try:
                    f = lambda: kern[(x.shape[0],)](x, y, x.shape[1], R, v, mode, num_warps=w, num_stages=st)
                    y.zero_(); f(); torch.cuda.synchronize()
                    err = (y.float() - ref).abs().max().item()
                    t = do_bench(f, warmup=10, rep=40, return_mode="median")
                    pct = 100 * nbytes / t / 1e6 / ceiling
                    print(f"{label} {mname:<4} R{R} w{w} s{st}: {t*1000:6.1f} us {pct:5.1f}% err {err:.2e}", flush=True)
                    if pct > best.get(mname, (0,))[0]: best[mname] = (pct, R, w, st)
                except Exception as e:
                    print(f"{label} {mname} R{R} w{w} s{st}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
    print(f"BEST {label}: " + "  ".join(f"{k} {v[0]:.1f}% (R{v[1]} w{v[2]} s{v[3]})" for k, v in best.items()), flush=True)
for n in (65536, 262144):
    x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
    run(f"K3/N={n}", softmax_k, x, y, torch.softmax(x.float(), -1).bfloat16().float(), 4 * x.numel())
for rows, v in ((8192, 32000), (4096, 128256)):
    x = torch.randn(rows, v, device="cuda").bfloat16(); y = torch.empty(rows, device="cuda")
    run(f"LSE[{rows},{v}]", lse_k, x, y, torch.logsumexp(x.float(), -1), 2 * x.numel())
