"""Per-call cost of the generated guard checks, on CPU, side by side in one process.

Four workloads, chosen with ``--only`` (default all):

* ``sequential``: a 20-block ``nn.Sequential`` (Linear, ReLU, LayerNorm per block: 60
  submodules), compiled for inference;
* ``tree``: a guard-heavy tree of 36 layers of 14 small leaf modules (504 leaves) shaped
  like the one of PyTorch's ``benchmarks/dynamo/microbenchmarks/dynamo_guard_overhead.py``;
* ``tiny``: ``f(x, w) = x * w + 1`` (x 4x8, w 8; C++ backend) compiled with
  ``dynamic=False`` (a static entry) and ``dynamic=True`` (a symbolic entry), their
  guard checks and whole calls timed in alternation (issue 33: the symbolic entry's
  check within 10% of the static one's);
* ``small``: the per-call path where the guard matters, at one size each: the issue's
  ``softmax_gelu`` (:mod:`bench.dynamic_sizes`) at 17 and 64 rows of 256 and the decode
  step at cache lengths 16 and 40; ours static (``dynamic=False``), ours symbolic
  (``dynamic=True``, called at a second size first: one entry serving both) and eager,
  timed in turns by process CPU time and by wall clock (issue 33: the symbolic call
  within 10% of the static one);
* ``alloc``: M1/tiny, ``(a + 1) * 2`` on 8 float32 elements (``--device``; issue 32): ours with the
  launcher's native ``empty_strided`` (decision 0510), ours with ``torch.empty_strided``
  (``InductorOptions(native_alloc=False)``), torch.compile and eager, and the two
  allocations of its output alone, timed in turns by ``--clock``;
* ``resnet``: M4/resnet18 at the bench's quick CPU size (width 8, 32px, bs 1,
  inference; about 1000 guards over 70 modules, issue 32): the entry's guard check,
  our call, torch.compile's call and eager's, by ``--clock`` (cpu: process time); ours
  also with every guard a Python condition (``native_guards=False``, decision 0460);
* ``gpt``: a training step (forward, loss, backward) of the bench GPT of
  :mod:`bench.depth_steps` (``--layers``, default 8): the entry's guard check, the
  same check without the parameters' tensor guards (what the parameters cost), and the
  whole step, with the guards' share of the step (issue 32).

The machine is shared: every time is the median over ``--rounds`` rounds (each round the
minimum over ``--repeat`` batches of ``--number`` calls, the contenders alternating),
with the spread (lowest and highest round); a ratio is the median of the rounds' ratios.
A guard check is called as the runtime calls it for a positional call (``fetch_args``,
else ``check_args``).

    python -m bench.guard_cost --only tiny,gpt --rounds 9
    python -m bench.guard_cost --only tiny,small --rounds 9
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import torch

import torchstrata.runtime
from torchstrata.core import CompileOptions, Guard, GuardKind, TensorMeta
from torchstrata.runtime.guards import GuardSet


class _Flag:
    def __init__(self) -> None:
        self.enabled = True


class Leaf(torch.nn.Module):
    """A leaf reading a constant, an optional weight and a ``None`` bias."""

    def __init__(self, width: int, weighted: bool) -> None:
        super().__init__()
        self.width = width
        self.register_parameter(
            "weight", torch.nn.Parameter(torch.randn(width)) if weighted else None
        )
        self.register_parameter("bias", None)

    def forward(self) -> int:
        weight = 0 if self.weight is None else self.weight.shape[0]
        bias = 0 if self.bias is None else self.bias.shape[0]
        return self.width + weight + bias


class Layer(torch.nn.Module):
    """``leaves`` leaves in a ModuleList, summed when the shared flag is set."""

    def __init__(self, index: int, leaves: int, weighted: int, flag: _Flag) -> None:
        super().__init__()
        self.scale = 0.5 + index * 1e-3
        self.flag = flag
        self.leaves = torch.nn.ModuleList(Leaf(8 + i, i < weighted) for i in range(leaves))

    def forward(self) -> float:
        total = 0
        if self.flag.enabled:
            for leaf in self.leaves:
                total += leaf()
        return total + self.scale


class Tree(torch.nn.Module):
    """``layers`` layers in a ModuleList; adds their sum to the input."""

    def __init__(self, layers: int = 36, leaves: int = 14, weighted: int = 11) -> None:
        super().__init__()
        flag = _Flag()
        self.layers = torch.nn.ModuleList(
            Layer(index, leaves, weighted, flag) for index in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = 0.0
        for layer in self.layers:
            total += layer()
        return x + total


def sequential(blocks: int = 20, width: int = 16) -> torch.nn.Module:
    """``blocks`` blocks of Linear, ReLU, LayerNorm in one flat ``nn.Sequential``."""
    layers: list[torch.nn.Module] = []
    for _ in range(blocks):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.LayerNorm(width)]
    return torch.nn.Sequential(*layers)


#: A contender: a call to time and how many calls make one timed batch.
Contender = tuple[Callable[[], Any], int]


def _rounds(
    contenders: dict[str, Contender],
    args: argparse.Namespace,
    timer: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Microseconds per call of each contender, one value per round: the minimum over
    ``args.repeat`` batches; the contenders alternate, the order rotating per round.
    ``timer``: the clock (wall, or ``time.process_time`` for this process's CPU time)."""
    for fn, _ in contenders.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for index in range(args.rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            fn, number = contenders[name]
            best = min(timeit.repeat(fn, number=number, repeat=args.repeat, timer=timer))
            times[name].append(best * 1e6 / number)
    return times


def _spread(values: list[float]) -> str:
    """``median (lowest-highest)``."""
    return f"{statistics.median(values):8.2f} ({min(values):.2f}-{max(values):.2f})"


def _ratio(top: list[float], bottom: list[float]) -> str:
    """The median of the rounds' ratios, with their spread."""
    return _spread([t / b for t, b in zip(top, bottom, strict=True)])


def _positional_check(function: Any, call_args: tuple[Any, ...]) -> tuple[Any, Callable[[], Any]]:
    """The one cache entry's guards of a compiled function, and its per-call check for
    ``call_args`` as the runtime calls it (asserted to hold)."""
    entries = function.cache.entries
    assert len(entries) == 1 and entries[0].run is not None, "not compiled to one entry"
    guards = entries[0].guards
    check = guards.fetch_args or guards.check_args
    assert check is not None, "no positional guard check"
    globals_ = function._globals
    result = check(call_args, globals_)
    assert (result is not None and not isinstance(result, int)) or result == -1, result
    return guards, lambda: check(call_args, globals_)


def measure_module(
    name: str, model: torch.nn.Module, x: torch.Tensor, args: argparse.Namespace
) -> None:
    """Compile ``model`` for inference, check it runs like eager, print its guard and
    call costs."""
    model.eval().requires_grad_(False)
    compiled = torchstrata.runtime.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=2e-3, rtol=1e-3)
        guards, check = _positional_check(compiled.compiled_forward, (x,))
        if args.print_source:
            print(guards.args_source)
        n = args.number
        times = _rounds(
            {"guard": (check, n), "call": (lambda: compiled(x), n), "eager": (lambda: model(x), n)},
            args,
        )
    modules = sum(1 for _ in model.modules())
    print(f"{name}: {modules} modules, {len(guards)} guards")
    for what, values in times.items():
        print(f"  {what:<8} us {_spread(values)}")
    per_module = [v * 1000 / modules for v in times["guard"]]
    print(f"  guard ns per module {_spread(per_module)}")


