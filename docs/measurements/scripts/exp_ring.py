"""Softmax over rows of N bf16 (N <= 65536 here) in Gluon (Triton 3.6's explicit-layout
dialect): rows staged in shared memory by TMA bulk copies through a ring of S slots, one
persistent program per SM, so the next row's loads are in flight while this row is reduced
and written (the output pass reads shared memory, not HBM or L2, and leaves by TMA stores
from the same slots). Against torch's copy of the same bytes and torch.softmax.
Compiled locally with Triton 3.6 for sm_90a (ptxas: 39-64 registers, no spills).
``softmax_ws`` (session 8, compiled locally, not yet run: no device time was left) splits the
same work into a 1-warp TMA loader partition and the computing default partition."""
import os
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling  # noqa: E402


@gluon.jit
def softmax_ring(x_desc, y_desc, rows, N: gl.constexpr, S: gl.constexpr):
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    NC: gl.constexpr = N // (R * W)
    BYTES: gl.constexpr = x_desc.block_type.nbytes
    gl.static_assert(NC <= S, "a row must fit the ring")
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    mine = (rows - pid + G - 1) // G
    total = mine * NC
    smem = gl.allocate_shared_memory(x_desc.dtype, [S, R, W], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(S):
        mbarrier.init(bars.index(i), count=1)
    for q in gl.static_range(S):
        go = q < total
        qrow = pid + (q // NC) * G
        qbar = bars.index(q)
        mbarrier.expect(qbar, BYTES, pred=go)
        tma.async_copy_global_to_shared(x_desc, [qrow * (NC * R) + (q % NC) * R, 0], qbar, smem.index(q), pred=go)
    for i in range(mine):
        row = pid + i * G
        acc = gl.full([R, W], float("-inf"), gl.float32, layout)
        for c in range(NC):  # max: per thread over the row's chunks as they land
            k = i * NC + c
            slot = k % S
            mbarrier.wait(bars.index(slot), (k // S) & 1)
            acc = gl.maximum(acc, smem.index(slot).load(layout).to(gl.float32))
        m = gl.max(gl.max(acc, 1), 0)
        total_e = gl.zeros([R, W], gl.float32, layout)
        for c in range(NC):  # sum of exp(v - max): the row is in shared memory now
            slot = (i * NC + c) % S
            total_e += gl.exp(smem.index(slot).load(layout).to(gl.float32) - m)
        s = gl.sum(gl.sum(total_e, 1), 0)
        inv = 1.0 / s
        for c in range(NC):
            k = i * NC + c
            slot = k % S
            v = smem.index(slot).load(layout).to(gl.float32)
            y = gl.exp(v - m) * inv
            smem.index(slot).store(y.to(x_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(y_desc, [row * (NC * R) + c * R, 0], smem.index(slot))
            # the store before this one has read its slot: refill that slot S items ahead
            tma.store_wait(pendings=1)
            prev = k - 1
            nxt = prev + S
            go = (prev >= 0) & (nxt < total)
            pslot = (prev + S) % S
            nrow = pid + (nxt // NC) * G
            bar = bars.index(pslot)
            mbarrier.expect(bar, BYTES, pred=go)
            tma.async_copy_global_to_shared(x_desc, [nrow * (NC * R) + (nxt % NC) * R, 0], bar, smem.index(pslot), pred=go)
    tma.store_wait(pendings=0)
    for i in gl.static_range(S):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _loader(x_desc, smem, ready, empty, rows, N: gl.constexpr, S: gl.constexpr):
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    NC: gl.constexpr = N // (R * W)
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    total = (rows - pid + G - 1) // G * NC
    for k in range(total):
        slot = k % S
        mbarrier.wait(empty.index(slot), ((k // S) & 1) ^ 1)  # a fresh barrier passes phase 1
        mbarrier.expect(ready.index(slot), x_desc.block_type.nbytes)
        row = pid + (k // NC) * G
        tma.async_copy_global_to_shared(x_desc, [row * (NC * R) + (k % NC) * R, 0], ready.index(slot), smem.index(slot))


@gluon.jit
def _consumer(y_desc, smem, ready, empty, rows, N: gl.constexpr, S: gl.constexpr):
    R: gl.constexpr = y_desc.block_type.shape[0]
    W: gl.constexpr = y_desc.block_type.shape[1]
    NC: gl.constexpr = N // (R * W)
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    mine = (rows - pid + G - 1) // G
    for i in range(mine):
        row = pid + i * G
        acc = gl.full([R, W], float("-inf"), gl.float32, layout)
        for c in range(NC):
            k = i * NC + c
            slot = k % S
            mbarrier.wait(ready.index(slot), (k // S) & 1)
            acc = gl.maximum(acc, smem.index(slot).load(layout).to(gl.float32))
        m = gl.max(gl.max(acc, 1), 0)
        total_e = gl.zeros([R, W], gl.float32, layout)
        for c in range(NC):
            slot = (i * NC + c) % S
            total_e += gl.exp(smem.index(slot).load(layout).to(gl.float32) - m)
        inv = 1.0 / gl.sum(gl.sum(total_e, 1), 0)
        for c in range(NC):
            k = i * NC + c
            slot = k % S
            y = gl.exp(smem.index(slot).load(layout).to(gl.float32) - m) * inv
            smem.index(slot).store(y.to(y_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(y_desc, [row * (NC * R) + c * R, 0], smem.index(slot))
            tma.store_wait(pendings=1)  # the previous item's store has read its slot
            mbarrier.arrive(empty.index((k + S - 1) % S), pred=k > 0)
    tma.store_wait(pendings=0)
    last = mine * NC - 1
    mbarrier.arrive(empty.index((last + S) % S), pred=last >= 0)


@gluon.jit
def softmax_ws(x_desc, y_desc, rows, N: gl.constexpr, S: gl.constexpr):
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    gl.static_assert(N // (R * W) <= S, "a row must fit the ring")
    smem = gl.allocate_shared_memory(x_desc.dtype, [S, R, W], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(S):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize(
        [
            (_consumer, (y_desc, smem, ready, empty, rows, N, S)),
            (_loader, (x_desc, smem, ready, empty, rows, N, S)),
        ],
        [1],
        [24],
    )
    for i in gl.static_range(S):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


def run(x, y, R, W, S, warps, programs, kernel=None):
    layout = gl.NVMMASharedLayout.get_default_for([R, W], gl.bfloat16)
    x2, y2 = x.view(-1, W), y.view(-1, W)
    xd = TensorDescriptor(x2, list(x2.shape), list(x2.stride()), [R, W], layout)
    yd = TensorDescriptor(y2, list(y2.shape), list(y2.stride()), [R, W], layout)
    kernel = kernel or softmax_ring
    return lambda: kernel[(programs,)](xd, yd, x.shape[0], x.shape[1], S, num_warps=warps)


if __name__ == "__main__":
    ceiling = copy_ceiling()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy ceiling {ceiling:.0f} GB/s  SMs {sms}  triton {triton.__version__}", flush=True)
    configs = [(128, 64, 12, 8), (128, 64, 12, 16), (128, 64, 12, 4), (64, 64, 24, 8), (256, 64, 6, 16), (256, 64, 6, 8)]
    for n in (65536, 32768, 16384):
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        res = []
        src = x.clone()
        t = do_bench(lambda: y.copy_(src), warmup=10, rep=40, return_mode="median")
        res.append((t, f"N={n} torch copy_: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}%"))
        t = do_bench(lambda: torch.softmax(x, -1), warmup=10, rep=40, return_mode="median")
        res.append((t, f"N={n} torch.softmax: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}%"))
        for R, W, S, warps in configs:
            if n // (R * W) > S:
                continue
            for programs, kernel in ((sms, softmax_ring), (2 * sms, softmax_ring), (sms, softmax_ws)):
                name = "ring" if kernel is softmax_ring else "ws"
                tag = f"N={n} {name} R{R} W{W} S{S} w{warps} programs {programs}"
                try:
                    f = run(x, y, R, W, S, warps, programs, kernel)
                    y.zero_(); f(); torch.cuda.synchronize()
                    err = (y.float() - ref).abs().max().item()
                    t = do_bench(f, warmup=10, rep=40, return_mode="median")
                    res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
                except Exception as e:  # noqa: BLE001
                    print(f"{tag}: failed {type(e).__name__}: {str(e)[:400]}", flush=True)
        for _, line in sorted(res):
            print(line, flush=True)
