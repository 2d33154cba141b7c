"""torchstrata demo: compile a small MLP and a fused elementwise chain, check them against
eager PyTorch, time both, and show where the generated code lies.

    python examples/demo.py                    # CPU: generated C++ kernels
    python examples/demo.py --codegen triton   # Triton kernels (interpreter on CPU)
    python examples/demo.py --device cuda      # on a GPU, when one is present
    python examples/demo.py --show-source      # print every kernel's source
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import torchstrata.runtime as rt


class MLP(torch.nn.Module):
    """Linear -> GELU -> Linear -> softmax: matmuls go to ATen, the rest is fused."""

    def __init__(self, features: int = 128, hidden: int = 256) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.fc2 = torch.nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(F.gelu(self.fc1(x))), -1)


def median_seconds(
    fns: list[Callable[..., Any]], args: tuple[Any, ...], calls: int, device: str
) -> list[float]:
    """Median wall time of one call of each function, calls interleaved (after a warm-up)
    so that load on the machine affects every function alike."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn(*args)
    for _ in range(calls):
        for fn, samples in zip(fns, times):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn(*args)
            if device == "cuda":
                torch.cuda.synchronize()
            samples.append(time.perf_counter() - start)
    return [statistics.median(samples) for samples in times]


def run_case(
    name: str, fn: Callable[..., Any], args: tuple[Any, ...], options: argparse.Namespace
) -> bool:
    """Compile, compare with eager, time, explain. Returns whether results matched."""
    print(f"== {name}")
    compiled = rt.compile(fn, codegen=options.codegen)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = compiled(*args)
        report = rt.explain(compiled, *args)
    for warning in caught:
        print(f"   warning: {warning.message}")
    expected = fn(*args)
    try:
        torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-5)
        print("   matches eager: yes")
        matched = True
    except AssertionError as error:
        print(f"   matches eager: NO\n{error}")
        matched = False
    eager_s, compiled_s = median_seconds([fn, compiled], args, options.calls, options.device)
    print(
        f"   eager {eager_s * 1e6:9.1f} us   compiled {compiled_s * 1e6:9.1f} us   "
        f"(median of {options.calls} calls; speedup {eager_s / compiled_s:.2f}x)"
    )
    print(
        f"   graphs {report.graph_count}, graph breaks {report.graph_break_count}, "
        f"kernels {len(report.kernels)}, ops left to eager {len(report.eager_ops)}"
    )
    if report.missing_stages:
        print(f"   stages not installed: {', '.join(report.missing_stages)}")
    if report.fallback:
        print(f"   runs eagerly: {report.fallback}")
    for kernel in report.kernels:
        where = kernel.path or "(in memory)"
        print(f"   kernel {kernel.name} [{kernel.backend}] {where}")
        print(f"      ops: {', '.join(kernel.ops)}")
        if options.show_source:
            print("      " + kernel.source.replace("\n", "\n      "))
    return matched


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--codegen",
        choices=["cpp", "triton", "eager"],
        default=None,
        help="backend (default: C++ on CPU, Triton on CUDA)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per measurement")
    parser.add_argument("--show-source", action="store_true", help="print generated kernel sources")
    options = parser.parse_args()
    if options.device == "auto":
        options.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(options.device)
    print(f"torch {torch.__version__}, device {device}, codegen {options.codegen or 'by device'}")
    if options.codegen == "triton" and device.type == "cpu":
        print("(Triton kernels run under Triton's interpreter on CPU: check results, not timings)")

    torch.manual_seed(0)
    x, b = torch.randn(64, 128, device=device), torch.randn(128, device=device)
    ok = run_case(
        "lambda x, b: softmax(gelu(x + b), -1)",
        lambda x, b: torch.softmax(F.gelu(x + b), -1),
        (x, b),
        options,
    )
    model = MLP().to(device).eval()
    with torch.no_grad():  # inference: backward graphs are not wired into compile() yet
        ok &= run_case("MLP: Linear -> GELU -> Linear -> softmax", model, (x,), options)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
