"""Dynamic vs static shapes: compiles, first-call time over many sizes, and steady per-call
time, side by side in one run (issue 33, decision 0213).

Workloads on the CPU (fp32, no gradients):

* ``softmax_gelu``: ``softmax(gelu(x @ w), -1) * 2``, ``w [256, 256]``, 16 row counts of
  ``x`` (17 to 1000);
* ``block``: the bench GPT's pre-LN transformer block (width 64, 4 heads, batch 1)
  over 32 sequence lengths (9 to 133);
* ``block_train``: that block's training step over the same 32 lengths: forward, a loss
  (the mean square of its output), backward; the loss and every parameter's gradient
  are checked against eager at each first call (decision 0310);
* ``decode``: a KV-cache decode loop, one step per call: the new key and value
  concatenated to caches of 16 to 47 rows (2 heads of 32), attention of one query;
* ``attention_widths``: scores ``q @ k^T / math.sqrt(q.shape[-1])``, softmax, LayerNorm
  (issue 33's program) over 16 (length, width) pairs, the width 16 to 64: the scale is a
  float of the width (decision 0500).

With ``--device cuda`` (bf16 unless ``--dtype``): the K-row kernels of the bench suite
(``bench/README.md``) over 8 row counts of ``[M, 4096]`` (2049 to 16384, odd ones
included): ``K1`` bias+GELU, ``K3`` softmax in fp32, ``K4`` RMSNorm, ``K5`` LayerNorm; and
the transformer ``block`` over 32 sequence lengths (and its training step,
``block_train``, in fp32), and the ``decode`` step over its 32 cache lengths (fp32). Issue 33 asks symbolic kernels to run
at least 0.9x the static ones there: steady times are taken per size on the GPU
(``triton.testing.do_bench``, median, L2 flushed), and the row also gives the worst size's
ratio to static. One more contender there, a static compile per size with a cache of its
own (``torchstrata static, tuned per size``), shows what sharing tuned configurations
within a bucket of rows costs. ``--mode reduce-overhead`` compiles every compiler's contender with CUDA
graphs (one graph per size).

Contenders: eager; torchstrata ``dynamic=None`` (static for the first size, one symbolic
entry from the second, lowered per size); torchstrata ``dynamic=False`` with the
recompile limit raised to the number of sizes (one static compile per size, as before
issue 33); ``torch.compile(dynamic=True)`` (Inductor, one symbolic graph). For each:
the entries (graphs) it compiled, the total time of the first call at every size
(compiles included, caches cold; wall clock, since compilers run in subprocesses), and the steady
per-call time: the median over rounds of one pass over all sizes, divided by the
number of sizes, contenders in rotating order; the median first call of a new size from
the third on (``new size ms``: what a new size costs once the entry is symbolic), and
``size_lowering_stats()`` (symbolic lowerings / reuses / per size: on a GPU the Triton
kernels lower once per bucket since decision 0400). Every first call is checked against
eager; a contender that warns it fell back to eager says so in its row. Each compiler
first compiles a small function once (its one-time start is not the first workload's).

    python -m bench.dynamic_sizes --clock cpu [--only block_train]
    python -m bench.dynamic_sizes --device cuda --only block_train --contenders eager,dynamic,static --budget 60
    python -m bench.dynamic_sizes --clock cpu --only decode,softmax_gelu --dynamo
    python -m bench.dynamic_sizes --device cuda [--only K1,K3,K4,K5,block] [--mode reduce-overhead]

``--dynamo`` adds ``torch.compile(fn, backend="torchstrata")`` (Dynamo's automatic
dynamic; its graph with symbolic sizes lowered once for many sizes, decision 0455) and the
same with the compile option ``symbolic_lowering`` off (lowered per size, as before 0455).

``--contenders`` picks contenders by short name (``eager``, ``dynamic``, ``per-size``,
``static``, ``static-tuned``, ``compile``, ``dynamo``, ``dynamo-per-size``); ``--sizes N``
keeps N of each workload's sizes, spread evenly; ``--budget S`` skips each contender's
first calls that would start S seconds after the run's start (a row says so; the steady
rounds of those that compiled still run). Each contender's first-calls row prints as its
first calls end, each workload's steady rows after its rounds, so a run stopped by a time
limit keeps what finished.

``--clock cpu`` times the steady calls by this process's CPU time (steadier on a
machine whose cores other processes share; one torch thread).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.nn.functional as F

from bench.compile_scaling import _commit, _load
from bench.compilers import fallback_note
from bench.dynamic_contenders import (
    DYNAMO_BACKEND,
    DYNAMO_PER_SIZE,
    EAGER,
    EXACT_TUNING,
    INDUCTOR,
    PER_SIZE_LOWERING,
    SHORT_NAMES,
    STATIC,
    Budget,
    default_contenders,
    is_torch_compile,
    select_contenders,
)
from bench.workloads.kernels import bias_gelu, layer_norm, rms_norm, softmax_fp32
from bench.workloads.nets.gpt import Block, GPTConfig


class PerSizeCompiles:
    """``fn`` compiled static once per shape of its tensor arguments, each compile with
    its own cache directory under ``root`` (nothing tuned at one size serves another)."""

    def __init__(self, fn: Callable[..., Any], root: str, mode: str | None) -> None:
        self.fn, self.root, self.mode = fn, root, mode
        #: shapes -> their compile (``cache`` as a compiled function's, for the entries)
        self.cache: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        compiled = self.cache.get(key)
        if compiled is None:
            import torchstrata.runtime as tsr

            options = {"cache_dir": os.path.join(self.root, str(len(self.cache)))}
            compiled = tsr.compile(self.fn, dynamic=False, mode=self.mode, options=options)
            self.cache[key] = compiled
        return compiled(*args)


@attrs.frozen
class Workload:
    """A function and the argument tuples of each size it is called with; ``train``: the
    function is a module returning a loss, and each call is a training step (the loss
    and the parameters' gradients are what is compared)."""

    name: str
    fn: Callable[..., Any]
    calls: Sequence[tuple[Any, ...]]
    sizes: str
    train: bool = False


class BlockLoss(torch.nn.Module):
    """The bench GPT block and a loss: the mean square of its output."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The loss of ``x [B, T, C]``."""
        return self.block(x).square().mean()


def training_step(fn: Callable[..., Any], module: torch.nn.Module) -> Callable[..., Any]:
    """A call of ``fn`` (``module`` or its compile) as a training step: the loss, then
    backward; returns the loss and a copy of each parameter's gradient."""
    params = [p for p in module.parameters() if p.requires_grad]

    def step(*args: Any) -> tuple[torch.Tensor, ...]:
        for p in params:
            p.grad = None
        loss = fn(*args)
        loss.backward()
        return (loss.detach(), *(p.grad.clone() for p in params if p.grad is not None))

    return step


def softmax_gelu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The issue's program."""
    return torch.softmax(F.gelu(x @ w), -1) * 2


def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention scores scaled by the square root of the width (a float of a size)."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return F.layer_norm(s.softmax(-1), (s.shape[-1],), eps=1e-5)


#: (length, width) of ``attention_widths``' calls
ATTENTION_SIZES = (
    (9, 16), (17, 16), (33, 24), (12, 32), (25, 40), (64, 48), (40, 64), (21, 24),
    (50, 32), (13, 56), (30, 16), (45, 40), (11, 64), (60, 24), (27, 48), (36, 32),
)  # fmt: skip


def decode_step(k_cache, v_cache, q, k, v):
    """One decode step: append this token's key and value, attend with its query."""
    keys = torch.cat([k_cache, k], dim=1)
    values = torch.cat([v_cache, v], dim=1)
    weights = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(q.shape[-1]), -1)
    return weights @ values, keys, values


