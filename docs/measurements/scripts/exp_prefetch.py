"""K3 softmax over long bf16 rows, looped per row: the next tile's load issued before this
tile's reductions (double-buffered registers, written out in the source), in the statistics
loop, the output loop or both, against the plain loops (exp_group.py's best: R16384 w16)."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling

@triton.jit
def softmax_k(x_ptr, y_ptr, N: tl.constexpr, RBLOCK: tl.constexpr, PRE1: tl.constexpr, PRE2: tl.constexpr, GROUP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * N
    if GROUP:
        acc_m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
        acc_s = tl.zeros([1, RBLOCK // 8], tl.float32)
    else:
        acc_m = tl.full([1, 1], float("-inf"), tl.float32)
        acc_s = tl.zeros([1, 1], tl.float32)
    r0 = tl.arange(0, RBLOCK)[None, :]
    nxt = tl.load(base + r0, eviction_policy="evict_last")
    for off in range(0, N, RBLOCK):
        if PRE1:
            cur = nxt
            nr = tl.minimum(off + RBLOCK, N - RBLOCK) + r0
            nxt = tl.load(base + nr, eviction_policy="evict_last")
        else:
            cur = tl.load(base + off + r0, eviction_policy="evict_last")
        x = cur.to(tl.float32)
        if GROUP:
            x3 = tl.reshape(x, [1, RBLOCK // 8, 8])
            new = tl.maximum(acc_m, tl.max(x3, 2))
            safe = tl.where(new == float("-inf"), 0.0, new)
            acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x3 - safe[:, :, None]), 2)
            acc_m = new
        else:
            new = tl.maximum(acc_m, tl.max(x, 1, keep_dims=True))
            safe = tl.where(new == float("-inf"), 0.0, new)
            acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x - safe), 1, keep_dims=True)
            acc_m = new
    m = tl.max(acc_m, 1, keep_dims=True)
    ms = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(acc_s * tl.exp(acc_m - ms), 1, keep_dims=True)
    inv = 1.0 / s
    last: tl.constexpr = (N - 1) // RBLOCK * RBLOCK
    nxt = tl.load(base + last + r0, eviction_policy="evict_first")
    for step in range(0, N, RBLOCK):
        off = last - step
        if PRE2:
            cur = nxt
            nxt = tl.load(base + tl.maximum(off - RBLOCK, 0) + r0, eviction_policy="evict_first")
        else:
            cur = tl.load(base + off + r0, eviction_policy="evict_first")
        y = tl.exp(cur.to(tl.float32) - m) * inv
        tl.store(y_ptr + row * N + off + r0, y.to(tl.bfloat16), cache_modifier=".cs")

if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    for n in (65536, 262144):
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        res = []
        for group in (0, 1):
            for pre1, pre2 in ((0, 0), (1, 0), (0, 1), (1, 1)):
                for R, w in ((4096, 8), (8192, 8), (8192, 16), (16384, 16), (4096, 4)):
                    try:
                        f = lambda: softmax_k[(x.shape[0],)](x, y, n, R, pre1, pre2, group, num_warps=w)
                        y.zero_(); f(); torch.cuda.synchronize()
                        err = (y.float() - ref).abs().max().item()
                        t = do_bench(f, warmup=10, rep=40, return_mode="median")
                        res.append((t, f"N={n} group={group} pre1={pre1} pre2={pre2} R{R} w{w}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
                    except Exception as e:
                        print(f"N={n} group={group} pre={pre1}{pre2} R{R} w{w}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
        for _, line in sorted(res)[:12]:
            print(line, flush=True)
