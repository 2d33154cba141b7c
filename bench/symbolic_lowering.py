"""What a new size costs a symbolic entry: the Python CPU of lowering each sequence length
of a training step compiled with ``dynamic=True`` (issues 32 and 33, decisions 0255, 0320).

The workload is two bench GPT blocks (bench/workloads/nets/gpt.py, width 128, 4 heads) and
one training step, ``mse_loss(blocks(x), y).backward()`` with ``x, y [2, T, 128]``,
compiled with ``codegen="cpp"`` (``--codegen``) and ``dynamic=True``, called at 12 sequence
lengths (``LENGTHS``: the first is traced symbolically, every length is lowered on its
own). Per length a first and a second (steady) step; the loss and every gradient of both
are compared with an eager twin. A length's lowering is its first step's CPU minus its
steady step's, counted as this process's CPU (``time.process_time``: the C++ compiler's
child processes are excluded; the box may be shared, so wall time is printed beside it
but does not compare). Reported: the sum and the mean over the lengths after the first
(the per-size part; the first carries the symbolic trace), and the process CPU inside each
pipeline stage over those lengths (``Pipeline._call_stage``; ``codegen`` is scheduling,
kernel sources and the launcher, ``decomp`` the decompositions) and in the garbage collector.

``--workload block_loss`` (decision 0395) compiles the loss alone and runs the backward
outside it: one training graph (forward and backward), where ``block_train``'s
``backward()`` inside the compiled function is a graph break (the segment after it,
``loss.detach()``, is a graph of its own, lowered per size).

``--compare`` runs each turn twice: with the compile option ``symbolic_lowering`` off
(every length lowered on its own), then on (one lowering for many lengths, decisions
0381 and 0395 for training graphs).

``--workload decode`` (issue 33, decision 0380) measures the same for an inference entry:
bench.dynamic_sizes's KV-cache decode step (caches of 2 heads x 32, one query) compiled with
``dynamic=True`` and called at the 32 cache lengths 16-47 in order, as a decode loop meets
them (every output compared with eager's; no stage or collector split, a length's lowering
is milliseconds).

``--workload column_sum`` (decision 0471) measures the same for a weight gradient's
column sum over 2048 to 4095 rows, one lowering (a Triton split column sum with 26
conditions) serving every row count: a new row count's first call is its check of the
conditions and its launch.

``--dynamo`` (decision 0455) compiles with ``torch.compile(fn, backend="torchstrata")``
instead: Dynamo traces the second length with symbolic sizes (automatic dynamic), and its
graph is lowered per size (``--compare``'s first run, the backend before 0455) or once for
many sizes. The first two lengths carry Dynamo's two compiles and are left out of the
summary (the decode workload's; ``block_*`` leave out the first, as without ``--dynamo``).

``--warm`` (decode and column_sum, decision 0497) runs each turn's process a second time
with the cache directory the first one filled, at lengths it never saw (each length plus
as many as there are lengths: 48-79 for decode): with ``--dynamo`` its first length is
Dynamo's static graph, its second Dynamo's graph with symbolic sizes, whose lowering a
warm process reads from the compiled-graph cache (``cached`` in its
``size_lowering_stats()``); that length's first call (process CPU, Dynamo's compile
included) is printed as ``warm first call of a new size``.

Each turn runs in a fresh process with a fresh, empty ``TORCHSTRATA_CACHE_DIR``, one torch
thread::

    python -m bench.symbolic_lowering --turns 3
    python -m bench.symbolic_lowering --workload decode --turns 3
    python -m bench.symbolic_lowering --workload block_loss --compare --turns 3
    python -m bench.symbolic_lowering --workload decode --dynamo --compare --turns 3
    python -m bench.symbolic_lowering --workload decode --dynamo --warm --turns 3
    python -m bench.symbolic_lowering --workload column_sum --codegen triton --turns 3
    python -m bench.symbolic_lowering --profile /tmp/lowering.prof --top 40

``--profile`` runs cProfile (a CPU-time timer) over the first steps of the per-size
lengths only, in one turn, writes the stats to the given path and prints the hottest
functions by own and by cumulative time (cProfile inflates Python-heavy parts: compare
shares, not seconds).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bench.cold import CACHE_VARIABLES, REPO_ROOT
from bench.compile_scaling import _commit, _load
from bench.workloads.nets.gpt import Block, GPTConfig

#: The sequence lengths, in the order they are called: the first is traced symbolically,
#: the eleven others are new sizes of the same entry (0280's lengths, 16 first).
LENGTHS = (16, 17, 5, 33, 2, 64, 9, 40, 3, 11, 23, 7)
WIDTH, HEADS, LAYERS, BATCH = 128, 4, 2, 2


def step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One training step: the loss, its gradients accumulated in ``model``'s parameters."""
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss.detach()


