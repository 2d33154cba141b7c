"""Where lowering a new size of a symbolic entry reads the size's value (issue 33, 0380).

A symbolic entry makes its graph static for each new size (``core.concretize_graph``) and
lowers that static graph: every decision on a size after that point reads a plain ``int``
and is recorded nowhere. Lowering once for every size needs each such read turned into a
recorded predicate or taken out. This census counts them: while the entry lowers one new
size, the sizes that the concretizer makes from a symbolic expression are ``int``
subclasses that remember they stand for a symbol (arithmetic on them keeps it) and log
every read of their value, by kind and by the code line that read it:

* ``compare``: ``==``, ``<``, ``bool()``...: a decision (a predicate could record it);
* ``hash``: a dict or set key, a memo's key (a lookup decides by the value itself);
* ``print``: ``str``, ``repr``, ``format``: a literal in generated text or a cache key;
* ``convert``: ``int()``, ``operator.index``, ``float()`` from Python code.

The counts are lower bounds: C code reads an ``int`` subclass without calling any of its
methods (``range(n)``, ``list[n]``, torch's own size arguments), and what it then
computes from the value is no longer tracked. Only the reads made while the runtime's
``SizeSpecialisedRunner`` lowers the second size are counted (trace, partition and the
symbolic decomposition of the first size are not per size).

Workloads: ``decode`` (bench.dynamic_sizes's KV-cache step, caches of 16 then 21 rows) and
``block_train`` (bench.symbolic_lowering's two GPT blocks' training step, lengths 16 then
17), C++ backend, fresh caches::

    python -m bench.size_reads --workload decode --top 30
    python -m bench.size_reads --workload block_train --top 30
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from bench.cold import CACHE_VARIABLES

#: The kind of each logged method (see the module docstring).
KINDS = {
    **dict.fromkeys(("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"), "compare"),
    "__bool__": "compare",
    "__hash__": "hash",
    **dict.fromkeys(("__str__", "__repr__", "__format__"), "print"),
    **dict.fromkeys(("__int__", "__index__", "__float__"), "convert"),
}
#: Arithmetic whose result stays tracked (an ``int`` result from ints).
ARITHMETIC = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
    "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__pos__", "__abs__", "__pow__",
)  # fmt: skip


class Census:
    """The reads logged while :attr:`on`: ``reads[(kind, stage, site)]`` and the distinct
    symbolic expressions read."""

    def __init__(self) -> None:
        self.on = False
        self.reads: Counter[tuple[str, str, str]] = Counter()
        self.expressions: set[str] = set()
        #: expressions read other than by comparing (hashed, printed, converted): a
        #: recorder could only guard them by equality
        self.pinned: set[str] = set()

    def log(self, kind: str, expr: str) -> None:
        """One read of a tracked size standing for ``expr``, from the caller's caller."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        if frame is None:
            return
        via = ""
        while frame.f_code.co_filename.startswith("<attrs generated") and frame.f_back:
            # an attrs class's generated ``__eq__``/``__hash__``: named, and its caller's line
            owner = frame.f_code.co_filename.strip("<>").rsplit(".", 1)[-1]
            via = via or f" ({owner}.{frame.f_code.co_name})"
            frame = frame.f_back
        path = frame.f_code.co_filename
        place = path.split("torchstrata/", 1)[-1] if "torchstrata/" in path else path
        stage = place.split("/", 1)[0] if "torchstrata/" in path else "other"
        site = f"{place}:{frame.f_lineno} {frame.f_code.co_name}{via}"
        self.reads[(KINDS[kind], stage, site)] += 1
        self.expressions.add(expr)
        if KINDS[kind] != "compare":
            self.pinned.add(expr)


CENSUS = Census()


def _plain(value: Any) -> Any:
    return int.__index__(value) if isinstance(value, TrackedSize) else value


class TrackedSize(int):
    """An ``int`` that stands for the symbolic expression ``expr`` at one size, and logs
    every read of its value in :data:`CENSUS` while it is on."""

    expr: str

    def __new__(cls, value: int, expr: str) -> TrackedSize:
        made = int.__new__(cls, value)
        made.expr = expr
        return made


def _reader(name: str) -> Callable[..., Any]:
    method = getattr(int, name)

    def read(self: TrackedSize, *others: Any) -> Any:
        if CENSUS.on:
            CENSUS.log(name, self.expr)
        return method(int.__index__(self), *map(_plain, others))

    return read


def _arithmetic(name: str) -> Callable[..., Any]:
    method = getattr(int, name)

    def compute(self: TrackedSize, *others: Any) -> Any:
        result = method(int.__index__(self), *map(_plain, others))
        if type(result) is int and all(isinstance(other, int) for other in others):
            operands = ", ".join(
                other.expr if isinstance(other, TrackedSize) else repr(other) for other in others
            )
            return TrackedSize(result, f"{name.strip('_')}({self.expr}, {operands})")
        return result

    return compute


