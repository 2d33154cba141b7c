"""Session 18: pointwise work on channels-last and transposed tensors, on the H200.

Before this session the compiler stored every elementwise result row-major and walked
each kernel's domain row-major, so a channels-last ``relu(x + b)`` was a transposing
kernel (strided loads) and handed the next convolution an NCHW tensor. Prints, per case,
ours / eager / torch.compile (median of ``do_bench``, L2 flushed), achieved GB/s over
the minimal bytes, whether the output strides match eager's, and the max error.
"""

import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import torchstrata.runtime as tsr


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def case(name, fn, inputs, nbytes):
    ours = tsr.compile(fn)
    tc = torch.compile(fn)
    want = fn(*inputs)
    got, got_tc = ours(*inputs), tc(*inputs)
    error = (got.float() - want.float()).abs().max().item()
    times = {}
    for label, f in (("ours", ours), ("eager", fn), ("torch.compile", tc)):
        times[label] = do_bench(lambda f=f: f(*inputs), warmup=50, rep=300)
    print(
        f"{name:34s} ours {times['ours'] * 1e3:8.1f} us ({gbps(nbytes, times['ours']):5.0f} GB/s)"
        f"  eager {times['eager'] * 1e3:8.1f}  TC {times['torch.compile'] * 1e3:8.1f}"
        f"  x TC {times['torch.compile'] / times['ours']:.2f}  strides "
        f"{'eager' if got.stride() == want.stride() else got.stride()}"
        f" TC {'eager' if got_tc.stride() == want.stride() else got_tc.stride()}  err {error:.1e}",
        flush=True,
    )


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else ""
    print("build:", label, torch.__version__, torch.cuda.get_device_name())
    bf16 = torch.bfloat16
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=bf16).to(
        memory_format=torch.channels_last
    )
    b = torch.randn(256, 1, 1, device="cuda", dtype=bf16)
    n = x.numel() * 2
    case("CL relu(x + b) [64,256,56,56]", lambda x: F.relu(x + b), (x,), 2 * n)
    y = torch.randn_like(x)
    case("CL x * sigmoid(y) [64,256,56,56]", lambda x, y: x * torch.sigmoid(y), (x, y), 3 * n)
    scale = torch.randn(256, device="cuda", dtype=bf16)
    shift = torch.randn(256, device="cuda", dtype=bf16)

    def bn_relu(x):
        return F.relu(x * scale[:, None, None] + shift[:, None, None])

    case("CL scale/shift/relu (folded BN)", bn_relu, (x,), 2 * n)
    t = torch.randn(16384, 8192, device="cuda", dtype=bf16).t()
    case("transposed gelu [8192,16384]^T", lambda t: F.gelu(t) + 1, (t,), 2 * t.numel() * 2)


if __name__ == "__main__":
    main()
