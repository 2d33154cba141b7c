"""Cost of the generated guard check of a compiled module, on CPU.

Two models: a 20-block ``nn.Sequential`` (Linear, ReLU, LayerNorm per block: 60
submodules, 61 submodule calls with the root), and a guard-heavy tree of 36 layers of
14 small leaf modules (504 leaves) shaped like the one of PyTorch's
``benchmarks/dynamo/microbenchmarks/dynamo_guard_overhead.py`` (each leaf reads an
optional weight, a constant width and a ``None`` bias; each layer reads a shared flag).

For each it reports, in microseconds per call (minimum over repeats):

* ``guard``: the cache entry's guard function alone, called as the runtime calls it
  for a positional call (``fetch_args``, else ``check_args``);
* ``call``: the whole compiled call; ``eager``: the module called directly;
* the guard count and the guard time per submodule.

Run: ``.venv/bin/python packages/capture/benchmarks/guard_cost.py [--print-source]``.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Any

import torch

import torchstrata.runtime


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


def _best_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    for _ in range(20):
        fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) * 1e6 / number


def measure(name: str, model: torch.nn.Module, x: torch.Tensor, args: argparse.Namespace) -> None:
    """Compile ``model``, check it runs like eager, and print its guard and call costs."""
    model.eval().requires_grad_(False)
    compiled = torchstrata.runtime.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=2e-3, rtol=1e-3)
        function = compiled.compiled_forward
        entries = function.cache.entries
        assert len(entries) == 1 and entries[0].run is not None, "not compiled"
        guards = entries[0].guards
        check = guards.fetch_args or guards.check_args
        assert check is not None, "no positional guard check"
        globals_ = function._globals
        call_args = (x,)
        result = check(call_args, globals_)
        assert (result is not None and not isinstance(result, int)) or result == -1, result
        if args.print_source:
            print(guards.args_source)
        guard_us = _best_us(lambda: check(call_args, globals_), args.number, args.repeat)
        call_us = _best_us(lambda: compiled(x), args.number, args.repeat)
        eager_us = _best_us(lambda: model(x), args.number, args.repeat)
    modules = sum(1 for _ in model.modules())
    print(
        f"{name:<12} modules {modules:>4}  guards {len(guards):>5}  guard {guard_us:7.2f} us"
        f"  ({guard_us * 1000 / modules:6.1f} ns/module)  call {call_us:7.2f} us"
        f"  eager {eager_us:8.2f} us"
    )


def main() -> None:
    """Measure both models."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--print-source", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    measure("sequential", sequential(), torch.randn(4, 16), args)
    measure("tree 36x14", Tree(), torch.randn(1), args)


if __name__ == "__main__":
    main()