def _int(self: TrackedSize) -> TrackedSize:
    # ``int(size)`` (metadata's normalisation) keeps the size tracked: Python copies an
    # int subclass returned by ``__int__`` into a plain int only with a warning, so the
    # census patches the normaliser (``size_or_int``) instead of relying on this
    if CENSUS.on:
        CENSUS.log("__int__", self.expr)
    return self


for _name in KINDS:
    if _name != "__int__":
        setattr(TrackedSize, _name, _reader(_name))
TrackedSize.__int__ = _int  # type: ignore[method-assign,assignment]
for _name in ARITHMETIC:
    setattr(TrackedSize, _name, _arithmetic(_name))


def install() -> None:
    """Make the concretizer's sizes tracked, and count the reads while a
    ``SizeSpecialisedRunner`` lowers a size after its first."""
    import torchstrata.core.concretizer as concretizer
    import torchstrata.core.meta as meta
    from torchstrata.runtime.dynamic_shapes import SizeSpecialisedRunner

    evaluate, size_or_int = concretizer.evaluate, meta.size_or_int

    def tracked_evaluate(value: Any, values: Any) -> Any:
        result = evaluate(value, values)
        if CENSUS.on and type(result) is int:
            return TrackedSize(result, str(value.node.expr))
        return result

    def keep_tracked(value: Any) -> Any:
        return value if type(value) is TrackedSize else size_or_int(value)

    concretizer.evaluate = tracked_evaluate  # type: ignore[assignment]
    meta.size_or_int = keep_tracked  # type: ignore[assignment]
    lower = SizeSpecialisedRunner._lower
    lowered: list[int] = []

    def counted(runner: Any, key: tuple[int, ...]) -> Any:
        lowered.append(1)
        CENSUS.on = len(lowered) == 2
        try:
            return lower(runner, key)
        finally:
            CENSUS.on = False

    SizeSpecialisedRunner._lower = counted  # type: ignore[method-assign]


def _decode() -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
    from bench.dynamic_sizes import decode_step

    def inputs(rows: int) -> tuple[Any, ...]:
        return (torch.randn(2, rows, 32), torch.randn(2, rows, 32), *torch.randn(3, 2, 1, 32))

    return decode_step, [inputs(16), inputs(21)]


def _block_train() -> tuple[Callable[..., Any], list[tuple[Any, ...]]]:
    from bench.symbolic_lowering import BATCH, WIDTH, _blocks, step

    model = _blocks()
    calls = [(model, torch.randn(BATCH, t, WIDTH), torch.randn(BATCH, t, WIDTH)) for t in (16, 17)]
    return step, calls


WORKLOADS = {"decode": _decode, "block_train": _block_train}


def report(top: int) -> None:
    """Print the census: totals by kind and stage, then the ``top`` sites."""
    reads = CENSUS.reads
    total = sum(reads.values())
    by_kind: Counter[str] = Counter()
    by_stage: Counter[str] = Counter()
    for (kind, stage, _), count in reads.items():
        by_kind[kind] += count
        by_stage[stage] += count
    sites = {site for _, _, site in reads}
    print(
        f"SUMMARY {total} reads of symbolic sizes at {len(sites)} code lines, "
        f"{len(CENSUS.expressions)} distinct expressions, {len(CENSUS.pinned)} of them "
        "hashed, printed or converted"
    )
    symbols = sorted(e for e in CENSUS.expressions if e.isidentifier())
    print(
        "bare symbols read: "
        + ", ".join(f"{e} ({'pinned' if e in CENSUS.pinned else 'compared only'})" for e in symbols)
    )
    print("by kind: " + ", ".join(f"{k} {n}" for k, n in by_kind.most_common()))
    print("by stage: " + ", ".join(f"{k} {n}" for k, n in by_stage.most_common()))
    for (kind, stage, site), count in reads.most_common(top):
        print(f"{count:5d} {kind:8s} {stage:9s} {site}")


def main(argv: list[str] | None = None) -> int:
    """Compile the workload with ``dynamic=True``, call it at two sizes, print the census."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="decode")
    parser.add_argument("--top", type=int, default=30, help="sites printed")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="size-reads-")
    for variable in CACHE_VARIABLES:
        os.environ[variable] = os.path.join(scratch, variable.lower())
    torch.set_num_threads(1)
    torch.manual_seed(0)
    import torchstrata.runtime as tsr

    install()
    fn, calls = WORKLOADS[args.workload]()
    compiled = tsr.compile(fn, dynamic=True, codegen="cpp")
    for call in calls:
        compiled(*call)
    print(f"# workload {args.workload}, torch {torch.__version__}, the second size's lowering")
    report(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
