"""Steady training steps against depth: the bench GPT at several depths, side by side.

For each depth, one process builds the model of :mod:`bench.compile_scaling` (width 128,
4 heads, vocab 8192, batch 2, 64 tokens, fp32, tied embedding) and compiles it with each
contender: eager, torch.compile (Inductor), torchstrata, and torchstrata with passes
blocked (``--blocked NAME[+NAME]``, repeatable: the same compiler without a rewrite, to
measure what the rewrite is worth in the same run), and with an ``InductorOptions`` switch
off (``--off SWITCH``, repeatable). Every contender's loss and
gradients are checked against eager's first; then rounds run each contender's step
(forward + cross-entropy + backward, gradients set to None between steps) in turn, the
order rotating per round, and the median step time of each is reported with its speed
against eager and against torch.compile, and the load average.

    python -m bench.depth_steps --layers 2,8,24 --blocked inductor.shared_values

``--memory`` adds each contender's peak tensor memory over one step (the allocator's
records, :mod:`bench.step_memory`), above the parameters and inputs held before it.

``--clock cpu`` times the steps by this process's CPU time rather than the wall clock: on a
machine whose cores other processes share, a step's wall time counts the time it waited
for a core (one torch thread: the process's CPU time is the step's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import torch

from bench.compile_scaling import BATCH, HEADS, TOKENS, VOCAB, WIDTH, _commit, _load
from bench.compilers import fallback_note
from bench.step_memory import allocator_peak
from bench.workloads.nets.gpt import GPT, GPTConfig

Step = Callable[[], torch.Tensor]


def _contender(name: str, model: torch.nn.Module) -> Callable[..., torch.Tensor]:
    if name == "eager":
        return model
    if name == "torch.compile":
        return torch.compile(model)
    import torchstrata.runtime as tsr
    from torchstrata.core import InductorOptions

    if " inductor." in name:  # "torchstrata inductor.SWITCH=off": one inductor switch off
        switch = name.partition(" inductor.")[2].removesuffix("=off")
        return tsr.compile(model, options={"inductor": InductorOptions(**{switch: False})})
    blocked = name.partition(" -")[2].split("+") if " -" in name else []
    return tsr.compile(model, options={"blocked_plugins": [b for b in blocked if b]})


def _step(model: torch.nn.Module, fn: Callable[..., torch.Tensor], idx, targets) -> Step:
    def step() -> torch.Tensor:
        for p in model.parameters():
            p.grad = None
        loss = fn(idx, targets)
        loss.backward()
        return loss

    return step


def _check(model: torch.nn.Module, step: Step, reference: dict[str, torch.Tensor]) -> str:
    """'ok', or how the gradients differ from eager's."""
    step()
    worst = 0.0
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        scale = reference[name].abs().max().item() or 1.0
        worst = max(worst, (p.grad - reference[name]).abs().max().item() / scale)
    return "ok" if worst < 1e-3 else f"WRONG: max relative gradient error {worst:.2e}"


def measure(
    layers: int,
    names: list[str],
    rounds: int,
    steps: int,
    clock: Callable[[], float],
    peaks: dict[str, int] | None = None,
) -> dict[str, object]:
    """Median seconds per step of each contender at ``layers`` (or a status string), timed
    by ``clock`` (``time.perf_counter``, or ``time.process_time`` on a shared machine);
    ``peaks``, when given, gets each contender's peak tensor bytes over one step."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(layers, HEADS, WIDTH, VOCAB, TOKENS))
    idx = torch.randint(0, VOCAB, (BATCH, TOKENS))
    targets = torch.randint(0, VOCAB, (BATCH, TOKENS))
    _step(model, model, idx, targets)()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    live: dict[str, Step] = {}
    result: dict[str, object] = {}
    for name in names:
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            try:
                step = _step(model, _contender(name, model), idx, targets)
                status = _check(model, step, reference)
            except Exception as exc:  # noqa: BLE001 - reported as the row's status
                status = f"error: {type(exc).__name__}: {exc}"[:160]
        note = fallback_note(records) if name != "eager" else None
        if note is not None:
            status = f"falls back to eager: {note}"
        if status == "ok":
            for _ in range(2):  # warm-up
                step()
            if peaks is not None:
                for p in model.parameters():
                    p.grad = None  # the step's gradients count in its peak
                peaks[name] = allocator_peak(step)[0]
            live[name] = step
        else:
            result[name] = status
    times: dict[str, list[float]] = {name: [] for name in live}
    order = list(live)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            start = clock()
            for _ in range(steps):
                live[name]()
            times[name].append((clock() - start) / steps)
    result.update({name: statistics.median(t) for name, t in times.items()})
    return result


def main(argv: list[str] | None = None) -> int:
    """Print one row per depth and contender."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--layers", default="2,8,24", help="comma-separated depths")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per contender")
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: OpenMP teams stall on a shared, loaded machine)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or this process's CPU time (steadier while other processes share the cores)",
    )
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument(
        "--memory", action="store_true", help="add each contender's peak tensor MiB of a step"
    )
    parser.add_argument(
        "--blocked", action="append", default=[], help="a torchstrata variant: NAME[+NAME]"
    )
    parser.add_argument(
        "--off",
        action="append",
        default=[],
        help="a torchstrata variant with one InductorOptions switch off (repeatable)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = ["eager"] + ([] if args.no_compile else ["torch.compile"]) + ["torchstrata"]
    names += [f"torchstrata -{b}" for b in args.blocked]
    names += [f"torchstrata inductor.{switch}=off" for switch in args.off]
    print(f"# command: python -m bench.depth_steps {' '.join(argv or sys.argv[1:])}")
    print(
        f"# commit {_commit()}, torch {torch.__version__}, cpu, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} threads; median of {args.rounds} rounds of {args.steps} steps"
        f" ({'process CPU' if args.clock == 'cpu' else 'wall'} time)"
    )
    print(f"# GPT d={WIDTH} heads={HEADS} vocab={VOCAB} batch={BATCH} tokens={TOKENS} fp32")
    print("# x eager / x torch.compile: their median / this one (> 1: faster)")
    memory = " peak MiB |" if args.memory else ""
    print(f"| layers | contender | step ms | x eager | x torch.compile |{memory} load avg 1/5/15 |")
    print("| --- | --- | --- | --- | --- | --- |" + (" --- |" if args.memory else ""))
    for layers in (int(part) for part in args.layers.split(",")):
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        peaks: dict[str, int] | None = {} if args.memory else None
        result = measure(layers, names, args.rounds, args.steps, clock, peaks)
        load = _load()
        eager, compiled = result.get("eager"), result.get("torch.compile")
        for name in names:
            value = result[name]
            peak = f" {peaks[name] / 2**20:.1f} |" if peaks and name in peaks else ""
            if not isinstance(value, float):
                print(
                    f"| {layers} | {name} | {value} | | |{peak or (' |' if peaks else '')} {load} |"
                )
                continue
            vs_eager = f"{eager / value:.2f}x" if isinstance(eager, float) else "n/a"
            vs_compile = f"{compiled / value:.2f}x" if isinstance(compiled, float) else "n/a"
            print(
                f"| {layers} | {name} | {value * 1e3:.1f} | {vs_eager} | {vs_compile} |{peak} {load} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
