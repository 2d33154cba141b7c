"""Where the looped softmax over long bf16 rows spends its time: the best handwritten kernel
(statistics loop prefetched, online statistics per group of 8; exp_prefetch.py) with parts of
its work removed (bounds, wrong results) or replaced, side by side.

modes: exact; no_exp2 = output pass without exp; no_exp1 = statistics pass without exp;
no_exp = neither; poly2 = output pass's exp2 as a polynomial on the FMA pipe (right results);
stats_only = no output pass (reads only); out_only = output pass only (read + write)."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling

MODES = ("exact", "no_exp2", "no_exp1", "no_exp", "poly2", "stats_only", "out_only")
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def exp2_poly(t):
    """2**t for t <= 0 on the FMA pipe: 2**floor(t) * p(frac), p a degree-5 minimax fit (rel. err 7.5e-8)."""
    t = tl.maximum(t, -127.0)
    j = tl.floor(t)
    f = t - j
    p = 1.8775727736702406e-3
    p = p * f + 8.989344700356405e-3
    p = p * f + 5.5826319177568445e-2
    p = p * f + 2.4015361430208368e-1
    p = p * f + 6.931530740180656e-1
    p = p * f + 9.999999250126991e-1
    bits = p.to(tl.int32, bitcast=True) + (j.to(tl.int32) << 23)
    return tl.where(t <= -127.0, 0.0, bits.to(tl.float32, bitcast=True))


@triton.jit
def softmax_b(x_ptr, y_ptr, N: tl.constexpr, RBLOCK: tl.constexpr, MODE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * N
    acc_m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
    acc_s = tl.zeros([1, RBLOCK // 8], tl.float32)
    r0 = tl.arange(0, RBLOCK)[None, :]
    if MODE != 6:
        nxt = tl.load(base + r0, eviction_policy="evict_last")
        for off in range(0, N, RBLOCK):
            cur = nxt
            nr = tl.minimum(off + RBLOCK, N - RBLOCK) + r0
            nxt = tl.load(base + nr, eviction_policy="evict_last")
            x3 = tl.reshape(cur.to(tl.float32), [1, RBLOCK // 8, 8])
            new = tl.maximum(acc_m, tl.max(x3, 2))
            safe = tl.where(new == float("-inf"), 0.0, new)
            if MODE == 2 or MODE == 3:
                acc_s = acc_s + tl.sum(x3 - safe[:, :, None], 2)
            else:
                acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x3 - safe[:, :, None]), 2)
            acc_m = new
        m = tl.max(acc_m, 1, keep_dims=True)
        ms = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(acc_s * tl.exp(acc_m - ms), 1, keep_dims=True)
        inv = 1.0 / s
    else:
        m = tl.zeros([1, 1], tl.float32)
        inv = tl.full([1, 1], 1.0, tl.float32)
    if MODE == 5:
        tl.store(y_ptr + row * N + r0, (m * inv).to(tl.bfloat16) + tl.zeros([1, RBLOCK], tl.bfloat16), mask=r0 < 1)
    else:
        last: tl.constexpr = (N - 1) // RBLOCK * RBLOCK
        for step in range(0, N, RBLOCK):
            off = last - step
            x = tl.load(base + off + r0, eviction_policy="evict_first").to(tl.float32)
            if MODE == 1 or MODE == 3:
                y = (x - m) * inv
            elif MODE == 4:
                y = exp2_poly((x - m) * LOG2E) * inv
            else:
                y = tl.exp(x - m) * inv
            tl.store(y_ptr + row * N + off + r0, y.to(tl.bfloat16), cache_modifier=".cs")


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    for n in (65536, 262144):
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        for mode, name in enumerate(MODES):
            for w in (16,):
                f = lambda: softmax_b[(x.shape[0],)](x, y, n, 16384, mode, num_warps=w)
                y.zero_(); f(); torch.cuda.synchronize()
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                print(f"N={n} {name:<10} w{w}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}", flush=True)
