"""Regenerate the graph corpus that ``torchstrata.core.pytest_plugin`` checks passes on.

    python integration_tests/make_pass_corpus.py

Each small function below goes through the real stages (``explain()``, C++ codegen off)
for one call; its torch-level graph, ATen forward (and backward, for a training call) and
prims graph are written in core's text form to
``packages/core/src/torchstrata/core/corpus_graphs/<level>/<name>[-<part>].txt``. A graph
is kept only if it reads back and the reference interpreter gives the same results twice
on random inputs (no random numbers, no data-dependent indices), which translation
validation needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, Graph, interpret, parse, random_inputs

OUT = Path(__file__).parents[1] / "packages/core/src/torchstrata/core/corpus_graphs"


def pointwise_chain(x, y):
    return torch.relu(x * y + 1.0) - torch.sigmoid(y)


def softmax_rows(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def reductions(x):
    return x.sum(0), x.mean(-1), x.amax(1, keepdim=True)


def views(x):
    return x.reshape(4, 6).t()[1:, ::2] * 2


def concat_where(x, y):
    return torch.where(x > y, torch.cat([x, y], 0)[:4], y.abs())


def integers(a, b):
    return (a * 3 + b) % 5, a // 2


def half_casts(x):
    return (x.half() * 2).float().exp()


def broadcast_bias(x, b):
    return torch.tanh(x + b[:, None])


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target.argmax(-1))


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[Any, ...]], bool]] = {
    "pointwise_chain": (pointwise_chain, lambda: (torch.randn(4, 8), torch.randn(4, 8)), True),
    "softmax_rows": (softmax_rows, lambda: (torch.randn(3, 16),), True),
    "layer_norm": (
        layer_norm,
        lambda: (torch.randn(2, 3, 8), torch.randn(8), torch.randn(8)),
        True,
    ),
    "linear_gelu": (
        linear_gelu,
        lambda: (torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)),
        True,
    ),
    "reductions": (reductions, lambda: (torch.randn(5, 7),), False),
    "views": (views, lambda: (torch.randn(2, 3, 4),), False),
    "concat_where": (concat_where, lambda: (torch.randn(4, 5), torch.randn(4, 5)), False),
    "integers": (integers, lambda: (torch.randint(0, 9, (6,)), torch.randint(0, 9, (6,))), False),
    "half_casts": (half_casts, lambda: (torch.randn(8),), False),
    "broadcast_bias": (broadcast_bias, lambda: (torch.randn(3, 4), torch.randn(3)), True),
    "cross_entropy": (cross_entropy, lambda: (torch.randn(4, 10), torch.randn(4, 10)), True),
    "rms_norm": (rms_norm, lambda: (torch.randn(2, 8), torch.randn(8)), True),
}


def _deterministic(graph: Graph) -> bool:
    """Reads back, and the interpreter gives the same results twice on random inputs."""
    try:
        again = parse(str(graph))
        inputs = random_inputs(again, seed=1)
        first = interpret(again, *inputs)
        second = interpret(again, *inputs)
    except Exception as error:  # noqa: BLE001 - such a graph is left out, with the reason
        print(f"  left out: {type(error).__name__}: {error}")
        return False
    return all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def main() -> None:
    for name, (fn, make_args, train) in CASES.items():
        args = make_args()
        if train:
            args = tuple(a.requires_grad_() if a.is_floating_point() else a for a in args)
        report = rt.explain(rt.compile(fn, codegen="eager"), *args)
        assert report.graph_count == 1, (name, report)
        graphs = {"torch": [("", report.graphs[0])], "aten": [("", report.aten_graphs[0])]}
        if train:
            options = CompileOptions(codegen="eager")
            aot = rt.Pipeline().compile_graph(report.graphs[0], options).aot
            assert aot is not None and aot.backward is not None, name
            graphs["aten"] = [("-forward", aot.forward), ("-backward", aot.backward)]
        with torch.no_grad():
            prims = rt.explain(rt.compile(fn), *(a.detach() for a in args)).prims_graphs[0]
        graphs["prims"] = [("", prims)]
        for level, parts in graphs.items():
            for suffix, graph in parts:
                if graph is None or not _deterministic(graph):
                    continue
                path = OUT / level / f"{name}{suffix}.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(str(graph) + "\n")
                print(f"wrote {path.relative_to(OUT)}")


if __name__ == "__main__":
    main()
