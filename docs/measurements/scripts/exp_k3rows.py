"""Is softmax over rows of 65536 bf16 losing its time in the last wave (session 10)? The
generated looped kernel (r16384 w32, groups of 8) over 1024, 2048 and 4096 rows against
torch's copy of the same bytes: a fixed tail shows as an efficiency that grows with rows."""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_k3  # noqa: E402
from exp_k3ncu import load  # noqa: E402
from torchstrata.inductor.triton_codegen import generate_triton  # noqa: E402

if __name__ == "__main__":
    n = 65536
    for rows in (1024, 2048, 4096, 264, 528):
        kernel = load(generate_triton(gen_k3.kernel_for(rows, n), interpret=False,
                                      persistent=False, group=8, even_rows=True, even_row=True))
        x = torch.randn(rows, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        for warps in (32, 16):
            f = lambda w=warps: kernel[(rows,)](x, y, 1, 16384, num_warps=w)  # noqa: E731
            f()
            t = do_bench(f, warmup=10, rep=40, return_mode="median")
            c = do_bench(lambda: y.copy_(x), warmup=10, rep=40, return_mode="median")
            print(f"rows {rows:5d} w{warps}: softmax {t * 1000:7.1f} us, copy {c * 1000:7.1f} us, "
                  f"ratio {c / t:.3f}, softmax {4 * x.numel() / t / 1e6:.0f} GB/s", flush=True)