def _blocks() -> nn.Module:
    cfg = GPTConfig(LAYERS, HEADS, WIDTH, 256, 256)
    return nn.Sequential(*(Block(cfg) for _ in range(LAYERS)))


def block_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss alone (``--workload block_loss``: the backward runs outside the compiled
    function, so the step is one graph, with no graph break at ``backward()``)."""
    return F.mse_loss(model(x), y)


def _run_step(fn: Any, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Any:
    model.zero_grad(set_to_none=True)
    loss = fn(model, x, y)
    if loss.requires_grad:  # block_loss: the backward outside the compiled function
        loss.backward()
        loss = loss.detach()
    return loss, [p.grad.clone() for p in model.parameters()]


class _GcClock:
    """Process CPU in the garbage collector (``gc.callbacks``) while ``on``, and its runs."""

    def __init__(self) -> None:
        self.on = False
        self.seconds = 0.0
        self.runs = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.process_time()
        elif self.on:
            self.seconds += time.process_time() - self._start
            self.runs += 1


class _StageClock:
    """Process CPU inside each pipeline stage while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._depth = 0

    def install(self) -> None:
        from torchstrata.runtime.pipeline import Pipeline

        original = Pipeline._call_stage
        clock = self

        def timed(pipeline: Any, stage: str, options: Any, symbolic: bool = False, **kw: Any):
            if not clock.on or clock._depth:
                return original(pipeline, stage, options, symbolic, **kw)
            name = stage + (" symbolic" if symbolic else "")
            clock._depth += 1
            start = time.process_time()
            try:
                return original(pipeline, stage, options, symbolic, **kw)
            finally:
                clock._depth -= 1
                clock.seconds[name] += time.process_time() - start
                clock.calls[name] += 1

        Pipeline._call_stage = timed  # type: ignore[method-assign]


#: The decode workload's cache lengths, in the order a decode loop meets them.
DECODE_LENGTHS = tuple(range(16, 48))

#: The column_sum workload's row counts: one bucket of Triton's split column sum (2048 to
#: 4095 rows, 2 to 4 parts of 1024 rows; decision 0440), in no order.
COLUMN_SUM_LENGTHS = (3000, 3001, 3500, 2900, 3333, 3100, 3999, 3050, 2600, 3700, 2222, 3456)


