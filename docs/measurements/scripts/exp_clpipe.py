"""Persistent clusters with the row held in registers and the next row loaded ahead
(session 10). Each cluster of C programs walks rows cid, cid + NCL, ...; per row each
program holds its chunk of CHUNK elements (one read), reduces it, publishes (max, sum),
arrives at the cluster barrier, issues the loads of its chunk of the cluster's next row,
waits, combines the row's C partials and writes its chunk. The memory pipe has the next
row in flight while this row's statistics are exchanged and its output written: unlike
exp_cl.py's one-row clusters (85.8 us at 65536), no program ever idles with nothing in
flight. PREFETCH=0 loads each row at the top of its iteration; SPLIT=0 keeps arrive and
wait together (the load then waits behind the whole barrier)."""
import ctypes
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling  # noqa: E402


@triton.jit
def _arrive(x):
    return tl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\n\tmov.b32 $0, $1;",
                                     "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _wait(x):
    return tl.inline_asm_elementwise("barrier.cluster.wait.acquire.aligned;\n\tmov.b32 $0, $1;",
                                     "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def softmax_clpipe(x_ptr, y_ptr, part_ptr, ROWS, NCL, N: tl.constexpr, C: tl.constexpr,
                   CHUNK: tl.constexpr, PREFETCH: tl.constexpr, SPLIT: tl.constexpr,
                   KEEP_E: tl.constexpr):
    pid = tl.program_id(0)
    rank = pid % C
    cid = pid // C
    col = rank * CHUNK + tl.arange(0, CHUNK)
    c = tl.arange(0, C)
    nxt = tl.load(x_ptr + cid * N + col, eviction_policy="evict_first")
    for row in range(cid, ROWS, NCL):
        if not PREFETCH:
            nxt = tl.load(x_ptr + row * N + col, eviction_policy="evict_first")
        cur = nxt.to(tl.float32)
        m = tl.max(cur, 0)
        e = tl.exp(cur - m)
        s = tl.sum(e, 0)
        tl.store(part_ptr + (row * C + rank) * 2, m)
        tl.store(part_ptr + (row * C + rank) * 2 + 1, s)
        if SPLIT:
            tok = _arrive(pid)
            if PREFETCH:
                nrow = tl.minimum(row + NCL, ROWS - 1)
                nxt = tl.load(x_ptr + nrow * N + col, eviction_policy="evict_first")
            tok = _wait(tok)
        else:
            tok = _wait(_arrive(pid))
            if PREFETCH:
                nrow = tl.minimum(row + NCL, ROWS - 1)
                nxt = tl.load(x_ptr + nrow * N + col, eviction_policy="evict_first")
        at = part_ptr + (row * C + c) * 2 + (tok - pid)
        pm = tl.load(at, cache_modifier=".cg")
        ps = tl.load(at + 1, cache_modifier=".cg")
        big = tl.max(pm, 0)
        inv = 1.0 / tl.sum(ps * tl.exp(pm - big), 0)
        if KEEP_E:
            y = e * (tl.exp(m - big) * inv)
        else:
            y = tl.exp(cur - big) * inv
        tl.store(y_ptr + row * N + col, y.to(tl.bfloat16), cache_modifier=".cs")


def launcher(x, y, part, n, C, warps, ncl, prefetch, split, keep_e):
    rows = x.shape[0]
    chunk = n // C
    args = (x, y, part, rows, ncl, n, C, chunk, prefetch, split, keep_e)
    k = softmax_clpipe.warmup(*args, grid=(ncl * C,), num_warps=warps)
    k._init_handles()
    meta = (warps, C, k.metadata.shared)
    stream = torch.cuda.current_stream().cuda_stream
    return k, lambda: k.run(ncl, 1, 1, stream, k.function, meta, None, None, None, *args)


def max_clusters(k, C, warps):
    """cuOccupancyMaxActiveClusters for this kernel in clusters of C (exp_clocc.py's call)."""
    import exp_clocc as oc
    fn = ctypes.c_void_p(k.function)
    if C == 16:
        oc.cuda.cuFuncSetAttribute(fn, 14, 1)
    attr = oc.Attr(id=oc.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    attr.value.clusterDim = oc.Dim(C, 1, 1)
    cfg = oc.Config(1024 * C, 1, 1, 32 * warps, 1, 1, k.metadata.shared, None, ctypes.pointer(attr), 1)
    out = ctypes.c_int()
    oc.cuda.cuOccupancyMaxActiveClusters(ctypes.byref(out), fn, ctypes.byref(cfg))
    return out.value


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s  triton {triton.__version__}", flush=True)
    configs = {65536: ((8, 8), (8, 4), (4, 8), (4, 16), (16, 4), (2, 16)),
               262144: ((16, 8), (16, 16), (8, 16), (8, 32))}
    only = os.environ.get("ONLY")
    for n, cfgs in configs.items():
        if only and str(n) != only:
            continue
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        rows = x.shape[0]
        part = torch.zeros(rows * 16 * 2, device="cuda")
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        src = x.clone()
        res = []
        t = do_bench(lambda: y.copy_(src), warmup=10, rep=40, return_mode="median")
        res.append((t, f"N={n} torch copy_: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}%"))
        for C, warps in cfgs:
            for prefetch, split, keep_e in ((1, 1, 1), (1, 1, 0), (0, 1, 1), (1, 0, 1)):
                try:
                    k, _ = launcher(x, y, part, n, C, warps, C, prefetch, split, keep_e)
                    fit = max_clusters(k, C, warps)
                    regs = k.n_regs
                except Exception as e:  # noqa: BLE001
                    print(f"N={n} C{C} w{warps}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
                    break
                for ncl in sorted({fit, fit // 2, min(rows, 2 * fit)} - {0}):
                    tag = (f"N={n} C{C} chunk {n // C} w{warps} regs {regs} ncl {ncl}/{fit} "
                           f"pre{prefetch} split{split} keep{keep_e}")
                    try:
                        _, f = launcher(x, y, part, n, C, warps, ncl, prefetch, split, keep_e)
                        y.zero_(); f(); f(); torch.cuda.synchronize()
                        err = (y.float() - ref).abs().max().item()
                        t = do_bench(f, warmup=10, rep=40, return_mode="median")
                        res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
                    except Exception as e:  # noqa: BLE001
                        print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _, line in sorted(res)[:24]:
            print(line, flush=True)
