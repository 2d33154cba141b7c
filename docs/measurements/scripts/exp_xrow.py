"""Softmax over long bf16 rows, pipelined across rows: persistent programs, each walks its rows
in turn and, in one loop, writes row i's output (reversed tiles, re-read from L2) while it
reads row i+1 for its statistics (HBM), so every iteration keeps both streams in flight.
Against the best one-row-per-program kernel (exp_bounds.softmax_b, exact) and torch's copy."""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exp_bounds  # noqa: E402
from ceiling import copy_ceiling  # noqa: E402


@triton.jit
def _update(acc_m, acc_s, cur, RBLOCK: tl.constexpr):
    x3 = tl.reshape(cur.to(tl.float32), [1, RBLOCK // 8, 8])
    new = tl.maximum(acc_m, tl.max(x3, 2))
    safe = tl.where(new == float("-inf"), 0.0, new)
    acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x3 - safe[:, :, None]), 2)
    return new, acc_s


@triton.jit
def _finish(acc_m, acc_s):
    m = tl.max(acc_m, 1, keep_dims=True)
    ms = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(acc_s * tl.exp(acc_m - ms), 1, keep_dims=True)
    return ms, 1.0 / s


@triton.jit
def softmax_x(x_ptr, y_ptr, rows, N: tl.constexpr, RBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    r0 = tl.arange(0, RBLOCK)[None, :]
    last: tl.constexpr = (N - 1) // RBLOCK * RBLOCK
    acc_m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
    acc_s = tl.zeros([1, RBLOCK // 8], tl.float32)
    first = x_ptr + pid * N
    for off in range(0, N, RBLOCK):
        acc_m, acc_s = _update(acc_m, acc_s, tl.load(first + off + r0, eviction_policy="evict_last"), RBLOCK)
    m, inv = _finish(acc_m, acc_s)
    for row in range(pid, rows, P):
        nrow = row + P
        src = x_ptr + row * N
        dst = y_ptr + row * N
        nsrc = x_ptr + nrow * N
        acc_m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
        acc_s = tl.zeros([1, RBLOCK // 8], tl.float32)
        for step in range(0, N, RBLOCK):
            off = last - step
            x = tl.load(src + off + r0, eviction_policy="evict_first")
            nx = tl.load(nsrc + step + r0, mask=r0 + nrow * N < rows * N, other=float("-inf"), eviction_policy="evict_last")
            tl.store(dst + off + r0, (tl.exp(x.to(tl.float32) - m) * inv).to(tl.bfloat16), cache_modifier=".cs")
            acc_m, acc_s = _update(acc_m, acc_s, nx, RBLOCK)
        m, inv = _finish(acc_m, acc_s)


if __name__ == "__main__":
    ceiling = copy_ceiling()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    for n in (65536, 16384, 262144):
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        res = []

        def bench(tag, f):
            try:
                y.zero_(); f(); torch.cuda.synchronize()
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                res.append((t, f"N={n} {tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
            except Exception as e:  # noqa: BLE001
                print(f"N={n} {tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)

        rb = min(16384, n)
        bench(f"one row per program R{rb} w16", lambda: exp_bounds.softmax_b[(x.shape[0],)](x, y, n, rb, 0, num_warps=16))
        for R in (8192, 16384):
            if R > n:
                continue
            for warps in (8, 16):
                for k in (1, 2, 3, 4):
                    p = min(k * sms, x.shape[0])
                    bench(f"xrow R{R} w{warps} programs {p}",
                          lambda: softmax_x[(p,)](x, y, x.shape[0], n, R, num_warps=warps))
        for _, line in sorted(res):
            print(line, flush=True)