#: Row counts of the K-row workloads on the GPU (``[M, 4096]``): the H200 size and
#: others around it, odd ones included (masked rows).
K_ROWS = (16384, 8191, 12288, 4097, 16000, 6001, 10240, 2049)
K_WIDTH = 4096


def k_rows(quick: bool, dtype: torch.dtype) -> list[Workload]:
    """The K-row kernels on the GPU over :data:`K_ROWS` row counts of ``K_WIDTH``."""
    rows, width = ((64, 127, 200), 256) if quick else (K_ROWS, K_WIDTH)
    weight = torch.randn(width, device="cuda", dtype=dtype)
    bias = torch.randn(width, device="cuda", dtype=dtype)

    def calls(*extra: torch.Tensor) -> list[tuple[Any, ...]]:
        return [(torch.randn(m, width, device="cuda", dtype=dtype), *extra) for m in rows]

    sizes = f"{len(rows)} row counts {min(rows)}-{max(rows)} of {width}"
    return [
        Workload("K1", bias_gelu, calls(bias), sizes),
        Workload("K3", softmax_fp32, calls(), sizes),
        Workload("K4", rms_norm, calls(weight), sizes),
        Workload("K5", layer_norm, calls(weight, bias), sizes),
    ]


def workloads(quick: bool, device: str = "cpu", dtype: torch.dtype | None = None) -> list[Workload]:
    """The workloads of ``device`` (``quick``: a few small sizes, to check the harness)."""
    torch.manual_seed(0)
    if device == "cuda":
        dtype = dtype or torch.bfloat16
        lengths = range(9, 20, 4) if quick else range(9, 134, 4)
        block = Block(GPTConfig(1, 4, 64, 256, 256)).eval().requires_grad_(False).cuda()
        sequences = [(torch.randn(1, t, 64, device="cuda"),) for t in lengths]
        lengths_text = f"{len(lengths)} lengths {min(lengths)}-{max(lengths)}"
        trained = BlockLoss(Block(GPTConfig(1, 4, 64, 256, 256))).cuda()
        steps = range(16, 19) if quick else range(16, 48)
        cache = [torch.randn(2, 2, t, 32, device="cuda") for t in steps]
        decode = [(k, v, *torch.randn(3, 2, 1, 32, device="cuda")) for k, v in cache]
        return [
            *k_rows(quick, dtype),
            Workload("block", block, sequences, lengths_text),
            Workload("block_train", trained, sequences, lengths_text, train=True),
            Workload("decode", decode_step, decode, f"{len(steps)} cache lengths 16-47"),
        ]
    w = torch.randn(256, 256)
    rows = (17, 64, 255, 1000, 33, 100, 129, 500, 48, 77, 200, 301, 640, 23, 999, 400)
    lengths = range(9, 134, 4)
    steps = range(16, 48)
    attention = ATTENTION_SIZES
    if quick:
        rows, lengths, steps = rows[:3], range(9, 20, 4), range(16, 19)
        attention = attention[:3]
    block = Block(GPTConfig(1, 4, 64, 256, 256)).eval().requires_grad_(False)
    return [
        Workload("softmax_gelu", softmax_gelu, [(torch.randn(n, 256), w) for n in rows],
                 f"{len(rows)} row counts {min(rows)}-{max(rows)}"),
        Workload("block", block, [(torch.randn(1, t, 64),) for t in lengths],
                 f"{len(lengths)} lengths {min(lengths)}-{max(lengths)}"),
        Workload("block_train", BlockLoss(Block(GPTConfig(1, 4, 64, 256, 256))),
                 [(torch.randn(1, t, 64),) for t in lengths],
                 f"{len(lengths)} lengths {min(lengths)}-{max(lengths)}", train=True),
        Workload(
            "decode",
            decode_step,
            [
                (torch.randn(2, t, 32), torch.randn(2, t, 32), *torch.randn(3, 2, 1, 32))
                for t in steps
            ],
            f"{len(steps)} cache lengths {min(steps)}-{max(steps)}",
        ),
        Workload(
            "attention_widths",
            scaled_scores,
            [(torch.randn(2, t, d), torch.randn(2, t, d)) for t, d in attention],
            f"{len(attention)} (length, width) pairs, widths 16-64",
        ),
    ]  # fmt: skip


