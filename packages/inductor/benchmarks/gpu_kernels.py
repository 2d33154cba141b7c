"""K1-K9 kernel workloads (perf.md, bf16 H200 sizes): torchstrata vs eager vs torch.compile.

Every workload is a plain torch function compiled through the real pipeline
(``torchstrata.runtime.compile``: capture, AOT, decomposition, inductor), checked against
eager (float64 reference for bf16, via ``assert_close_to_eager``) and timed with
``triton.testing.do_bench`` (median, L2 flushed) next to eager and ``torch.compile``. A
copy ceiling (``dst.copy_(src)``, 1 GiB) is measured in the same run. Prints a table
(GB/s of minimal traffic, % of copy, speedup vs eager, torch.compile time / ours) and
writes ``$OUT/gpu_kernels.json`` when ``OUT`` is set. A deadline (default 330 s) skips
the remaining workloads so the run stays under six minutes including compiles.

    python packages/inductor/benchmarks/gpu_kernels.py [--only K3,K7] [--deadline 330]
    python packages/inductor/benchmarks/gpu_kernels.py --odd --dtype float16   # odd shapes
    TORCHSTRATA_FLAT_INDICES=0 python packages/inductor/benchmarks/gpu_kernels.py --inductor-env
    python packages/inductor/benchmarks/gpu_kernels.py --device cpu --small   # smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import torchstrata.runtime as ts
from torchstrata.core import CompileOptions, InductorOptions, assert_close_to_eager


# ---------------------------------------------------------------- workloads (plain torch)
def bias_gelu(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def bias_gelu_mul(x, bias, y):
    return F.gelu(x + bias, approximate="tanh") * y


def swiglu(a, b):
    return F.silu(a) * b


def softmax_fp32(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def rms_norm(x, weight):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return weight * h.to(x.dtype)


def layer_norm(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def resid_layer_norm(x, r, weight, bias):
    """K6 without dropout (random streams differ from eager): returns (h, y)."""
    h = x + r
    return h, F.layer_norm(h, (h.shape[-1],), weight, bias, 1e-5)


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


def cross_entropy_explicit(logits, target):
    """Cross-entropy as logsumexp minus the picked logit (a where over iota, no gather)."""
    x = logits.float()
    peak = x.amax(-1, keepdim=True)
    lse = (x - peak).exp().sum(-1).log() + peak.squeeze(-1)
    idx = torch.arange(x.shape[-1], device=x.device)
    picked = torch.where(idx[None, :] == target[:, None], x, 0.0).sum(-1)
    return (lse - picked).mean()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def layer_norm_weight_only(x, weight):
    return F.layer_norm(x, (x.shape[-1],), weight, None, 1e-5)


#: odd shapes for the norms and softmax (``--odd``): rows and lengths that are not powers
#: of two, a row shorter than a warp's worth of vector loads, a vocabulary-wide row
ODD_SHAPES = ((16383, 4095), (4097, 16385), (32768, 771), (2048, 50257), (100003, 96))


def odd_workloads(small: bool, add: Callable[..., None], rn: Callable[..., Any]) -> None:
    """LayerNorm (with and without bias), RMSNorm, softmax and a bias GELU at
    ``ODD_SHAPES``; RoPE over an odd sequence and head size."""
    b, h, t, d = (4, 12, 1023, 96) if not small else (1, 3, 17, 12)
    add(
        f"odd K8 [{b},{h},{t},{d}]",
        rope,
        lambda: (rn(b, h, t, d), rn(b, h, t, d), rn(t, d), rn(t, d)),
    )
    for m, n in ODD_SHAPES if not small else ((63, 255), (7, 1001)):
        add(f"odd K1 [{m},{n}]", bias_gelu, lambda a=m, b=n: (rn(a, b), rn(b)))
        add(f"odd K5 [{m},{n}]", layer_norm, lambda a=m, b=n: (rn(a, b), rn(b), rn(b)))
        add(f"odd K5 w [{m},{n}]", layer_norm_weight_only, lambda a=m, b=n: (rn(a, b), rn(b)))
        add(f"odd K4 [{m},{n}]", rms_norm, lambda a=m, b=n: (rn(a, b), rn(b)))
        add(f"odd K3 [{m},{n}]", softmax_fp32, lambda a=m, b=n: (rn(a, b),))
        add(f"odd K5/train [{m},{n}]", layer_norm, lambda a=m, b=n: (rn(a, b), rn(b), rn(b)), True)


def workloads(
    small: bool, device: str, dt: torch.dtype = torch.bfloat16, odd: bool = False
) -> list[dict[str, Any]]:
    """(id, description, fn, make_inputs, train) for every row of the table; with ``odd``,
    the norms and softmax at ``ODD_SHAPES`` instead."""
    g = torch.Generator(device=device)

    def rn(*shape, dtype=dt):
        return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    def s(big: int, little: int) -> int:
        return little if small else big

    m, n = s(16384, 64), s(4096, 256)
    rows: list[dict[str, Any]] = []

    def add(name, fn, make, train=False, note="", seed="random"):
        rows.append(
            {"id": name, "fn": fn, "make": make, "train": train, "note": note, "seed": seed}
        )

    if odd:
        odd_workloads(small, add, rn)
        rows.sort(key=lambda row: row["train"])
        return rows

    add("K1", bias_gelu, lambda: (rn(m, n), rn(n)))
    add("K1/mul", bias_gelu_mul, lambda: (rn(m, n), rn(n), rn(m, n)))
    n2 = s(14336, 384)
    add("K2", swiglu, lambda: (rn(m, n2), rn(m, n2)))
    add("K2/train", swiglu, lambda: (rn(m, n2), rn(m, n2)), train=True)
    total = s(2**26, 2**14)
    for length in (1024, 4096, 16384, 65536, 262144) if not small else (256, 4096):
        add(f"K3/N={length}", softmax_fp32, lambda length=length: (rn(total // length, length),))
    for mm_, nn_ in ((16384, 4096), (4096, 16384)) if not small else ((64, 256),):
        add(f"K4 [{mm_},{nn_}]", rms_norm, lambda a=mm_, b=nn_: (rn(a, b), rn(b)))
        add(f"K5 [{mm_},{nn_}]", layer_norm, lambda a=mm_, b=nn_: (rn(a, b), rn(b), rn(b)))
    add("K4/train", rms_norm, lambda: (rn(m, n), rn(n)), train=True)
    add("K5/train", layer_norm, lambda: (rn(m, n), rn(n), rn(n)), train=True)
    add("K6 (no dropout)", resid_layer_norm, lambda: (rn(m, n), rn(m, n), rn(n), rn(n)))
    for rows_, vocab in ((8192, 32000), (4096, 128256)) if not small else ((64, 1000),):

        def make_ce(a=rows_, v=vocab):
            return rn(a, v), torch.randint(0, v, (a,), generator=g, device=device)

        add(f"K7 F.ce [{rows_},{vocab}]", cross_entropy, make_ce)
        add(f"K7 explicit [{rows_},{vocab}]", cross_entropy_explicit, make_ce)

    def make_ce_train():
        rows_, vocab = s(8192, 64), s(32000, 1000)
        return rn(rows_, vocab), torch.randint(0, vocab, (rows_,), generator=g, device=device)

    add("K7/train F.ce", cross_entropy, make_ce_train, train=True)
    add("K7/train explicit", cross_entropy_explicit, make_ce_train, train=True)
    # the loss seeded as loss.backward() seeds it
    add("K7/train F.ce seed 1", cross_entropy, make_ce_train, train=True, seed="ones")
    add("K7/train expl. seed 1", cross_entropy_explicit, make_ce_train, train=True, seed="ones")
    b, h, t, d = (8, 32, 2048, 128) if not small else (1, 2, 16, 32)
    add("K8", rope, lambda: (rn(b, h, t, d), rn(b, h, t, d), rn(t, d), rn(t, d)))
    add("K9", rms_norm, lambda: (rn(s(1048576, 4096), s(128, 64)), rn(s(128, 64))))
    rows.sort(key=lambda row: row["train"])  # forward rows first: the deadline cuts training
    return rows


# ---------------------------------------------------------------- measurement
def timer(device: str) -> Callable[[Callable[[], Any]], float]:
    """Median milliseconds of ``fn()``: do_bench on CUDA, a perf_counter loop on CPU."""
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=10, rep=50, return_mode="median")

    def cpu(fn):
        fn()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    return cpu


def as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


def nbytes(values) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def prepare(fn, inputs, train: bool, grad_dtype: torch.dtype = torch.bfloat16, seed="random"):
    """(runner: compiled fn -> callable running it [+ backward], minimal bytes).

    A training step's minimal bytes are two passes': the forward reads the inputs and
    writes the outputs; the backward, whose output gradients exist only after the forward,
    reads them and the floating inputs again and writes the inputs' gradients.
    Output gradients are seeded, rounded to ``grad_dtype``, so a float64 reference run
    sees the same values. With ``seed="ones"`` they are 1, as ``loss.backward()`` seeds a
    loss: a step that knows it may read its inputs once, so the minimal bytes are the
    forward's and the gradients' writes."""
    float_inputs = [x for x in inputs if x.is_floating_point()]
    if not train:
        outputs = as_tuple(fn(*inputs))
        return (lambda f: lambda: as_tuple(f(*inputs))), nbytes(inputs) + nbytes(outputs)
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    outputs = as_tuple(fn(*leaves))
    gen = torch.Generator(device=outputs[0].device).manual_seed(0)
    grads = [
        torch.randn(o.shape, generator=gen, device=o.device).to(grad_dtype).to(o.dtype)
        if seed == "random"
        else torch.ones_like(o)
        for o in outputs
    ]
    forward = nbytes(inputs) + nbytes(outputs)
    traffic = forward + nbytes(grads) + 2 * nbytes(float_inputs)
    if seed == "ones":
        traffic = forward + nbytes(float_inputs)

    def runner(f):
        def run():
            for x in leaves:
                x.grad = None
            outs = as_tuple(f(*leaves))
            torch.autograd.backward(outs, grads)
            return outs + tuple(x.grad for x in leaves if x.is_floating_point())

        return run

    return runner, traffic


def check(fn, compiled, inputs, train: bool, seed="random") -> str:
    """ "ok", or the failure message: ours vs eager, low precision against a float64 run."""
    runner, _ = prepare(fn, inputs, train, seed=seed)
    got = runner(compiled)()
    want = runner(fn)()
    doubled = [x.double() if x.is_floating_point() else x for x in inputs]
    ref_runner, _ = prepare(fn, doubled, train, seed=seed)
    reference = ref_runner(fn)()
    try:
        assert_close_to_eager(list(got), list(want), reference=list(reference))
    except AssertionError as error:
        return "FAIL " + str(error).splitlines()[0][:100]
    return "ok"


def copy_ceiling(device: str, bench) -> float:
    src = torch.empty(2**29 if device == "cuda" else 2**22, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--small", action="store_true", help="tiny shapes (smoke test)")
    parser.add_argument("--only", default="", help="comma-separated id prefixes")
    parser.add_argument("--deadline", type=float, default=330.0, help="seconds")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    parser.add_argument("--codegen", default=None, help="triton / cpp (default: by device)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--odd", action="store_true", help="norms and softmax at odd shapes")
    parser.add_argument(
        "--inductor-env",
        action="store_true",
        help="our compiles take InductorOptions.from_env() (TORCHSTRATA_FLAT_INDICES=0...)",
    )
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    start = time.perf_counter()
    device = args.device
    bench = timer(device)
    copy_gbs = copy_ceiling(device, bench)
    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    if device == "cuda":
        versions["device"] = torch.cuda.get_device_name()
    print(f"{versions}  copy ceiling {copy_gbs:.0f} GB/s")
    header = f"{'workload':<26}{'GB/s':>7}{'%copy':>7}{'eager':>8}{'vs eager':>9}{'vs TC':>7}"
    print(header + "  ms(ours/eager/TC)       compile s  check")
    results = []
    options = CompileOptions(inductor=InductorOptions.from_env()) if args.inductor_env else None
    if options is not None:
        print(f"ours with {options.inductor}")
    wanted = [w for w in args.only.split(",") if w]
    for row in workloads(args.small, device, dtype, args.odd):
        if wanted and not any(row["id"].startswith(w) for w in wanted):
            continue
        if time.perf_counter() - start > args.deadline:
            print(f"{row['id']:<26} skipped (deadline)")
            results.append({"id": row["id"], "skipped": "deadline"})
            continue
        try:
            results.append(
                run_row(
                    row, device, bench, copy_gbs, not args.no_inductor, args.codegen, dtype, options
                )
            )
        except Exception as error:  # noqa: BLE001 - one bad row must not end the run
            traceback.print_exc(limit=3)
            print(f"{row['id']:<26} ERROR {type(error).__name__}: {str(error)[:120]}")
            results.append({"id": row["id"], "error": f"{type(error).__name__}: {error}"[:500]})
        torch.cuda.empty_cache() if device == "cuda" else None
    summarize(results)
    report = {
        "versions": versions,
        "copy_gbs": copy_gbs,
        "rows": results,
        "seconds": time.perf_counter() - start,
    }
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_kernels.json"), "w") as handle:
            json.dump(report, handle, indent=1)
    print(f"total {report['seconds']:.0f} s")
    return 0


def run_row(
    row,
    device,
    bench,
    copy_gbs,
    with_inductor,
    codegen=None,
    dtype=torch.bfloat16,
    options: CompileOptions | None = None,
) -> dict[str, Any]:
    fn, train = row["fn"], row["train"]
    inputs = row["make"]()
    compiled = ts.compile(fn, fullgraph=True, codegen=codegen, options=options)
    seed = row.get("seed", "random")
    runner, traffic = prepare(fn, inputs, train, grad_dtype=dtype, seed=seed)
    t0 = time.perf_counter()
    runner(compiled)()
    if device == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    status = check(fn, compiled, inputs, train, seed)
    ours = bench(runner(compiled))
    eager = bench(runner(fn))
    inductor = math.nan
    if with_inductor:
        torch._dynamo.reset()
        tc = torch.compile(fn)
        runner(tc)()
        inductor = bench(runner(tc))
    gbs = traffic / ours / 1e6
    entry = {
        "id": row["id"],
        "train": train,
        "bytes": traffic,
        "ours_ms": ours,
        "eager_ms": eager,
        "inductor_ms": inductor,
        "gbs": gbs,
        "pct_copy": 100 * gbs / copy_gbs,
        "speedup_vs_eager": eager / ours,
        "ratio_vs_inductor": inductor / ours,
        "compile_s": compile_s,
        "check": status,
    }
    print(
        f"{row['id']:<26}{gbs:>7.0f}{entry['pct_copy']:>6.0f}%{traffic / eager / 1e6:>8.0f}"
        f"{entry['speedup_vs_eager']:>8.2f}x{entry['ratio_vs_inductor']:>6.2f}x"
        f"  {ours:.3f}/{eager:.3f}/{inductor:.3f}  {compile_s:>9.1f}  {status}",
        flush=True,
    )
    return entry


def summarize(results: list[dict[str, Any]]) -> None:
    timed = [r for r in results if "ours_ms" in r and r["check"] == "ok"]
    if not timed:
        return
    eager = [r["speedup_vs_eager"] for r in timed]
    tc = [r["ratio_vs_inductor"] for r in timed if not math.isnan(r["ratio_vs_inductor"])]
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))  # noqa: E731
    line = f"geomean vs eager {geo(eager):.2f}x over {len(timed)} passing rows"
    if tc:
        line += f"; vs torch.compile {geo(tc):.2f}x (worst {min(tc):.2f}x)"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
