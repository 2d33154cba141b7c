"""Fewer rows in flight for softmax over rows of 65536 bf16 (session 10). exp_k3rows.py put
K3's loss in a fixed ~9 us of ramp and tail, about half a row's time; a row's time is the
rows in flight times a row's bytes over the bandwidth. Here the generated looped kernel is
launched with unused dynamic shared memory so that fewer programs fit on an SM (1 or 2
of 1024 threads; 1 to 4 of 512), against torch's copy of the same bytes."""
import ctypes
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_k3  # noqa: E402
from exp_k3ncu import load  # noqa: E402
from torchstrata.inductor.triton_codegen import generate_triton  # noqa: E402

cuda = ctypes.CDLL("libcuda.so.1")

if __name__ == "__main__":
    n = 65536
    for rows in (1024, 4096):
        kernel = load(generate_triton(gen_k3.kernel_for(rows, n), interpret=False,
                                      persistent=False, group=8, even_rows=True, even_row=True))
        x = torch.randn(rows, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        c = do_bench(lambda: y.copy_(x), warmup=10, rep=40, return_mode="median")
        print(f"rows {rows}: copy {c * 1000:.1f} us", flush=True)
        stream = torch.cuda.current_stream().cuda_stream
        for warps, rblock in ((32, 16384), (16, 16384), (16, 8192), (8, 8192)):
            k = kernel.warmup(x, y, 1, rblock, grid=(rows,), num_warps=warps)
            k._init_handles()
            assert cuda.cuFuncSetAttribute(ctypes.c_void_p(k.function), 8, 227 * 1024) == 0
            for per_sm in (1, 2, 3, 4, 0):
                shared = 0 if per_sm == 0 else (224 * 1024) // per_sm - 1024
                if per_sm and 32 * warps * per_sm > 2048:
                    continue
                def f(shared=shared, k=k, warps=warps, rblock=rblock):
                    k.run(rows, 1, 1, stream, k.function, (warps, 1, max(shared, k.metadata.shared)),
                          None, None, None, x, y, 1, rblock)
                y.zero_(); f(); torch.cuda.synchronize()
                err = (y.float() - ref).abs().max().item()
                t = do_bench(f, warmup=10, rep=40, return_mode="median")
                print(f"rows {rows} r{rblock} w{warps} {'%d/SM' % per_sm if per_sm else 'free'}: "
                      f"{t * 1000:6.1f} us ratio {c / t:.3f} err {err:.1e}", flush=True)