def _compiled(
    name: str, fn: Callable[..., Any], sizes: int, cache_dir: str, mode: str | None = None
) -> Any:
    if name == EAGER:
        return fn
    if name == INDUCTOR:
        return torch.compile(fn, dynamic=True, mode=mode)
    if name in (DYNAMO_BACKEND, DYNAMO_PER_SIZE):
        if mode is not None:  # torch.compile takes mode= or options=, not both
            raise ValueError("--dynamo takes no --mode")
        off = {"symbolic_lowering": False} if name == DYNAMO_PER_SIZE else {}
        return torch.compile(fn, backend="torchstrata", options={"cache_dir": cache_dir, **off})
    if name == EXACT_TUNING:
        return PerSizeCompiles(fn, cache_dir, mode)
    import torchstrata.runtime as tsr

    options: dict[str, Any] = {"cache_dir": cache_dir}
    if name == STATIC:
        options["recompile_limit"] = sizes
        return tsr.compile(fn, dynamic=False, mode=mode, options=options)
    if name == PER_SIZE_LOWERING:
        options["symbolic_lowering"] = False
    return tsr.compile(fn, mode=mode, options=options)


def _entries(name: str, compiled: Any) -> str:
    if name == EAGER:
        return "-"
    if is_torch_compile(name):
        from torch._dynamo.utils import counters

        return str(counters["stats"]["unique_graphs"])
    forward = getattr(compiled, "compiled_forward", compiled)
    return str(len(forward.cache))


