"""How much of softmax's second walk over a row of 65536 bf16 is served by L1 (session 10)?
exp_k3occ.py lost 8% at the same occupancy when unused shared memory took L1's room. The
second walk runs backwards, so its first tiles are the last ones the first walk read. Here
the generated looped kernel (r16384 w32 / w16, 1024 rows) is launched with growing unused
dynamic shared memory: L1 shrinks (shared memory and L1 share 256 KB per SM) while the
programs per SM stay, then with one program per SM and L1 still larger than a row."""
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
KB = 1024

if __name__ == "__main__":
    n, rows = 65536, 1024
    kernel = load(generate_triton(gen_k3.kernel_for(rows, n), interpret=False, persistent=False,
                                  group=8, even_rows=True, even_row=True))
    x = torch.randn(rows, n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1)
    c = do_bench(lambda: y.copy_(x), warmup=10, rep=40, return_mode="median")
    print(f"copy {c * 1000:.1f} us", flush=True)
    stream = torch.cuda.current_stream().cuda_stream
    plans = {32: (0, 8, 16, 32, 48, 64, 96, 116, 150, 200), 16: (0, 16, 32, 48, 116, 150)}
    for warps, extras in plans.items():
        k = kernel.warmup(x, y, 1, 16384, grid=(rows,), num_warps=warps)
        k._init_handles()
        assert cuda.cuFuncSetAttribute(ctypes.c_void_p(k.function), 8, 227 * KB) == 0
        for extra in extras:
            shared = max(extra * KB, k.metadata.shared)

            def f(shared=shared, k=k, warps=warps):
                k.run(rows, 1, 1, stream, k.function, (warps, 1, shared), None, None, None,
                      x, y, 1, 16384)

            y.zero_(); f(); torch.cuda.synchronize()
            err = (y.float() - ref).abs().max().item()
            t = do_bench(f, warmup=10, rep=40, return_mode="median")
            blocks = ctypes.c_int()
            cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks),
                                                             ctypes.c_void_p(k.function),
                                                             32 * warps, ctypes.c_size_t(shared))
            print(f"w{warps} shared {shared // KB:3d} KB ({blocks.value}/SM): {t * 1000:6.1f} us "
                  f"ratio {c / t:.3f} err {err:.1e}", flush=True)
