"""The output pass of softmax over rows of 65536 bf16 alone (y = exp(x - m) * inv per row,
read + write, no statistics pass), as one program per row looping over tiles of RBLOCK
(UNROLL tiles' loads issued before their work), against a flat pointwise kernel over the
whole tensor (the structure of our pointwise kernels) and torch's copy."""
import sys, os, torch, triton, triton.language as tl
from triton.testing import do_bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling


@triton.jit
def out_rows(x_ptr, y_ptr, m_ptr, N: tl.constexpr, RBLOCK: tl.constexpr, UNROLL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.load(m_ptr + row)
    base = x_ptr + row * N
    r0 = tl.arange(0, RBLOCK)
    STEP: tl.constexpr = RBLOCK * UNROLL
    for off in range(0, N, STEP):
        if UNROLL == 1:
            x = tl.load(base + off + r0, eviction_policy="evict_first").to(tl.float32)
            tl.store(y_ptr + row * N + off + r0, (tl.exp(x - m)).to(tl.bfloat16), cache_modifier=".cs")
        else:
            a = tl.load(base + off + r0, eviction_policy="evict_first")
            b = tl.load(base + off + RBLOCK + r0, eviction_policy="evict_first")
            tl.store(y_ptr + row * N + off + r0, (tl.exp(a.to(tl.float32) - m)).to(tl.bfloat16), cache_modifier=".cs")
            tl.store(y_ptr + row * N + off + RBLOCK + r0, (tl.exp(b.to(tl.float32) - m)).to(tl.bfloat16), cache_modifier=".cs")


@triton.jit
def out_flat(x_ptr, y_ptr, m_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    r = start + tl.arange(0, BLOCK)
    m = tl.load(m_ptr + r // N)
    x = tl.load(x_ptr + r).to(tl.float32)
    tl.store(y_ptr + r, tl.exp(x - m).to(tl.bfloat16))


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    n = 65536
    x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
    m = x.float().amax(-1).contiguous()
    ref = torch.exp(x.float() - m[:, None]).bfloat16().float()
    res = []
    def time(tag, f):
        y.zero_(); f(); torch.cuda.synchronize()
        err = (y.float() - ref).abs().max().item()
        t = do_bench(f, warmup=10, rep=40, return_mode="median")
        res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
    for R, w in ((2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16), (16384, 32), (32768, 32)):
        for u in (1, 2):
            time(f"rows R{R} w{w} unroll{u}", lambda: out_rows[(x.shape[0],)](x, y, m, n, R, u, num_warps=w))
    for B, w in ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8)):
        time(f"flat B{B} w{w}", lambda: out_flat[(x.numel() // B,)](x, y, m, n, B, num_warps=w))
    src = x.clone()
    t = do_bench(lambda: y.copy_(src), warmup=10, rep=40, return_mode="median")
    res.append((t, f"torch copy_: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}%"))
    for _, line in sorted(res):
        print(line, flush=True)