def column_sum(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    """A weight gradient's column sum over the rows of ``x`` ``[M, 32]`` (``--workload
    column_sum``): on Triton, a split column sum whose lowering records 26 conditions,
    20 of them with ``floor`` or ``Mod`` (decision 0471)."""
    return ((x * w).sum(0),)


def _calls(workload: str) -> tuple[Any, Any, tuple[int, ...]]:
    """The function, its inputs at a length, and the lengths of ``decode`` or
    ``column_sum``."""
    if workload == "column_sum":
        return column_sum, lambda n: (torch.randn(n, 32), torch.randn(32)), COLUMN_SUM_LENGTHS
    from bench.dynamic_sizes import decode_step

    def inputs(length: int) -> tuple[torch.Tensor, ...]:
        return (torch.randn(2, length, 32), torch.randn(2, length, 32), *torch.randn(3, 2, 1, 32))

    return decode_step, inputs, DECODE_LENGTHS


def _compile(fn: Any, codegen: str, per_size: bool, dynamo: bool) -> Any:
    """``fn`` compiled with ``dynamic=True`` by torchstrata, or by ``torch.compile`` with
    the torchstrata backend (``dynamo``: automatic dynamic); ``per_size``: with the
    compile option ``symbolic_lowering`` off."""
    import torchstrata.runtime as tsr

    options = {"symbolic_lowering": not per_size}
    if dynamo:
        return torch.compile(fn, backend="torchstrata", options={"codegen": codegen, **options})
    return tsr.compile(fn, dynamic=True, codegen=codegen, options=options)


def decode_child(
    codegen: str,
    per_size: bool = False,
    dynamo: bool = False,
    workload: str = "decode",
    warm: bool = False,
) -> None:
    """One turn of ``--workload decode`` (or ``column_sum``) in this process: each
    length's first call's process CPU minus its second's (``per_size``: with the compile
    option ``symbolic_lowering`` off, every length lowered on its own, decision 0381;
    ``dynamo``: compiled through ``torch.compile``, decision 0455; ``warm``: at lengths
    the first process of the turn never saw, decision 0497)."""
    import torchstrata.runtime as tsr

    torch.set_num_threads(1)
    torch.manual_seed(0)
    fn, make_inputs, lengths = _calls(workload)
    if warm:
        lengths = tuple(length + len(lengths) for length in lengths)
    compiled = _compile(fn, codegen, per_size, dynamo)
    per_length, walls, firsts = [], [], []
    for length in lengths:
        inputs = make_inputs(length)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        first = compiled(*inputs)
        cpu1, wall1 = time.process_time(), time.perf_counter()
        second = compiled(*inputs)
        cpu2, wall2 = time.process_time(), time.perf_counter()
        expected = fn(*inputs)
        for got in (first, second):
            for value, want in zip(got, expected, strict=True):
                # a sum over thousands of rows, in split parts: float32 rounding apart
                torch.testing.assert_close(value, want, rtol=1e-4, atol=1e-4 * len(value))
        per_length.append((cpu1 - cpu0) - (cpu2 - cpu1))
        firsts.append(cpu1 - cpu0)
        walls.append((wall1 - wall0) - (wall2 - wall1))  # g++ runs in a child process
    text = " ".join(f"{1000 * cpu:.1f}" for cpu in per_length)
    print(f"lowering ms per length {' '.join(map(str, lengths))}: {text}")
    skip = 2 if dynamo else 1  # the lengths of Dynamo's static and symbolic compiles
    later = per_length[skip:]
    print(
        f"SUMMARY lowering over {len(later)} new lengths: process CPU {sum(later):.3f} s "
        f"({1000 * sum(later) / len(later):.1f} ms a length, median "
        f"{1000 * sorted(later)[len(later) // 2]:.1f} ms); every call equal to eager"
    )
    print(
        f"wall over the {len(later)} new lengths (process CPU leaves g++ out): "
        f"{sum(walls[skip:]):.3f} s; first length {walls[0]:.3f} s"
    )
    print(f"lowerings (size_lowering_stats): {tsr.size_lowering_stats()}")
    if warm:
        at = skip - 1  # the length of the symbolic graph's first lowering (or read)
        print(
            f"WARM first call of a new size (length {lengths[at]}): process CPU "
            f"{1000 * firsts[at]:.1f} ms (graph cache hits {tsr.graph_cache_stats().hits})"
        )


def _kind(before: dict[str, int], after: dict[str, int]) -> str:
    """How a new length was served, from the counts of ``size_lowering_stats`` before and
    after its first step: ``per_size`` where a graph (``block_train``: the step's or the
    segment's after the break) lowered it on its own, else ``symbolic`` where one made a
    lowering for many lengths, else ``reused``."""
    grown = [key for key in after if after[key] > before.get(key, 0)]
    for kind in ("per_size", "symbolic", "reused"):
        if kind in grown:
            return kind
    return "none (static)"


def child(
    codegen: str,
    profile_path: str | None,
    top: int,
    per_size: bool = False,
    loss_only: bool = False,
    dynamo: bool = False,
) -> None:
    """One turn in this process (a fresh cache directory is the caller's); ``per_size``:
    with the compile option ``symbolic_lowering`` off; ``loss_only``: ``block_loss``;
    ``dynamo``: compiled through ``torch.compile``."""
    import torchstrata.runtime as tsr

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _blocks()
    twin = _blocks()
    twin.load_state_dict(model.state_dict())
    fn = block_loss if loss_only else step
    compiled = _compile(fn, codegen, per_size, dynamo)
    stages = _StageClock()
    stages.install()
    collector = _GcClock()
    gc.callbacks.append(collector)
    profiler = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
    cpu_total = wall_total = 0.0
    by_kind: dict[str, list[float]] = defaultdict(list)
    for index, length in enumerate(LENGTHS):
        before = tsr.size_lowering_stats()
        x = torch.randn(BATCH, length, WIDTH)
        y = torch.randn(BATCH, length, WIDTH)
        per_size = index > 0
        stages.on = collector.on = per_size
        if profiler is not None and per_size:
            profiler.enable()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        first = _run_step(compiled, model, x, y)
        cpu1, wall1 = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.disable()
        stages.on = collector.on = False
        second = _run_step(compiled, model, x, y)
        cpu2, wall2 = time.process_time(), time.perf_counter()
        expected = _run_step(fn, twin, x, y)
        for got in (first, second):
            torch.testing.assert_close(got[0], expected[0])
            for grad, want in zip(got[1], expected[1], strict=True):
                torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-5)
        cpu = (cpu1 - cpu0) - (cpu2 - cpu1)
        wall = (wall1 - wall0) - (wall2 - wall1)
        kind = _kind(before, tsr.size_lowering_stats())
        print(
            f"T={length:3d} lowering: process CPU {cpu:.3f} s, wall {wall:.3f} s ({kind})",
            flush=True,
        )
        if per_size:
            cpu_total += cpu
            wall_total += wall
            by_kind[kind].append(cpu)
    n = len(LENGTHS) - 1
    print(
        f"SUMMARY lowering over {n} new lengths: process CPU {cpu_total:.2f} s "
        f"({cpu_total / n:.3f} a length), wall {wall_total:.2f} s ({wall_total / n:.3f} a length); "
        "every step equal to eager (loss, every gradient)"
    )
    kinds = "; ".join(
        f"{kind}: {len(cpus)} lengths, median {1000 * sorted(cpus)[len(cpus) // 2]:.1f} ms"
        for kind, cpus in sorted(by_kind.items())
    )
    print(f"SUMMARY by how the length was served (process CPU): {kinds}")
    stage_text = ", ".join(
        f"{name} {stages.seconds[name]:.2f} s ({stages.calls[name]} calls)"
        for name in sorted(stages.seconds)
    )
    print(f"stages over those lengths, process CPU: {stage_text}")
    print(
        f"garbage collection in those lengths' first steps: {collector.seconds:.2f} s, {collector.runs} runs"
    )
    print(f"lowerings (size_lowering_stats): {tsr.size_lowering_stats()}")
    if profiler is not None and profile_path:
        import pstats

        profiler.dump_stats(profile_path)
        for order in ("tottime", "cumulative"):
            pstats.Stats(profile_path).sort_stats(order).print_stats(top)