def measure_resnet(args: argparse.Namespace) -> None:
    """M4/resnet18 at the quick CPU size: the guard check, ours, torch.compile, eager."""
    from bench.compilers import compile_with
    from bench.workloads.registry import select_workloads
    from bench.workloads.spec import DeviceProfile

    (workload,) = select_workloads(DeviceProfile("cpu", quick=True), ["M4/resnet18"])
    case = workload.make()
    model, call_args = case.fn, case.args
    ours = compile_with("torchstrata", model)
    # the same with every guard a Python condition (decision 0460: the tensor guards'
    # native checks off), timed in turns with the native one
    python = compile_with("torchstrata", model, CompileOptions(native_guards=False))
    inductor = compile_with("inductor", model)
    with torch.no_grad():
        expected = model(*call_args)
        for compiled in (ours, python, inductor):
            for _ in range(2):
                torch.testing.assert_close(compiled(*call_args), expected, atol=2e-3, rtol=1e-3)
        guards, check = _positional_check(ours.compiled_forward, call_args)
        python_guards, python_check = _positional_check(python.compiled_forward, call_args)
        assert python_guards.native_count == 0
        n = args.number
        times = _rounds(
            {
                "guard": (check, n),
                "guard (Python)": (python_check, n),
                "ours": (functools.partial(ours, *call_args), n),
                "ours (Python)": (functools.partial(python, *call_args), n),
                "torch.compile": (functools.partial(inductor, *call_args), n),
                "eager": (functools.partial(model, *call_args), n),
            },
            args,
            time.process_time if args.clock == "cpu" else time.perf_counter,
        )
    modules = sum(1 for _ in model.modules())
    print(
        f"resnet: {workload.name}, {modules} modules, {len(guards)} guards, "
        f"{guards.native_count} checked natively ({args.clock})"
    )
    for what, values in times.items():
        print(f"  {what:<14} us {_spread(values)}")
    print(f"  ours/torch.compile          {_ratio(times['ours'], times['torch.compile'])}")
    print(f"  ours (Python)/torch.compile {_ratio(times['ours (Python)'], times['torch.compile'])}")
    print(f"  guard/guard (Python)        {_ratio(times['guard'], times['guard (Python)'])}")
    print(
        f"  guard % of ours             "
        f"{_spread([100 * g / o for g, o in zip(times['guard'], times['ours'])])}"
    )


