"""Which ATen ops' meta kernels lay out their results otherwise than the CPU kernels.

A CPU graph is traced on meta tensors, and :func:`torchstrata.autograd.cpu_layouts.cpu_layout`
gives a result the CPU kernel's layout where it knows the meta kernel answers otherwise.
This survey finds the ops it does not know yet: each OpInfo sample (float32, also
transposed and channels-last) runs eagerly on the CPU, forward and backward (seeded
row-major cotangents, as :mod:`.gradients` pulls them), under a dispatch mode that calls
every ATen op a second time on meta tensors of the same shapes and strides, passes the
meta result through ``cpu_layout`` and compares each dense result's layout with the CPU
kernel's. Views, in-place and ``out=`` ops are left out (they keep their operands'
layouts on every device).

``python -m integration_tests.opinfo.kernel_layout_survey [--ops a,b] [--max-samples 2]``
prints each op that disagrees (forward or backward), how often and its first example.
``--raw`` leaves ``cpu_layout`` out: the meta kernels' own answers.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from torchstrata.autograd.cpu_layouts import cpu_layout
from torchstrata.core import is_dense, same_layout

from .gradients import run_grads
from .harness import UNCHECKED_PREFIXES
from .sweep import op_label, samples
from .user_fn import user_function


def _meta_copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.layout is torch.strided:
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def _skipped(func: torch._ops.OpOverload) -> bool:
    """Views, in-place and ``out=`` ops: their results' layouts are their operands'."""
    schema = func._schema
    if any(r.alias_info is not None for r in schema.returns):
        return True
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


class MetaLayouts(TorchDispatchMode):
    """Runs each ATen op on the CPU and on meta copies of its operands; collects
    ``(op, description)`` for each dense CPU result that the meta answer (through
    ``cpu_layout`` unless ``raw``) lays out otherwise."""

    def __init__(self, raw: bool = False) -> None:
        super().__init__()
        self.raw = raw
        self.found: list[tuple[str, str]] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if not isinstance(func, torch._ops.OpOverload) or _skipped(func):
            return result
        try:
            meta_args, meta_kwargs = tree_map(_meta_copy, (args, kwargs))
            meta = func(*meta_args, **meta_kwargs)
            if not self.raw:
                meta = cpu_layout(func, tuple(meta_args), dict(meta_kwargs), meta, on_meta=True)
        except Exception:  # noqa: BLE001 - no meta kernel: traced otherwise, not this question
            return result
        cpus = result if isinstance(result, tuple | list) else (result,)
        metas = meta if isinstance(meta, tuple | list) else (meta,)
        for index, (cpu, answer) in enumerate(zip(cpus, metas, strict=False)):
            if not isinstance(cpu, torch.Tensor) or not isinstance(answer, torch.Tensor):
                continue
            shape = tuple(cpu.shape)
            if tuple(answer.shape) != shape or not is_dense(shape, cpu.stride()):
                continue
            if not same_layout(shape, answer.stride(), cpu.stride()):
                shapes = [
                    f"{list(a.shape)}{a.stride()}" for a in args if isinstance(a, torch.Tensor)
                ]
                self.found.append(
                    (
                        func.name(),
                        f"result {index}: meta {answer.stride()} vs cpu {cpu.stride()} "
                        f"(operands {', '.join(shapes)})",
                    )
                )
        return result


def survey_op(op: Any, max_samples: int, raw: bool) -> list[tuple[str, str]]:
    """``(ATen op, description)`` for every disagreement in one OpInfo's samples."""
    if not op.supports_autograd or op.name.startswith(UNCHECKED_PREFIXES):
        return []
    if torch.float32 not in op.supported_dtypes("cpu"):
        return []
    found: list[tuple[str, str]] = []
    layouts = ("transposed", "channels-last")
    for label, sample in samples(op, torch.float32, max_samples, "cpu", True, layouts):
        if sample is None:
            continue
        fn, tensors, _ = user_function(op.op, sample, op.name)
        if any(t.is_complex() or t.layout is not torch.strided for t in tensors):
            continue
        mode = MetaLayouts(raw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with mode:
                    run_grads(fn, tensors)
            except Exception:  # noqa: BLE001 - eager refuses the sample: not our question
                continue
        found += [(name, f"[{label}] {what}") for name, what in mode.found]
    return found


def _run_indexed(item: tuple[int, int, bool]) -> tuple[str, list[tuple[str, str]]]:
    from torch.testing._internal.common_methods_invocations import op_db

    index, max_samples, raw = item
    op = op_db[index]
    return op_label(op), survey_op(op, max_samples, raw)


def _results(work: list[tuple[int, int, bool]], jobs: int) -> Iterator[tuple[str, Any]]:
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=20) as pool:
            yield from pool.imap(_run_indexed, work, chunksize=4)
    else:
        yield from map(_run_indexed, work)


def main(argv: list[str] | None = None) -> int:
    """Run the survey; exit status 1 if any op disagrees."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--max-samples", type=int, default=2, help="samples per op")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--raw", action="store_true", help="the meta kernels' own layouts")
    args = parser.parse_args(argv)
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(args.ops.split(",")) if args.ops else None
    work = [
        (index, args.max_samples, args.raw)
        for index, op in enumerate(op_db)
        if wanted is None or op.name in wanted or op_label(op) in wanted
    ]
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    opinfos: dict[str, set[str]] = collections.defaultdict(set)
    for label, found in _results(work, args.jobs):
        for name, what in found:
            counts[name] += 1
            examples.setdefault(name, f"{label} {what}")
            opinfos[name].add(label)
    print(f"ATen ops whose meta layout differs from the CPU kernel's ({len(counts)}):")
    for name, count in counts.most_common():
        print(f"  {count:5}  {name}  ({len(opinfos[name])} OpInfos)  e.g. {examples[name]}")
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
