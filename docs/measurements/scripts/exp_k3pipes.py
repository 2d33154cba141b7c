"""Session 11: what bounds the generated looped softmax kernel (rows of 65536 bf16, r16384
w32, groups of 8, reciprocal hoisted) besides DRAM? Run under ``ncu --section ...`` for
the issue, pipe (MUFU/FMA) and stall breakdown; without ncu it times the kernel."""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_k3  # noqa: E402
from exp_k3ncu import load  # noqa: E402
from torchstrata.inductor.reciprocals import hoist_reciprocals  # noqa: E402
from torchstrata.inductor.triton_codegen import generate_triton  # noqa: E402

if __name__ == "__main__":
    n = 65536
    rows = 1024
    kernel = load(generate_triton(hoist_reciprocals(gen_k3.kernel_for(rows, n)), interpret=False,
                                  persistent=False, group=8, even_rows=True, even_row=True))
    x = torch.randn(rows, n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    f = lambda: kernel[(rows,)](x, y, 1, 16384, num_warps=32)  # noqa: E731
    f()
    torch.cuda.synchronize()
    print("err", (y.float() - torch.softmax(x.float(), -1)).abs().max().item(), flush=True)
    if os.environ.get("UNDER_NCU"):
        f()
        f()
    else:
        print(f"{do_bench(f, warmup=10, rep=40, return_mode='median') * 1000:.1f} us", flush=True)
    torch.cuda.synchronize()