def _lowerings(stats: dict[str, int]) -> str:
    """``size_lowering_stats()`` in a table cell: symbolic lowerings, reuses, per size,
    and the first fallback reason (decision 0400)."""
    text = "/".join(str(stats.get(key, 0)) for key in ("symbolic", "reused", "per_size"))
    why = next((key for key in stats if key.startswith("fallback")), None)
    return text if why is None else f"{text} ({why[:60]})"


def _same(got: Any, want: Any, rtol: float = 1e-4) -> None:
    if isinstance(want, tuple):
        for a, b in zip(got, want, strict=True):
            _same(a, b, rtol)
    elif want.dtype in (torch.bfloat16, torch.float16):  # one rounding apart
        torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    else:
        torch.testing.assert_close(got, want, rtol=rtol, atol=1e-4)


def first_calls(
    name: str, workload: Workload, mode: str | None = None
) -> tuple[Any, dict[str, str | float]]:
    """Compile afresh and call once at every size (checked against eager): the callable
    and its row (entries, first-call seconds, status)."""
    import torchstrata.runtime as tsr

    # cold compiles for both: a fresh kernel cache directory and no compiled-graph cache
    # for torchstrata, Inductor's on-disk caches off (an earlier run would serve them);
    # Dynamo and Inductor imported only for their contenders (1.8 s of imports otherwise)
    inductor_caches_off: Any = contextlib.nullcontext()
    if is_torch_compile(name):
        if name not in (DYNAMO_BACKEND, DYNAMO_PER_SIZE):
            # (not between Dynamo contenders: a reset drops the compiled code of those
            # before, which their steady calls would compile again)
            torch._dynamo.reset()
        from torch._dynamo.utils import counters
        from torch._inductor import config as inductor_config

        counters.clear()
        inductor_caches_off = inductor_config.patch(force_disable_caches=True)
    row: dict[str, str | float] = {}
    with (
        tempfile.TemporaryDirectory() as cache_dir,
        tsr.graph_cache_suspended(),
        inductor_caches_off,
    ):
        compiled = _compiled(name, workload.fn, len(workload.calls), cache_dir, mode)
        call, reference, rtol = compiled, workload.fn, 1e-4
        if workload.train:  # gradients of sums over many rows: float32 roundings apart
            assert isinstance(workload.fn, torch.nn.Module)
            call = training_step(compiled, workload.fn)
            reference, rtol = training_step(workload.fn, workload.fn), 1e-3
        tsr.reset_size_lowering_stats()
        firsts: list[float] = []
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            start = time.perf_counter()
            try:
                for args in workload.calls:
                    begun = time.perf_counter()
                    got = call(*args)
                    if torch.cuda.is_initialized():
                        torch.cuda.synchronize()
                    firsts.append(time.perf_counter() - begun)
                    _same(got, reference(*args), rtol)
                row["status"] = "ok"
            except Exception as error:  # noqa: BLE001 - reported as the row's status
                row["status"] = f"error: {type(error).__name__}: {error}"[:120]
            row["first"] = time.perf_counter() - start
    # a new size's first call once the entry is symbolic (from the third size on)
    row["new"] = statistics.median(firsts[2:]) if len(firsts) > 2 else math.nan
    row["lowerings"] = _lowerings(tsr.size_lowering_stats()) if name != EAGER else "-"
    note = fallback_note(records) if name != EAGER else None
    if note is not None:
        row["status"] = f"falls back to eager: {note}"[:120]
    row["entries"] = _entries(name, compiled)
    return call, row