def _scale_add(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w + 1


def measure_tiny(args: argparse.Namespace) -> None:
    """A static and a symbolic entry of ``x * w + 1``: guard checks and whole calls."""
    x, w = torch.randn(4, 8), torch.randn(8)
    static = torchstrata.runtime.compile(_scale_add, dynamic=False, codegen="cpp")
    symbolic = torchstrata.runtime.compile(_scale_add, dynamic=True, codegen="cpp")
    for compiled in (static, symbolic):
        for _ in range(2):
            torch.testing.assert_close(compiled(x, w), _scale_add(x, w))
    y = torch.randn(5, 8)  # a second size: still one symbolic entry
    torch.testing.assert_close(symbolic(y, w), _scale_add(y, w))
    _, static_check = _positional_check(static, (x, w))
    _, symbolic_check = _positional_check(symbolic, (x, w))
    n = args.number * 20
    times = _rounds(
        {
            "guard static": (static_check, n),
            "guard symbolic": (symbolic_check, n),
            "call static": (lambda: static(x, w), n),
            "call symbolic": (lambda: symbolic(x, w), n),
            "eager": (lambda: _scale_add(x, w), n),
        },
        args,
        time.process_time if args.clock == "cpu" else time.perf_counter,
    )
    print(f"tiny: f(x, w) = x * w + 1, x 4x8, w 8, C++; static vs symbolic entry ({args.clock})")
    for what, values in times.items():
        print(f"  {what:<15} us {_spread(values)}")
    print(f"  guard symbolic/static {_ratio(times['guard symbolic'], times['guard static'])}")
    print(f"  call  symbolic/static {_ratio(times['call symbolic'], times['call static'])}")


def _tiny_graph(a: torch.Tensor) -> torch.Tensor:
    return (a + 1) * 2


def measure_alloc(args: argparse.Namespace) -> None:
    """M1/tiny with the launcher's native allocation and with torch.empty_strided, beside
    torch.compile and eager; and the allocation of its output by each."""
    from bench.compilers import compile_with
    from torchstrata.core import InductorOptions
    from torchstrata.inductor.launch import native_alloc

    a = torch.randn(8, device=args.device)
    ours = torchstrata.runtime.compile(_tiny_graph)
    off = CompileOptions(inductor=InductorOptions(native_alloc=False))
    torch_alloc = torchstrata.runtime.compile(_tiny_graph, options=off)
    inductor = compile_with("inductor", _tiny_graph)
    for compiled in (ours, torch_alloc, inductor):
        for _ in range(2):
            torch.testing.assert_close(compiled(a), _tiny_graph(a))
    module = native_alloc.native_module()
    if module is None:
        print(f"alloc: no native allocation here: {native_alloc.unavailable_reason()}")
        return
    empty, dtype = module.empty_strided, torch.float32
    device = native_alloc.interned_device(a.device)  # cuda:0, as launchers hold it
    n = args.number * 20
    times = _rounds(
        {
            "ours": (lambda: ours(a), n),
            "ours (torch alloc)": (lambda: torch_alloc(a), n),
            "torch.compile": (lambda: inductor(a), n),
            "eager": (lambda: _tiny_graph(a), n),
            "native alloc": (lambda: empty((8,), (1,), dtype=dtype, device=device), n),
            "torch alloc": (
                lambda: torch.empty_strided((8,), (1,), dtype=dtype, device=device),
                n,
            ),
        },
        args,
        time.process_time if args.clock == "cpu" else time.perf_counter,
    )
    backend = "Triton" if a.is_cuda else "C++"
    print(f"alloc: M1/tiny (a + 1) * 2, 8 fp32 elements, {a.device}, {backend} ({args.clock})")
    for what, values in times.items():
        print(f"  {what:<18} us {_spread(values)}")
    print(f"  ours/torch.compile              {_ratio(times['ours'], times['torch.compile'])}")
    ratio = _ratio(times["ours (torch alloc)"], times["torch.compile"])
    print(f"  ours (torch alloc)/torch.compile {ratio}")
    print(
        f"  ours/ours (torch alloc)          {_ratio(times['ours'], times['ours (torch alloc)'])}"
    )
    print(
        f"  native alloc/torch alloc        {_ratio(times['native alloc'], times['torch alloc'])}"
    )


def _small_cases() -> list[tuple[str, Callable[..., Any], tuple[Any, ...], tuple[Any, ...]]]:
    """(name, function, the timed call's arguments, another size's) of ``small``."""
    from bench.dynamic_sizes import decode_step, softmax_gelu

    w = torch.randn(256, 256)
    cases = []
    for rows in (17, 64):
        x, other = torch.randn(rows, 256), torch.randn(rows + 3, 256)
        cases.append((f"softmax_gelu x {rows}x256", softmax_gelu, (x, w), (other, w)))
    for length in (16, 40):

        def step(t: int) -> tuple[torch.Tensor, ...]:
            return (torch.randn(2, t, 32), torch.randn(2, t, 32), *torch.randn(3, 2, 1, 32))

        cases.append((f"decode cache {length}", decode_step, step(length), step(length + 5)))
    return cases


def measure_small(args: argparse.Namespace) -> None:
    """Ours static, ours symbolic and eager at one size each of small workloads: guard
    checks and whole calls, by process CPU time and by wall clock."""
    # a fused 256-wide matmul and softmax rounds otherwise than eager's (1.2e-5 apart)
    close = functools.partial(torch.testing.assert_close, atol=2e-3, rtol=1e-3)
    for name, fn, call_args, other_args in _small_cases():
        static = torchstrata.runtime.compile(fn, dynamic=False)
        symbolic = torchstrata.runtime.compile(fn, dynamic=True)
        with torch.no_grad():
            for compiled in (static, symbolic):
                for _ in range(2):
                    close(compiled(*call_args), fn(*call_args))
            close(symbolic(*other_args), fn(*other_args))
            _, static_check = _positional_check(static, call_args)
            _, symbolic_check = _positional_check(symbolic, call_args)  # one entry, two sizes
            n = args.number * 2
            contenders = {
                "guard static": (static_check, n * 5),
                "guard symbolic": (symbolic_check, n * 5),
                "call static": (functools.partial(static, *call_args), n),
                "call symbolic": (functools.partial(symbolic, *call_args), n),
                "eager": (functools.partial(fn, *call_args), n),
            }
            clocks = {"cpu": time.process_time, "wall": time.perf_counter}
            times = {clock: _rounds(contenders, args, timer) for clock, timer in clocks.items()}
        print(f"small: {name}; static vs symbolic entry (C++), eager")
        for clock, values in times.items():
            line = "  ".join(f"{what} {_spread(v).strip()}" for what, v in values.items())
            print(f"  {clock:<4} us  {line}")
            guard = _ratio(values["guard symbolic"], values["guard static"]).strip()
            call = _ratio(values["call symbolic"], values["call static"]).strip()
            eager = _ratio(values["call symbolic"], values["eager"]).strip()
            print(
                f"  {clock:<4} symbolic/static guard {guard}, call {call}; symbolic/eager {eager}"
            )


def _is_parameter_check(guard: Guard) -> bool:
    return (
        guard.kind is GuardKind.TENSOR_MATCH
        and isinstance(guard.expected, TensorMeta)
        and "_parameters[" in guard.source
    )


def measure_gpt(args: argparse.Namespace) -> None:
    """A training step of the bench GPT: its guard check, the same check without the
    parameters' tensor guards, and the whole step."""
    from bench.compile_scaling import BATCH, HEADS, TOKENS, VOCAB, WIDTH
    from bench.depth_steps import _check, _step
    from bench.workloads.nets.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(args.layers, HEADS, WIDTH, VOCAB, TOKENS))
    idx = torch.randint(0, VOCAB, (BATCH, TOKENS))
    targets = torch.randint(0, VOCAB, (BATCH, TOKENS))
    _step(model, model, idx, targets)()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    compiled = torchstrata.runtime.compile(model)
    step = _step(model, compiled, idx, targets)
    status = _check(model, step, reference)
    assert status == "ok", status
    step()
    function = compiled.compiled_forward
    guards, check = _positional_check(function, (idx, targets))
    kept = [guard for guard in guards.guards if not _is_parameter_check(guard)]
    parameters = len(guards) - len(kept)
    call_args, globals_ = (idx, targets), function._globals
    all_args = GuardSet(guards.guards, function._bind).check_args
    without = GuardSet(kept, function._bind).check_args
    assert all_args is not None and without is not None
    assert all_args(call_args, globals_) == -1 and without(call_args, globals_) == -1
    n = max(1, args.number // 4)
    times = _rounds(
        {
            "guard": (check, n),
            "guard (check_args)": (lambda: all_args(call_args, globals_), n),
            "without parameters": (lambda: without(call_args, globals_), n),
            "step": (step, 1),
        },
        args,
    )
    print(
        f"gpt: {args.layers} layers, training step; {len(guards)} guards, "
        f"{parameters} of them parameters' tensor checks"
    )
    for what, values in times.items():
        print(f"  {what:<19} us {_spread(values)}")
    per_parameter = [
        (a - b) / parameters
        for a, b in zip(times["guard (check_args)"], times["without parameters"], strict=True)
    ]
    print(f"  us per parameter    {_spread(per_parameter)}")
    share = [100 * g / s for g, s in zip(times["guard"], times["step"], strict=True)]
    print(f"  guard % of step     {_spread(share)}")


def main(argv: list[str] | None = None) -> int:
    """Measure the chosen workloads."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", default="sequential,tree,tiny,small,gpt")
    parser.add_argument("--number", type=int, default=200, help="calls per batch (x20: tiny)")
    parser.add_argument("--repeat", type=int, default=5, help="batches per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layers", type=int, default=8, help="depth of the gpt workload")
    parser.add_argument("--print-source", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="alloc's device")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="tiny's, alloc's and resnet's clock (cpu: process time)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from bench.compile_scaling import _commit, _load

    print(f"# command: python -m bench.guard_cost {' '.join(argv or sys.argv[1:])}")
    print(
        f"# commit {_commit()}, torch {torch.__version__}, 1 thread, load avg {_load()}; "
        f"median (lowest-highest) of {args.rounds} rounds, each the best of {args.repeat} batches"
    )
    only = args.only.split(",")
    torch.manual_seed(0)
    if "sequential" in only:
        measure_module("sequential", sequential(), torch.randn(4, 16), args)
    if "tree" in only:
        measure_module("tree 36x14", Tree(), torch.randn(1), args)
    if "tiny" in only:
        measure_tiny(args)
    if "small" in only:
        measure_small(args)
    if "alloc" in only:
        measure_alloc(args)
    if "resnet" in only:
        measure_resnet(args)
    if "gpt" in only:
        measure_gpt(args)
    print(f"# load avg at the end {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
