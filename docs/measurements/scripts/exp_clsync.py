"""What the cluster barrier costs the looped cluster rows of exp_cls.py: the same kernel with
the partials' exchange synchronised three ways. SYNC 0: barrier.cluster arrive.release /
wait.acquire (as generated); 1: fence.acq_rel.cluster, then a relaxed arrive and a wait;
2: no barrier at all (a bound: wrong results, the partials are read whenever).

Based on exp_cls.py: looped split rows as thread-block clusters: each row of N bf16 is cut into C chunks, one
program each, launched as one cluster of C (exp_cl.launcher's way: compiled for one CTA,
launched with num_ctas=C). Each program walks its chunk twice (statistics with the next
tile loaded ahead and online statistics per group of 8, then the output, reversed, from
L2), and the row's C programs swap (max, sum) through a scratch buffer at one hardware
cluster barrier. Cluster members start together, so none waits long for its row's others
(the ticketed version, exp_loopsplit.py, lost there); and with C chunks per row, only
1/C of each row is in flight per program: rows of 262144 stay in L2 between the passes."""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling  # noqa: E402


@triton.jit
def sync(x, SYNC: tl.constexpr):
    if SYNC == 0:
        return tl.inline_asm_elementwise(
            "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n\tmov.b32 $0, $1;",
            "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)
    elif SYNC == 1:
        return tl.inline_asm_elementwise(
            "fence.acq_rel.cluster;\n\tbarrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;\n\tmov.b32 $0, $1;",
            "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)
    else:
        return x


@triton.jit
def softmax_cls(x_ptr, y_ptr, part_ptr, N: tl.constexpr, C: tl.constexpr, CHUNK: tl.constexpr,
                RBLOCK: tl.constexpr, SYNC: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // C
    base = row * N + (pid % C) * CHUNK
    src = x_ptr + base
    r0 = tl.arange(0, RBLOCK)[None, :]
    acc_m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
    acc_s = tl.zeros([1, RBLOCK // 8], tl.float32)
    nxt = tl.load(src + r0, eviction_policy="evict_last")
    for off in range(0, CHUNK, RBLOCK):
        cur = nxt
        nr = tl.minimum(off + RBLOCK, CHUNK - RBLOCK) + r0
        nxt = tl.load(src + nr, eviction_policy="evict_last")
        x3 = tl.reshape(cur.to(tl.float32), [1, RBLOCK // 8, 8])
        new = tl.maximum(acc_m, tl.max(x3, 2))
        safe = tl.where(new == float("-inf"), 0.0, new)
        acc_s = acc_s * tl.exp(acc_m - safe) + tl.sum(tl.exp(x3 - safe[:, :, None]), 2)
        acc_m = new
    m = tl.max(tl.max(acc_m, 1), 0)
    ms = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(tl.sum(acc_s * tl.exp(acc_m - ms), 1), 0)
    tl.store(part_ptr + pid * 2, m)
    tl.store(part_ptr + pid * 2 + 1, s)
    token = sync(pid, SYNC)
    c = tl.arange(0, C)
    at = part_ptr + (row * C + c) * 2 + (token - pid)
    pm = tl.load(at, cache_modifier=".cg")
    ps = tl.load(at + 1, cache_modifier=".cg")
    big = tl.max(pm, 0)
    inv = 1.0 / tl.sum(ps * tl.exp(pm - big), 0)
    last: tl.constexpr = (CHUNK - 1) // RBLOCK * RBLOCK
    for step in range(0, CHUNK, RBLOCK):
        off = last - step
        x = tl.load(src + off + r0, eviction_policy="evict_first").to(tl.float32)
        tl.store(y_ptr + base + off + r0, (tl.exp(x - big) * inv).to(tl.bfloat16), cache_modifier=".cs")


def launcher(x, y, part, n, C, R, warps, SYNC=0):
    chunk = n // C
    rows = x.shape[0]
    k = softmax_cls.warmup(x, y, part, n, C, chunk, R, SYNC, grid=(rows * C,), num_warps=warps)
    k._init_handles()
    meta = (warps, C, k.metadata.shared)
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: k.run(rows, 1, 1, stream, k.function, meta, None, None, None, x, y, part, n, C, chunk, R, SYNC)


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s  triton {triton.__version__}", flush=True)
    configs = {65536: ((8, 8192, 8), (4, 16384, 16), (8, 8192, 16), (4, 8192, 8)),
               262144: ((8, 8192, 16), (16, 8192, 8))}
    for n, cfgs in configs.items():
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        part = torch.zeros(x.shape[0] * 16 * 2, device="cuda")
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        res = []
        for C, R, warps in cfgs:
            for mode in (0, 1, 2):
                tag = f"N={n} C{C} chunk {n // C} R{R} w{warps} sync{mode}"
                try:
                    f = launcher(x, y, part, n, C, R, warps, mode)
                    y.zero_(); f(); f(); torch.cuda.synchronize()
                    err = (y.float() - ref).abs().max().item()
                    t = do_bench(f, warmup=10, rep=40, return_mode="median")
                    res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
                except Exception as e:  # noqa: BLE001
                    print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _, line in sorted(res):
            print(line, flush=True)