def warm_up(names: Sequence[str], device: str = "cpu") -> None:
    """Compile and call a small function with each compiler once, so that the first
    workload's first calls do not pay a compiler's one-time start (imports, headers)."""

    def tiny(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2 + 1, -1)

    calls = [(torch.randn(n, 3, device=device),) for n in (5, 6)]
    for name in names:
        first_calls(name, Workload("warm-up", tiny, calls, ""))


def steady(
    live: dict[str, Any], workload: Workload, rounds: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Median seconds per call of each contender over passes through all sizes."""
    times: dict[str, list[float]] = {name: [] for name in live}
    order = list(live)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            fn = live[name]
            start = clock()
            for args in workload.calls:
                fn(*args)
            times[name].append((clock() - start) / len(workload.calls))
    return {name: statistics.median(t) for name, t in times.items()}


def _shape_of(args: tuple[Any, ...]) -> str:
    """The first tensor argument's shape, as the bench's size label (``-`` when none)."""
    tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return "x".join(map(str, tensor.shape)) if tensor is not None else "-"


def steady_per_size(live: dict[str, Any], workload: Workload) -> dict[str, list[float]]:
    """Each contender's GPU time per call at each size (``do_bench`` median, L2 flushed;
    contenders in rotating order from one size to the next)."""
    from triton.testing import do_bench

    times: dict[str, list[float]] = {name: [] for name in live}
    order = list(live)
    for index, args in enumerate(workload.calls):
        for name in order[index % len(order) :] + order[: index % len(order)]:
            fn = live[name]
            milliseconds = do_bench(lambda fn=fn, args=args: fn(*args), warmup=25, rep=100)
            times[name].append(milliseconds * 1e-3)
    return times


FIRST_HEADER = (
    "| workload | sizes | contender | entries | first calls s | new size ms | lowerings "
    "| status | load avg 1/5/15 |"
)
STEADY_HEADER = (
    "| workload | contender | steady us/call | x eager | x static | worst size x static "
    "| status | load avg 1/5/15 |"
)


def _table(header: str) -> None:
    print(f"\n{header}\n|{' --- |' * (header.count('|') - 1)}", flush=True)


def _first_row(workload: Workload, name: str, row: dict[str, str | float]) -> None:
    """A contender's first-calls row, printed as soon as its first calls end."""
    first = f"{row['first']:.2f}" if "first" in row else "-"
    new = row.get("new", math.nan)
    new_text = f"{new * 1e3:.1f}" if isinstance(new, float) and not math.isnan(new) else "-"
    print(
        f"| {workload.name} | {workload.sizes} | {name} | {row.get('entries', '-')} | {first} "
        f"| {new_text} | {row.get('lowerings', '-')} | {row['status']} | {_load()} |",
        flush=True,
    )


def _steady_rows(
    workload: Workload,
    names: Sequence[str],
    result: dict[str, float],
    per_size: dict[str, list[float]],
    status: dict[str, str],
) -> None:
    """The workload's steady rows: per call, against eager and static, the worst size."""
    eager, static = result.get(EAGER), result.get(STATIC)
    load = _load()
    for name in names:
        value = result.get(name)
        per_call = f"{value * 1e6:.1f}" if value else "-"
        vs_eager = f"{eager / value:.2f}x" if eager and value else "-"
        vs_static = f"{static / value:.2f}x" if static and value else "-"
        worst = "-"
        if name in per_size and STATIC in per_size:
            ratios = [s / t for s, t in zip(per_size[STATIC], per_size[name], strict=True)]
            at = min(range(len(ratios)), key=ratios.__getitem__)
            worst = f"{ratios[at]:.2f}x at {_shape_of(workload.calls[at])}"
        print(
            f"| {workload.name} | {name} | {per_call} | {vs_eager} | {vs_static} | {worst} "
            f"| {status[name]} | {load} |",
            flush=True,
        )


