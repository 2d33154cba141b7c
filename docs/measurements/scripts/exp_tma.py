"""Softmax over long bf16 rows with plain Triton tensor descriptors (TMA bulk loads and
stores) in loops pipelined by ``tl.range(num_stages=S)``: Triton stages the next S-1 tiles
in shared memory while this one is reduced. One program per row, statistics pass then a
reversed output pass. Also the output pass alone (a row-walked copy) by descriptors and by
pointers, against torch's copy of the same bytes."""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def softmax_tma(x_desc, y_desc, NC: tl.constexpr, S: tl.constexpr, ELEM: tl.constexpr):
    BR: tl.constexpr = x_desc.block_shape[0]
    W: tl.constexpr = x_desc.block_shape[1]
    base = tl.program_id(0) * (NC * BR)
    if ELEM:
        m = tl.full([BR, W], float("-inf"), tl.float32)
        s = tl.zeros([BR, W], tl.float32)
        for c in tl.range(0, NC, num_stages=S):
            v = x_desc.load([base + c * BR, 0]).to(tl.float32) * 1.4426950408889634
            mn = tl.maximum(m, v)
            s = s * tl.exp2(m - mn) + tl.exp2(v - mn)
            m = mn
        mx = tl.max(tl.max(m, 1), 0)
        tot = tl.sum(tl.sum(s * tl.exp2(m - mx), 1), 0)
    else:
        mx = float("-inf")
        tot = 0.0
        for c in tl.range(0, NC, num_stages=S):
            v = x_desc.load([base + c * BR, 0]).to(tl.float32) * 1.4426950408889634
            cm = tl.maximum(mx, tl.max(tl.max(v, 1), 0))
            tot = tot * tl.exp2(mx - cm) + tl.sum(tl.sum(tl.exp2(v - cm), 1), 0)
            mx = cm
    inv = 1.0 / tot
    for i in tl.range(0, NC, num_stages=S):
        c = NC - 1 - i
        v = x_desc.load([base + c * BR, 0]).to(tl.float32) * 1.4426950408889634
        y_desc.store([base + c * BR, 0], (tl.exp2(v - mx) * inv).to(tl.bfloat16))


@triton.jit
def copy_tma(x_desc, y_desc, NC: tl.constexpr, S: tl.constexpr):
    BR: tl.constexpr = x_desc.block_shape[0]
    base = tl.program_id(0) * (NC * BR)
    for c in tl.range(0, NC, num_stages=S):
        y_desc.store([base + c * BR, 0], x_desc.load([base + c * BR, 0]))


@triton.jit
def copy_ptr(x, y, N: tl.constexpr, R: tl.constexpr, S: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * N
    offs = tl.arange(0, R)
    for c in tl.range(0, N, R, num_stages=S):
        tl.store(y + base + c + offs, tl.load(x + base + c + offs))


def descs(x, y, BR, W):
    x2, y2 = x.view(-1, W), y.view(-1, W)
    return TensorDescriptor.from_tensor(x2, [BR, W]), TensorDescriptor.from_tensor(y2, [BR, W])


def main():
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s  triton {triton.__version__}", flush=True)
    for n in (65536, 262144):
        rows = 2**26 // n
        x = torch.randn(rows, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        res = []

        def bench(tag, f, check):
            try:
                y.zero_(); f(); torch.cuda.synchronize()
                err = (y.float() - check).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                res.append((t, f"N={n} {tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
            except Exception as e:  # noqa: BLE001
                print(f"N={n} {tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)

        src = x.clone()
        bench("torch copy_", lambda: y.copy_(src), x.float())
        xf = x.float()
        for BR, W in ((32, 256), (64, 256)):
            nc = n // (BR * W)
            xd, yd = descs(x, y, BR, W)
            for S in (3, 4):
                for warps in (4, 8):
                    bench(f"copy_tma BR{BR} W{W} S{S} w{warps}",
                          lambda: copy_tma[(rows,)](xd, yd, nc, S, num_warps=warps), xf)
                    for elem in (0, 1):
                        bench(f"softmax_tma elem{elem} BR{BR} W{W} S{S} w{warps}",
                              lambda: softmax_tma[(rows,)](xd, yd, nc, S, elem, num_warps=warps), ref)
        for R in (8192,):
            for S in (1,):
                for warps in (16,):
                    bench(f"copy_ptr R{R} S{S} w{warps}",
                          lambda: copy_ptr[(rows,)](x, y, n, R, S, num_warps=warps), xf)
        for kind in ("copy", "softmax"):
            for _, line in [r for r in sorted(res) if kind in r[1]][:8]:
                print(line, flush=True)


if __name__ == "__main__":
    main()
