"""Session 11: is K3's lost time the last wave's imbalance? Persistent, evenly loaded
softmax over rows of N bf16: P programs (no more than fit on the GPU at once), each
taking ROUNDS equal chunks (chunk = round * P + pid), so every program does the same
work and all finish together. A row's C chunks are taken by adjacent programs in the same
round and swap (max, sum) through scratch and a per-row counter (exp_k3tail's scheme);
C = 1 needs no exchange. The launches of the tuned generated kernels leave a partial
last wave: 1024 rows of 65536 on 264 resident programs (3.9 waves), 2048 cluster
programs of rows of 262144 on 496 (4.1 waves)."""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceiling import copy_ceiling  # noqa: E402
from exp_k3tail import _chunk  # noqa: E402

SMS = 132


@triton.jit(do_not_specialize=["epoch"])
def softmax_even(x_ptr, y_ptr, part_ptr, cnt_ptr, epoch, P: tl.constexpr, ROUNDS: tl.constexpr,
                 TOTAL: tl.constexpr, N: tl.constexpr, C: tl.constexpr, RB: tl.constexpr):
    pid = tl.program_id(0)
    for i in range(ROUNDS):
        chunk = i * P + pid
        if chunk < TOTAL:
            row = chunk // C
            c = chunk % C
            _chunk(x_ptr, y_ptr, part_ptr, cnt_ptr, row, c, chunk - c, epoch, N, C, RB)


def runner(x, y, part, cnt, programs, c, rb, warps, maxnreg):
    rows, n = x.shape
    total = rows * c
    rounds = -(-total // programs)
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    epoch = [int(cnt.max())]
    args = lambda: (x, y, part, cnt, epoch[0], programs, rounds, total, n, c, min(rb, n // c))  # noqa: E731
    compiled = softmax_even.warmup(*args(), grid=(programs,), num_warps=warps, **extra)
    compiled._init_handles()
    threads = 32 * warps
    per_sm = min(65536 // (max(compiled.n_regs, 1) * threads), 2048 // threads, 32)
    if compiled.metadata.shared:
        per_sm = min(per_sm, (228 * 1024) // (compiled.metadata.shared + 1024))
    if c > 1 and programs > per_sm * SMS:
        raise RuntimeError(f"{programs} programs > {per_sm * SMS} resident: waits could deadlock")

    def run():
        epoch[0] += 1
        softmax_even[(programs,)](*args(), num_warps=warps, **extra)

    return run, f"rounds {rounds} regs {compiled.n_regs} spills {compiled.n_spills} {per_sm}/SM"


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s  triton {triton.__version__}", flush=True)
    plans = {
        65536: [(264, 1, 16384, 32, 32), (256, 1, 16384, 32, 32), (132, 1, 16384, 32, 32),
                (512, 2, 16384, 16, 32), (528, 2, 16384, 16, 32), (512, 4, 16384, 16, 32),
                (1024, 4, 16384, 8, 32), (1024, 8, 8192, 8, 32), (256, 2, 16384, 32, 32)],
        262144: [(512, 8, 8192, 16, 32), (512, 16, 8192, 16, 32), (512, 8, 16384, 16, 32),
                 (256, 4, 16384, 32, 32), (256, 8, 16384, 32, 32), (1024, 16, 8192, 8, 32),
                 (1024, 8, 8192, 8, 32), (528, 8, 8192, 16, 32)],
    }
    only = os.environ.get("ONLY")
    for n, cfgs in plans.items():
        if only and str(n) != only:
            continue
        rows = 2**26 // n
        x = torch.randn(rows, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        part = torch.zeros(rows * 64 * 2, device="cuda")
        cnt = torch.zeros(rows, dtype=torch.int32, device="cuda")
        res = []
        t = do_bench(lambda: y.copy_(x), warmup=10, rep=40, return_mode="median")
        res.append((t, f"N={n} torch copy_: {t * 1000:6.1f} us {100 * 4 * x.numel() / t / 1e6 / ceiling:5.1f}%"))
        for programs, c, rb, warps, maxnreg in cfgs:
            tag = f"N={n} P{programs} C{c} R{rb} w{warps} maxnreg {maxnreg}"
            try:
                cnt.zero_()
                f, info = runner(x, y, part, cnt, programs, c, rb, warps, maxnreg)
                tag += " " + info
                y.zero_()
                f()
                torch.cuda.synchronize()
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                err2 = (y.float() - ref).abs().max().item()
                res.append((t, f"{tag}: {t * 1000:6.1f} us {100 * 4 * x.numel() / t / 1e6 / ceiling:5.1f}% "
                               f"err {err:.1e}/{err2:.1e}"))
            except Exception as e:  # noqa: BLE001
                print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _, line in sorted(res):
            print(line, flush=True)
