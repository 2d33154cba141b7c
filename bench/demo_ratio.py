"""The foundation workload side by side: ``softmax(gelu(x + b), -1)`` under eager,
torch.compile and torchstrata in one process, on the GPU when one is present.

    python bench/demo_ratio.py [--rows 16384 --cols 4096 --dtype bfloat16]

Prints median times (``triton.testing.do_bench`` on CUDA), achieved GB/s against a copy
ceiling measured in the same run and the number of kernels we generate. Each result is
checked against a float64 reference first: a WRONG one is neither timed nor in a speedup,
and the script then exits non-zero.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr


def demo(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The foundation issue's workload."""
    return torch.softmax(F.gelu(x + b), -1)


def median_ms(fn: Callable[[], Any], device: str) -> float:
    """Median milliseconds per call."""
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median"))
    for _ in range(3):
        fn()
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.rows, args.cols, device=device, dtype=dtype)
    b = torch.randn(args.cols, device=device, dtype=dtype)
    reference = demo(x.double(), b.double())
    copy_src = torch.empty(x.numel() * 4, dtype=torch.uint8, device=device)
    copy_dst = torch.empty_like(copy_src)
    copy_ms = median_ms(lambda: copy_dst.copy_(copy_src), device)
    ceiling = 2 * copy_src.numel() / copy_ms / 1e6
    moved = (x.numel() * 2 + b.numel()) * x.element_size()
    print(
        f"{device} {torch.cuda.get_device_name() if device == 'cuda' else ''} torch {torch.__version__}"
    )
    print(f"shape {tuple(x.shape)} {dtype}; copy ceiling {ceiling:.0f} GB/s")
    contenders: dict[str, Callable[..., torch.Tensor]] = {"eager": demo}
    contenders["torch.compile"] = torch.compile(demo)  # comparator
    contenders["torchstrata"] = tsr.compile(demo)
    eager_error = (demo(x, b).double() - reference).abs()
    times, wrong = {}, []
    for name, fn in contenders.items():
        start = time.perf_counter()
        out = fn(x, b)
        if device == "cuda":
            torch.cuda.synchronize()
        first_call = time.perf_counter() - start
        verdict = check_result(out, x.dtype, reference, eager_error)
        if verdict:  # a wrong result is never timed: its speed means nothing
            wrong.append(name)
            print(f"{name:14s} WRONG: {verdict}  first call {first_call:6.2f} s  (not timed)")
            continue
        times[name] = median_ms(lambda fn=fn: fn(x, b), device)
        gbs = moved / times[name] / 1e6
        print(
            f"{name:14s} {times[name]:8.4f} ms  {gbs:7.0f} GB/s  {100 * gbs / ceiling:5.1f}% of copy"
            f"  first call {first_call:6.2f} s  ok"
        )
    report = tsr.explain(demo, x, b)
    print(
        f"torchstrata kernels: {len(report.kernels)} ({', '.join(k.backend for k in report.kernels)})"
    )
    if "torchstrata" in times:
        ratios = [
            f"vs {name} {times[name] / times['torchstrata']:.2f}x"
            for name in ("eager", "torch.compile")
            if name in times
        ]
        print(f"speedup {', '.join(ratios)}")
    if wrong:
        raise SystemExit(f"WRONG results from {', '.join(wrong)}: no speedup reported for them")


def check_result(
    out: torch.Tensor, dtype: torch.dtype, reference: torch.Tensor, eager_error: torch.Tensor
) -> str:
    """Why ``out`` is wrong ('' when right): its dtype or shape, or the first element
    further from the float64 ``reference`` than 3x eager's error at that element plus one
    ulp of ``dtype`` there. Element by element: a small element far off fails however
    accurate the large ones are (one overall max error let a bfloat16 element 50x off pass).
    """
    if out.dtype != dtype or out.shape != reference.shape:
        return f"{out.dtype}{list(out.shape)}, expected {dtype}{list(reference.shape)}"
    error = (out.double() - reference).abs()
    ulp = torch.finfo(dtype).eps * reference.abs() + torch.finfo(dtype).tiny
    bad = ~(error <= 3 * eager_error + ulp)  # a NaN error counts as bad
    if not bad.any():
        return ""
    at = tuple(int(i) for i in torch.nonzero(bad)[0])
    return (
        f"{int(bad.sum())} elements off, first at {at}: {out[at].item()!r} "
        f"for {reference[at].item()!r} (eager {eager_error[at].item():.2e} off)"
    )


if __name__ == "__main__":
    main()
