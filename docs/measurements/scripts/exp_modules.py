"""Does a process slow down its training steps by loading many GPU modules (session 10)?
K4/K5 training steps are host-bound; late in a long benchmark process they have run at
half speed (sessions 8 and 10) while eager's did not. Every autotuning candidate is a
module of its own. Here: tiny K5/K4 training steps (ours, eager), one launch of a tiny
Triton kernel, and a 4-byte allocation, timed before and after loading 1000 and 4000 more
copies of that kernel's module (cuModuleLoadData of its cubin, as Triton loads each)."""
import ctypes
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402
import torchstrata.runtime as rt  # noqa: E402


@triton.jit
def tiny(x_ptr, K: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, 16), tl.load(x_ptr + tl.arange(0, 16)) + K)


def per_call(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def rn(*s):
    return torch.randn(s, device="cuda").bfloat16()


if __name__ == "__main__":
    steps = {}
    for name, fn, inputs in (("K5/train", gk.layer_norm, [rn(8, 64), rn(64), rn(64)]),
                             ("K4/train", gk.rms_norm, [rn(8, 64), rn(64)])):
        runner, _ = gk.prepare(fn, inputs, True)
        steps[f"{name} ours"] = runner(rt.compile(fn))
        steps[f"{name} eager"] = runner(fn)
    buf = torch.zeros(16, device="cuda")
    steps["tiny triton launch"] = lambda: tiny[(1,)](buf, 0)
    steps["empty(1)"] = lambda: torch.empty(1, device="cuda")
    compiled = tiny.warmup(buf, 0, grid=(1,))
    cubin = compiled.asm["cubin"]
    cuda = ctypes.CDLL("libcuda.so.1")
    modules = []
    for loaded in (0, 1000, 4000):
        while len(modules) < loaded:
            handle, function = ctypes.c_void_p(), ctypes.c_void_p()
            assert cuda.cuModuleLoadData(ctypes.byref(handle), cubin) == 0
            cuda.cuModuleGetFunction(ctypes.byref(function), handle, compiled.metadata.name.encode())
            modules.append(handle)
        torch.cuda.synchronize()
        for label, fn in steps.items():
            print(f"{loaded:4d} more modules: {label:22s} {per_call(fn):7.1f} us/call", flush=True)
