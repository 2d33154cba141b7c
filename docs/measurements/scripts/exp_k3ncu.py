"""Where softmax over rows of 65536 bf16 loses its last 10% (session 10): run under
``ncu --clock-control none`` to read each kernel's DRAM bytes, L2 hit rate and occupancy.

Launches, in order, once each after one untimed warm-up round: the generated looped kernel
(best autotuned configs, r16384 w32 and w16, rows grouped by 8), torch's copy of the same
tensor, and the generated kernel again. Without ncu it times them (do_bench)."""
import importlib.util
import os
import sys
import tempfile

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_k3  # noqa: E402
from torchstrata.inductor.triton_codegen import generate_triton  # noqa: E402


def load(source: str):
    path = os.path.join(tempfile.mkdtemp(), "k3mod.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("k3mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kernel0


if __name__ == "__main__":
    n = int(os.environ.get("K3N", "65536"))
    rows = 2**26 // n
    kernel = load(generate_triton(gen_k3.kernel_for(rows, n), interpret=False, persistent=False,
                                  group=8, even_rows=True, even_row=True))
    x = torch.randn(rows, n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1)
    variants = [
        (f"gen r16384 w32", lambda: kernel[(rows,)](x, y, 1, 16384, num_warps=32)),
        (f"gen r16384 w16", lambda: kernel[(rows,)](x, y, 1, 16384, num_warps=16)),
        ("copy", lambda: y.copy_(x)),
    ]
    for tag, f in variants:  # compile and check
        f()
        torch.cuda.synchronize()
        if tag != "copy":
            print(tag, "err", (y.float() - ref).abs().max().item(), flush=True)
    profiled = "NV_COMPUTE_PROFILER_PERFWORKS_DIR" in os.environ or os.environ.get("UNDER_NCU")
    for tag, f in variants:
        if profiled:
            print("launch", tag, flush=True)
            f()
        else:
            t = do_bench(f, warmup=10, rep=40, return_mode="median")
            print(f"{tag}: {t * 1000:.1f} us", flush=True)
    torch.cuda.synchronize()