def main(argv: list[str] | None = None) -> int:
    """Run ``--turns`` fresh processes (or one profiled one) and print their summaries."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=1, help="fresh processes, one after another")
    parser.add_argument("--codegen", default="cpp", choices=("cpp", "triton"))
    parser.add_argument(
        "--workload",
        default="block_train",
        choices=("block_train", "block_loss", "decode", "column_sum"),
    )
    parser.add_argument(
        "--profile", metavar="PATH", help="cProfile the per-size lengths (block_train)"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="each turn runs symbolic_lowering off (per size), then on (0381, 0395)",
    )
    parser.add_argument(
        "--dynamo", action="store_true", help="torch.compile(backend='torchstrata') (0455)"
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="decode, column_sum: each turn again, on the cache it filled, at new lengths (0497)",
    )
    parser.add_argument("--per-size", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--top", type=int, default=40, help="functions printed with --profile")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child and args.workload in ("decode", "column_sum"):
        decode_child(args.codegen, args.per_size, args.dynamo, args.workload, args.warm)
        return 0
    if args.child:
        loss_only = args.workload == "block_loss"
        child(args.codegen, args.profile, args.top, args.per_size, loss_only, args.dynamo)
        return 0
    lengths = _calls(args.workload)[2] if args.workload in ("decode", "column_sum") else LENGTHS
    print(
        f"# commit {_commit()}, torch {torch.__version__}, workload {args.workload}"
        f"{' through torch.compile' if args.dynamo else ''}, "
        f"lengths {' '.join(map(str, lengths))}"
    )
    for turn in range(1 if args.profile else args.turns):
        with tempfile.TemporaryDirectory(prefix="symbolic-lowering-") as scratch:
            env = dict(os.environ)
            for variable in CACHE_VARIABLES:
                env[variable] = os.path.join(scratch, variable.lower())
            command = [sys.executable, "-m", "bench.symbolic_lowering", "--child"]
            command += ["--codegen", args.codegen, "--top", str(args.top)]
            command += ["--workload", args.workload]
            command += ["--dynamo"] if args.dynamo else []
            command += ["--profile", args.profile] if args.profile else []
            for per_size in (True, False) if args.compare else (False,):
                what = " (per size)" if per_size else " (symbolic lowering)" if args.compare else ""
                print(f"== turn {turn + 1}{what}, load {_load()}", flush=True)
                sub_env = dict(env)
                for variable in CACHE_VARIABLES:  # each run with a cache of its own
                    sub_env[variable] = os.path.join(scratch, f"{per_size}", variable.lower())
                extra = ["--per-size"] if per_size else []
                runs = (extra, [*extra, "--warm"]) if args.warm else (extra,)
                for run in runs:
                    if "--warm" in run:
                        print(f"-- warm: the cache filled above, new lengths, load {_load()}")
                    done = subprocess.run(command + run, cwd=REPO_ROOT, env=sub_env, check=False)
                    if done.returncode:
                        print(f"turn {turn + 1} failed (exit {done.returncode})")
                        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
