"""Softmax over long bf16 rows cut into K chunks, one program per chunk, each chunk *looped*
over twice (statistics, then output re-read from L2) with the chunks' (max, sum) exchanged
through a scratch buffer and a per-row counter (release arrival, acquire poll). Against the
one-program-per-row looped kernel (K = 1): with all 256 rows of 262144 in flight at once
(128 MB) the output pass misses L2; chunks keep the data in flight at ~33 MB.
Programs wait only for programs of their own row, adjacent in launch order."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling


@triton.jit
def split_loop(x_ptr, y_ptr, part_ptr, cnt_ptr, N: tl.constexpr, K: tl.constexpr, RBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // K).to(tl.int64)
    c = pid % K
    CH: tl.constexpr = N // K
    base = x_ptr + row * N + c * CH
    r0 = tl.arange(0, RBLOCK)[None, :]
    acc_m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
    acc_s = tl.zeros([1, RBLOCK // 8], tl.float32)
    nxt = tl.load(base + r0, eviction_policy="evict_last")
    for off in range(0, CH, RBLOCK):
        cur = nxt
        nr = tl.minimum(off + RBLOCK, CH - RBLOCK) + r0
        nxt = tl.load(base + nr, eviction_policy="evict_last")
        x3 = tl.reshape(cur.to(tl.float32), [1, RBLOCK // 8, 8])
        new = tl.maximum(acc_m, tl.max(x3, 2))
        safe = tl.where(new == float("-inf"), 0.0, new)
        acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x3 - safe[:, :, None]), 2)
        acc_m = new
    m = tl.max(acc_m, 1, keep_dims=True)
    ms = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(acc_s * tl.exp(acc_m - ms), 1, keep_dims=True)
    if K > 1:
        k = tl.arange(0, K)[None, :]
        slot = part_ptr + (row * K + c) * 2
        tl.store(slot + tl.zeros([1, 1], tl.int32), m)
        tl.store(slot + 1 + tl.zeros([1, 1], tl.int32), s)
        tl.atomic_add(cnt_ptr + row * 2, 1, sem="release")
        while tl.atomic_add(cnt_ptr + row * 2, 0, sem="acquire") < K:
            pass
        pm = tl.load(part_ptr + (row * K + k) * 2, cache_modifier=".cg")
        ps = tl.load(part_ptr + (row * K + k) * 2 + 1, cache_modifier=".cg")
        m = tl.max(pm, 1, keep_dims=True)
        ms = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(ps * tl.exp(pm - ms), 1, keep_dims=True)
        if tl.atomic_add(cnt_ptr + row * 2 + 1, 1, sem="relaxed") == K - 1:
            tl.atomic_xchg(cnt_ptr + row * 2, 0, sem="relaxed")
            tl.atomic_xchg(cnt_ptr + row * 2 + 1, 0, sem="relaxed")
    inv = 1.0 / s
    last: tl.constexpr = (CH - 1) // RBLOCK * RBLOCK
    ybase = y_ptr + row * N + c * CH
    for step in range(0, CH, RBLOCK):
        off = last - step
        x = tl.load(base + off + r0, eviction_policy="evict_first").to(tl.float32)
        tl.store(ybase + off + r0, (tl.exp(x - m) * inv).to(tl.bfloat16), cache_modifier=".cs")


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    plans = {65536: (1, 2, 4), 262144: (1, 2, 4, 8, 16)}
    for n, splits in plans.items():
        rows = 2**26 // n
        x = torch.randn(rows, n, device="cuda").bfloat16(); y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        part = torch.empty(rows * 16 * 2, device="cuda")
        cnt = torch.zeros(rows * 2, dtype=torch.int32, device="cuda")
        res = []
        for K in splits:
            for R, w in ((8192, 8), (8192, 16), (16384, 16)):
                if n // K < R:
                    continue
                tag = f"N={n} K={K} R{R} w{w}"
                try:
                    f = lambda: split_loop[(rows * K,)](x, y, part, cnt, n, K, R, num_warps=w)
                    y.zero_(); f(); torch.cuda.synchronize()
                    err = (y.float() - ref).abs().max().item()
                    t = do_bench(f, warmup=10, rep=40, return_mode="median")
                    err2 = (y.float() - ref).abs().max().item()
                    res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e} after {err2:.1e} counters {int(cnt.abs().sum())}"))
                except Exception as e:  # noqa: BLE001
                    print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _, line in sorted(res):
            print(line, flush=True)