def spread(workload: Workload, count: int | None) -> Workload:
    """``workload`` with ``count`` of its sizes, spread evenly over its list (the first and
    the last kept); all of them when ``count`` is ``None`` or not fewer."""
    calls = workload.calls
    if count is None or count >= len(calls):
        return workload
    if count < 2:
        raise ValueError("--sizes takes at least 2")
    picked = [calls[round(i * (len(calls) - 1) / (count - 1))] for i in range(count)]
    return attrs.evolve(workload, calls=picked, sizes=f"{workload.sizes}, {count} of them")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument(
        "--contenders",
        default=None,
        help=f"comma-separated contenders, of: {', '.join(SHORT_NAMES)} (default: eager, "
        "dynamic, per-size, static, static-tuned on the GPU, compile)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds (wall, from the start): a contender's first calls at a workload "
        "starting after them are skipped (a row says so); the steady rounds of those that "
        "compiled still run",
    )
    parser.add_argument(
        "--sizes", type=int, default=None, help="this many of each workload's sizes, spread"
    )
    parser.add_argument("--rounds", type=int, default=7, help="steady passes per contender")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="steady calls by wall time or this process's CPU time",
    )
    parser.add_argument("--quick", action="store_true", help="a few small sizes")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        default=None,
        help="the K rows' dtype on the GPU (default bfloat16)",
    )
    parser.add_argument("--mode", default=None, help="every compiler's mode (reduce-overhead)")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument(
        "--dynamo", action="store_true", help="add the torchstrata Dynamo backend (0455)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print each contender's first-calls row as soon as they end, then each workload's
    steady rows; a contender's turn starting after ``--budget`` prints a skipped row."""
    parser = _parser()
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    cuda = args.device == "cuda"
    names = default_contenders(cuda, args.no_compile, args.dynamo)
    if args.contenders is not None:
        try:
            names = select_contenders(args.contenders)
        except ValueError as error:
            parser.error(f"--contenders: {error}")
        if args.no_compile and any(map(is_torch_compile, names)):
            parser.error("--contenders names a torch.compile contender and --no-compile")
    if args.sizes is not None and args.sizes < 2:
        parser.error("--sizes takes at least 2")
    if cuda and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    where = torch.cuda.get_device_name() if cuda else "cpu"
    print(f"# command: python -m bench.dynamic_sizes {' '.join(argv or sys.argv[1:])}")
    clock_text = "process CPU" if args.clock == "cpu" else "wall"
    how = (
        "steady: do_bench median per size (GPU), mean over sizes"
        if cuda
        else f"steady: median of {args.rounds} passes over all sizes ({clock_text})"
    )
    print(
        f"# commit {_commit()}, torch {torch.__version__}, {where}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} threads, mode {args.mode}; first calls by wall time; {how}"
    )
    print(f"# contenders: {'; '.join(names)}; budget {args.budget} s")
    print("# first-calls rows print as each contender's end; steady rows after a workload's")
    print("# rounds. x eager / x static: their steady time / this one (> 1: faster); worst")
    print("# size: the smallest per-size x static (GPU only)")
    print("# new size ms: median first call of the third size on; lowerings: symbolic/reused/")
    print("# per size (size_lowering_stats, decision 0400)", flush=True)
    only = {part for part in args.only.split(",") if part}
    warm_up(names, args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    for every_size in workloads(args.quick, args.device, dtype):
        if only and every_size.name not in only:
            continue
        workload = spread(every_size, args.sizes)
        _table(FIRST_HEADER)
        live: dict[str, Any] = {}
        status: dict[str, str] = {}
        for name in names:
            skip = budget.spent()
            if skip is not None:
                row: dict[str, str | float] = {"status": skip}
            else:
                compiled, row = first_calls(name, workload, args.mode)
                if row["status"] == "ok":
                    live[name] = compiled
            status[name] = str(row["status"])
            _first_row(workload, name, row)
        # (the steady rounds of the contenders that compiled run past the budget: their
        # ratios are what the first calls were paid for)
        _table(STEADY_HEADER)
        per_size: dict[str, list[float]] = {}
        if cuda:
            per_size = steady_per_size(live, workload) if live else {}
            result = {name: statistics.fmean(times) for name, times in per_size.items()}
        else:
            result = steady(live, workload, args.rounds, clock) if live else {}
        _steady_rows(workload, names, result, per_size, status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
