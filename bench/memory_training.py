"""Peak memory of one transformer-block training step (forward + backward): eager
PyTorch against ``torchstrata.runtime.compile``. Prints numbers; asserts nothing.

    python -m bench.memory_training --device cuda    # bf16, torch.cuda.max_memory_allocated
    python -m bench.memory_training --device cpu     # fp32, saved bytes and peak RSS

Per variant, after two warm-up steps (which compile), one measured step:

* CUDA: ``max_memory_allocated`` above the memory allocated before the step (weights,
  input, cotangent), and what is still allocated after the forward (saved activations +
  output).
* CPU: the peak resident set (``VmHWM`` after resetting it through
  ``/proc/self/clear_refs``) above the resident set before the step, likewise after the
  forward. glibc's mmap threshold is pinned (``mallopt``) so that freed blocks go back to
  the OS and RSS follows live memory; it stays an estimate.
* Both: bytes saved for the backward, eager autograd's against our partitioned graph's
  (``torchstrata.autograd.saved_activation_report`` on the captured graph).

Target: torchstrata ≤ eager.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as rt
from torchstrata.autograd import saved_activation_report
from torchstrata.core import random_inputs

MIB = 1024 * 1024
SIZES = {  # batch, sequence, model dim, heads
    "cuda": (8, 1024, 2048, 16),
    "cpu": (4, 256, 256, 4),
}


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


class Block(nn.Module):
    """Pre-norm transformer block: LayerNorm -> causal SDPA attention, RMSNorm -> SwiGLU
    MLP (hidden 8/3 · dim, rounded to 64), both residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        hidden = (8 * dim // 3 + 63) // 64 * 64
        self.heads = heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.rms = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.ln(x)).split(dim, -1)
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, seq, dim))
        y = self.rms(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


# ---------------------------------------------------------------------------- meters


class CudaMeter:
    """Bytes from the CUDA caching allocator's statistics."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.base = torch.cuda.memory_allocated(self.device)

    def now(self) -> int:
        torch.cuda.synchronize(self.device)
        return torch.cuda.memory_allocated(self.device) - self.base

    def peak(self) -> int:
        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device) - self.base


def _proc_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _pin_malloc() -> Callable[[], None]:
    """Make glibc return freed blocks of 64 KiB and more to the OS (``mallopt``); the
    returned function trims the heap. No-ops where glibc is not there."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD (also stops its dynamic growth)
        libc.mallopt(-1, 64 * 1024)  # M_TRIM_THRESHOLD
        return lambda: libc.malloc_trim(0)
    except (OSError, AttributeError):
        return lambda: None


class RssMeter:
    """Resident-set bytes from ``/proc/self/status`` (Linux); peak via ``VmHWM``."""

    def __init__(self) -> None:
        self.trim = _pin_malloc()
        self.resettable = True

    def start(self) -> None:
        self.trim()
        try:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        except OSError:
            self.resettable = False
        self.base = _proc_status("VmRSS")

    def now(self) -> int:
        return _proc_status("VmRSS") - self.base

    def peak(self) -> int:
        return _proc_status("VmHWM") - self.base if self.resettable else -1


# ---------------------------------------------------------------------------- measuring


def _clear_grads(model: nn.Module, x: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    x.grad = None


def measure_step(
    fn: Callable[[torch.Tensor], torch.Tensor],
    model: nn.Module,
    x: torch.Tensor,
    cotangent: torch.Tensor,
    meter: Any,
    warmup: int = 2,
) -> dict[str, int]:
    """Peak and after-forward bytes of one ``fn(x).backward(cotangent)`` step."""
    for _ in range(warmup):
        fn(x).backward(cotangent)
        _clear_grads(model, x)
    gc.collect()
    meter.start()
    out = fn(x)
    after_forward = meter.now()
    out.backward(cotangent)
    del out
    peak = meter.peak()
    after_step = meter.now()
    _clear_grads(model, x)
    return {"peak": peak, "after_forward": after_forward, "after_step": after_step}


def saved_report(compiled: Any, x: torch.Tensor) -> dict[str, int] | None:
    """Saved-for-backward bytes of the captured graph, eager's and ours (None when the
    step did not compile to one graph)."""
    report = rt.explain(compiled, x)
    if report.graph_count != 1:
        return None
    graph = report.graphs[0]
    saved = saved_activation_report(graph, random_inputs(graph))
    return {
        "eager_saved": saved.eager_bytes,
        "ours_saved": saved.compiled_bytes,
        "eager_saved_activations": saved.eager_activation_bytes,
        "ours_saved_activations": saved.compiled_activation_bytes,
        "eager_saved_tensors": saved.eager_tensors,
        "ours_saved_tensors": saved.compiled_tensors,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure eager and torchstrata; returns everything printed."""
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    batch, seq, dim, heads = args.size or SIZES[device.type]
    torch.manual_seed(0)
    model = Block(dim, heads).to(device=device, dtype=dtype)
    ours_model = copy.deepcopy(model)
    x = torch.randn(batch, seq, dim, device=device, dtype=dtype, requires_grad=True)
    cotangent = torch.randn(batch, seq, dim, device=device, dtype=dtype)
    meter = CudaMeter(device) if device.type == "cuda" else RssMeter()
    compiled = rt.compile(ours_model, codegen=args.codegen)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", rt.TorchstrataFallbackWarning)
        results: dict[str, Any] = {
            "device": str(device),
            "dtype": args.dtype,
            "size": {"batch": batch, "seq": seq, "dim": dim, "heads": heads},
            "meter": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "RSS",
            "eager": measure_step(model, model, x, cotangent, meter),
            "torchstrata": measure_step(compiled, ours_model, x, cotangent, meter),
        }
        report = rt.explain(compiled, x)
        results["graphs"] = report.graph_count
        results["graph_breaks"] = report.graph_break_count
        results["saved"] = saved_report(compiled, x) if not args.no_saved_report else None
    results["fallback_warnings"] = [str(w.message) for w in caught]
    return results


def _mib(n: int | None) -> str:
    return "n/a" if n is None or n < 0 else f"{n / MIB:10.1f}"


def print_table(results: dict[str, Any]) -> None:
    """The results as a small table on stdout."""
    size = results["size"]
    print(
        f"transformer block training step on {results['device']} ({results['dtype']}), "
        f"B={size['batch']} T={size['seq']} D={size['dim']} H={size['heads']}; "
        f"meter: {results['meter']}; graphs={results['graphs']} "
        f"breaks={results['graph_breaks']}"
    )
    print(f"{'MiB':<14}{'peak':>10}{'after fwd':>11}{'after step':>11}")
    for name in ("eager", "torchstrata"):
        r = results[name]
        print(
            f"{name:<14}{_mib(r['peak'])}{_mib(r['after_forward']):>11}{_mib(r['after_step']):>11}"
        )
    saved = results.get("saved")
    if saved:
        print(
            f"saved for backward: eager {_mib(saved['eager_saved']).strip()} MiB in "
            f"{saved['eager_saved_tensors']} tensors "
            f"(activations {_mib(saved['eager_saved_activations']).strip()}), torchstrata "
            f"{_mib(saved['ours_saved']).strip()} MiB in {saved['ours_saved_tensors']} "
            f"(activations {_mib(saved['ours_saved_activations']).strip()})"
        )
    eager, ours = results["eager"]["peak"], results["torchstrata"]["peak"]
    if eager > 0 and ours >= 0:
        verdict = "meets" if ours <= eager else "misses"
        print(f"peak ratio torchstrata/eager = {ours / eager:.3f} ({verdict} target <= 1)")
    for message in results["fallback_warnings"]:
        print(f"fallback: {message}")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument(
        "--size", type=int, nargs=4, metavar=("B", "T", "D", "H"), help="batch seq dim heads"
    )
    parser.add_argument("--codegen", default=None, choices=["cpp", "triton", "eager"])
    parser.add_argument("--no-saved-report", action="store_true", help="skip the saved bytes")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    results = run(args)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
