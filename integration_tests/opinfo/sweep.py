"""The full OpInfo sweep: ``python -m integration_tests.opinfo.sweep [--ops a,b] [--max-samples N]``.

For every OpInfo in ``op_db`` and every dtype among float32, float64, float16, bfloat16,
int64, bool and complex64 that the op supports on CPU, the first ``--max-samples`` samples and their
non-contiguous variants run through capture and the pipeline
(:func:`~.captured.run_captured_sample`). Prints a table per op: samples, what capture
did (full graph / graph breaks / declined / error) and, for captured samples, how many
were decomposed / left extern / mismatched / skipped; then the totals (the closure
fallback's apart), the ATen ops left extern, capture's decline and error reasons, the
skip reasons and every mismatch.

``--codegen cpp`` (or ``triton``) runs each sample through the whole compiler instead
(:mod:`.compiled`); with it, ``--check grad`` checks the samples' gradients through the
compiled training path (:mod:`.gradients`), ``--check errors`` the OpInfos' error
inputs (:mod:`.errors`), ``--check layouts`` whether the dense outputs come back in
eager's memory layout (:mod:`.layout_survey`), ``--check grad-layouts`` whether the dense
input gradients do (:mod:`.grad_layout_survey`). ``--codegen eager`` runs the compiled
checks with ``CompileOptions(codegen="eager")``: the same traced graphs, no generated code.
"""

from __future__ import annotations

import argparse
import collections
import logging
import multiprocessing
import os
import re
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .captured import run_captured_sample
from .compiled import CompiledOutcome, report_compiled, run_compiled_sample
from .errors import BAD_ERROR_STATUSES, ERROR_STATUSES, run_error_input
from .grad_layout_survey import run_grad_layout_sample
from .gradients import run_gradient_sample
from .harness import Outcome
from .layout_survey import BAD_LAYOUT_STATUSES, LAYOUT_STATUSES, run_layout_sample

DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.bool,
    torch.complex64,
)
STATUSES = ("decomposed", "extern", "mismatch", "skip")


#: Layouts a sample is also run in (``--layouts``): the OpInfo's non-contiguous copy,
#: column-major (the last two dimensions' strides swapped) and channels-last (4-D).
LAYOUTS = ("noncontig", "transposed", "channels-last")


def samples(
    op: Any,
    dtype: torch.dtype,
    max_samples: int,
    device: str = "cpu",
    grad: bool = False,
    layouts: tuple[str, ...] = ("noncontig",),
) -> Iterator[tuple[str, Any]]:
    """``(label, sample)``: the op's first samples (made with ``requires_grad`` where the
    OpInfo wants it, with ``grad``), each also in each of ``layouts`` (see
    :data:`LAYOUTS`) that changes one of its tensors."""
    torch.manual_seed(0)
    try:
        generated = op.sample_inputs(device, dtype, requires_grad=grad)
        for index, sample in enumerate(generated):
            if index >= max_samples:
                break
            yield f"{index}", sample
            for layout in layouts:
                variant = (
                    sample.noncontiguous() if layout == "noncontig" else relaid(sample, layout)
                )
                if variant is not None:
                    yield f"{index}-{layout}", variant
    except Exception as error:  # noqa: BLE001 - a broken generator is a skip, counted
        yield f"sample_inputs failed: {type(error).__name__}", None


def relaid(sample: Any, layout: str) -> Any:
    """``sample`` with its tensors' values in another memory layout (``"transposed"``:
    column-major, ``"channels-last"``), or None when no tensor of it has one."""
    changed = []

    def relay(tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor) or tensor.layout is not torch.strided:
            return tensor
        if layout == "transposed" and tensor.dim() >= 2 and tensor.shape[-1] * tensor.shape[-2] > 1:
            new = tensor.mT.contiguous().mT
        elif layout == "channels-last" and tensor.dim() == 4:
            new = tensor.contiguous(memory_format=torch.channels_last)
            if new.stride() == tensor.stride():
                return tensor
        else:
            return tensor
        changed.append(tensor)
        return new.detach().requires_grad_(tensor.requires_grad)

    variant = sample.transform(relay)
    return variant if changed else None


def run_op(
    op: Any,
    dtypes: Iterable[torch.dtype],
    max_samples: int,
    codegen: str = "interpret",
    device: str = "cpu",
    check: str = "outputs",
    layouts: tuple[str, ...] = ("noncontig",),
) -> list[tuple[str, Any]]:
    """Every (dtype, sample) outcome of one OpInfo: an :class:`Outcome` through capture
    and the interpreter (``codegen="interpret"``), else a :class:`CompiledOutcome` through
    ``torchstrata.runtime.compile`` with that code generator on ``device``: of the
    samples' outputs (``check="outputs"``), of their gradients (``"grad"``,
    :func:`.gradients.run_gradient_sample`), or of the OpInfo's error inputs
    (``"errors"``, :func:`.errors.run_error_input`; ``dtypes``, ``max_samples`` and
    ``layouts`` do not apply). Each sample also runs in each of ``layouts``."""
    if check == "errors":
        return _run_errors(op, codegen, device)
    grad = check in ("grad", "grad-layouts")
    supported = op.supported_dtypes(device)
    results: list[tuple[str, Any]] = []
    for dtype in dtypes:
        if dtype not in supported:
            continue
        for label, sample in samples(op, dtype, max_samples, device, grad, layouts):
            where = f"{dtype}:{label}"
            if sample is None:
                results.append((where, Outcome("skip", label)))
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    if check == "grad-layouts":
                        outcome: Any = run_grad_layout_sample(op, sample, codegen)
                    elif grad:
                        outcome = run_gradient_sample(op, sample, codegen)
                    elif check == "layouts":
                        outcome = run_layout_sample(op, sample, codegen)
                    elif codegen == "interpret":
                        outcome = run_captured_sample(op, sample)
                    else:
                        outcome = run_compiled_sample(op, sample, codegen)
                except Exception as error:  # noqa: BLE001 - the harness itself must not stop
                    reason = f"harness: {type(error).__name__}: {error}"
                    outcome = Outcome("mismatch", reason)
                    if codegen != "interpret":
                        outcome = CompiledOutcome("mismatch", reason)
            results.append((where, outcome))
    return results


def _run_errors(op: Any, codegen: str, device: str) -> list[tuple[str, Any]]:
    if getattr(op, "error_inputs_func", None) is None:
        return []
    try:
        error_inputs = list(op.error_inputs(device))
    except Exception as error:  # noqa: BLE001 - a broken generator is a skip, counted
        return [("error_inputs", CompiledOutcome("skip", f"error_inputs failed: {error}"))]
    results: list[tuple[str, Any]] = []
    for index, error_input in enumerate(error_inputs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                outcome = run_error_input(op, error_input, codegen)
            except Exception as error:  # noqa: BLE001 - the harness itself must not stop
                outcome = CompiledOutcome("accepted", f"harness: {type(error).__name__}: {error}")
        results.append((f"error{index}", outcome))
    return results


def op_label(op: Any) -> str:
    """``name`` or ``name.variant``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


#: Where a mismatch reason's cause ends and the comparison's details begin.
_CAUSE = re.compile(r": (?:output \d+|mutated input|\d+ outputs)")
CAPTURE_KINDS = ("full", "breaks", "eager", "declined", "error")
FALLBACK_KINDS = ("eager", "declined", "error")


def _counts(results: Iterable[Outcome]) -> collections.Counter[str]:
    return collections.Counter(outcome.status for outcome in results)


def _line(label: str, counts: collections.Counter[str]) -> str:
    return f"{label}: {sum(counts.values())}  " + "  ".join(f"{s}: {counts[s]}" for s in STATUSES)


def _top(title: str, counter: collections.Counter[str], out: Any, limit: int = 15) -> None:
    print(f"\n{title} ({sum(counter.values())} samples):", file=out)
    for reason, count in counter.most_common(limit):
        print(f"  {count:6}  {reason}", file=out)


def _reasons(
    title: str, per_op: dict[str, list[tuple[str, Outcome]]], kinds: tuple[str, ...], out: Any
) -> None:
    """The ``capture_reason`` counts of samples whose capture was one of ``kinds``, each
    with up to three OpInfos it came from."""
    counter: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for name, results in per_op.items():
        for _, outcome in results:
            if outcome.capture in kinds:
                counter[outcome.capture_reason] += 1
                if name not in examples[outcome.capture_reason]:
                    examples[outcome.capture_reason].append(name)
    print(f"\n{title} ({sum(counter.values())} samples):", file=out)
    for reason, count in counter.most_common(15):
        ops = examples[reason]
        more = f", +{len(ops) - 3} ops" if len(ops) > 3 else ""
        print(f"  {count:6}  {reason}  [{', '.join(ops[:3])}{more}]", file=out)


def report(per_op: dict[str, list[tuple[str, Outcome]]], out: Any = sys.stdout) -> dict[str, int]:
    """Print the table; return the totals (statuses, and ``capture:<kind>`` counts)."""
    outcomes = [o for results in per_op.values() for _, o in results]
    heads = ("samples", *CAPTURE_KINDS, *STATUSES)
    print(f"{'op':40} " + " ".join(f"{h:>8}" for h in heads), file=out)
    extern_ops: collections.Counter[str] = collections.Counter()
    mismatches, untraced = [], []
    for name, results in per_op.items():
        counts = _counts(o for _, o in results if o.capture in ("full", "breaks"))
        kinds = collections.Counter(o.capture for _, o in results)
        row = [len(results), *(kinds[k] for k in CAPTURE_KINDS), *(counts[s] for s in STATUSES)]
        print(f"{name:40} " + " ".join(f"{n:8}" for n in row), file=out)
        for where, outcome in results:
            extern_ops.update(outcome.extern)
            if outcome.status == "mismatch":
                via = "closure fallback, " if outcome.capture in FALLBACK_KINDS else ""
                mismatches.append(f"{name} [{where}] ({via}{outcome.capture}): {outcome.reason}")
        if results and all(o.status == "skip" and o.capture == "" for _, o in results):
            untraced.append(name)
    captured = [o for o in outcomes if o.capture in ("full", "breaks")]
    fallback = [o for o in outcomes if o.capture in FALLBACK_KINDS]
    kinds = collections.Counter(o.capture for o in outcomes)
    fully = sum(
        1
        for results in per_op.values()
        if any(o.status == "decomposed" and o.capture == "full" for _, o in results)
        and all(o.status == "decomposed" and o.capture == "full" for _, o in results if o.capture)
    )
    print("", file=out)
    print(f"ops: {len(per_op)} ({sum(1 for r in per_op.values() if r)} with samples, "
          f"{fully} fully captured and decomposed)", file=out)  # fmt: skip
    print(_line("samples", _counts(outcomes)), file=out)
    print(f"capture: full graph {kinds['full']}  with graph breaks {kinds['breaks']}  "
          f"all ops eager {kinds['eager']}  declined {kinds['declined']}  errors {kinds['error']}  "
          f"not reached (skipped before capture) {kinds['']}", file=out)  # fmt: skip
    print(_line("  captured (full + breaks)", _counts(captured)), file=out)
    print(_line("  closure fallback (eager + declined + errors)", _counts(fallback)), file=out)
    _top("ATen ops left extern", extern_ops, out, 40)
    _reasons("capture errors (capture or its program raised)", per_op, ("error",), out)
    _reasons("capture declined (no program)", per_op, ("declined",), out)
    _reasons("first graph break, before any op (all ops eager)", per_op, ("eager",), out)
    _reasons("first graph break (captured with breaks)", per_op, ("breaks",), out)
    _top(
        "skip reasons",
        collections.Counter(f"{o.reason}" for o in outcomes if o.status == "skip"),
        out,
        40,
    )
    print(f"\nops skipped before capture on every sample ({len(untraced)}): {', '.join(untraced)}",
          file=out)  # fmt: skip
    causes = collections.Counter(
        _CAUSE.split(o.reason)[0][:100] for o in outcomes if o.status == "mismatch"
    )
    _top("mismatch causes (the stage whose own result is already wrong)", causes, out)
    print(f"\nmismatches ({len(mismatches)}):", file=out)
    for line in mismatches:
        print(f"  {line}", file=out)
    totals = dict(_counts(outcomes))
    totals.update({f"capture:{k}": kinds[k] for k in CAPTURE_KINDS})
    return totals


def _run_indexed(
    item: tuple[int, int, tuple[torch.dtype, ...], str, str, str, tuple[str, ...]],
) -> list[tuple[str, Any]]:
    """The outcomes of ``op_db[index]`` (imported here too: spawned workers start bare)."""
    from torch.testing._internal.common_methods_invocations import op_db

    logging.getLogger("torchstrata").setLevel(logging.ERROR)  # later-segment fallbacks
    index, max_samples, dtypes, codegen, device, check, layouts = item
    return run_op(op_db[index], dtypes, max_samples, codegen, device, check, layouts)


def _reported(
    results: Iterable[list[tuple[str, Any]]], ops: list[Any]
) -> Iterator[list[tuple[str, Any]]]:
    """``results`` as they arrive, each op's mismatches printed to stderr at once (a run
    cut short still shows what it found)."""
    for op, result in zip(ops, results):
        for where, outcome in result:
            if outcome.status in ("mismatch", *BAD_ERROR_STATUSES, *BAD_LAYOUT_STATUSES):
                kind = "MISMATCH" if outcome.status == "mismatch" else outcome.status.upper()
                print(f"{kind} {op_label(op)} [{where}]: {outcome.reason}", file=sys.stderr)
        yield result


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; exit status 1 if anything mismatched."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--max-samples", type=int, default=2, help="samples per op and dtype")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument(
        "--codegen",
        choices=("interpret", "cpp", "triton", "eager"),
        default="interpret",
        help="interpret: capture -> aot -> decompose -> reference interpreter (default); "
        "cpp, triton: the whole compiler through torchstrata.runtime.compile; eager: "
        "compile with codegen='eager' (traced graphs, no generated code)",
    )
    parser.add_argument("--device", default="cpu", help="where the samples live (cpu, cuda)")
    parser.add_argument(
        "--check",
        choices=("outputs", "grad", "errors", "layouts", "grad-layouts"),
        default="outputs",
        help="with --codegen cpp or triton: the samples' outputs (default), their input "
        "gradients through the compiled training path, the OpInfos' error inputs "
        "(each must raise eager's exception type), or whether the samples' dense outputs "
        "come back in eager's memory layout, or whether their dense input gradients do "
        "(grad-layouts)",
    )
    parser.add_argument(
        "--dtypes", help="comma-separated subset of " + ",".join(str(d)[6:] for d in DTYPES)
    )
    parser.add_argument(
        "--layouts",
        default="noncontig",
        help="comma-separated layouts each sample also runs in, of " + ",".join(LAYOUTS),
    )
    args = parser.parse_args(argv)
    layouts = tuple(args.layouts.split(",")) if args.layouts else ()
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        parser.error(f"unknown layouts {sorted(unknown)}; choose from {LAYOUTS}")
    if args.check != "outputs" and args.codegen == "interpret":
        parser.error(f"--check {args.check} needs --codegen cpp or triton")
    dtypes = DTYPES
    if args.dtypes:
        dtypes = tuple(getattr(torch, name) for name in args.dtypes.split(","))
    logging.getLogger("torchstrata").setLevel(logging.ERROR)  # later-segment fallbacks
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(args.ops.split(",")) if args.ops else None
    chosen = [
        index
        for index, op in enumerate(op_db)
        if wanted is None or op.name in wanted or op_label(op) in wanted
    ]
    ops = [op_db[index] for index in chosen]
    start = time.monotonic()
    work = [
        (index, args.max_samples, dtypes, args.codegen, args.device, args.check, layouts)
        for index in chosen
    ]
    if args.jobs > 1:
        context = "spawn" if args.device != "cpu" else "fork"  # CUDA does not survive a fork
        with multiprocessing.get_context(context).Pool(args.jobs, maxtasksperchild=20) as pool:
            results = list(_reported(pool.imap(_run_indexed, work, chunksize=1), ops))
    else:
        results = list(_reported(map(_run_indexed, work), ops))
    per_op = {op_label(op): result for op, result in zip(ops, results)}
    if args.check == "errors":
        mismatched = report_compiled(per_op, sys.stdout, ERROR_STATUSES, BAD_ERROR_STATUSES)
    elif args.check in ("layouts", "grad-layouts"):
        mismatched = report_compiled(per_op, sys.stdout, LAYOUT_STATUSES, BAD_LAYOUT_STATUSES)
    elif args.codegen != "interpret":
        mismatched = report_compiled(per_op, sys.stdout)
    else:
        mismatched = report(per_op).get("mismatch", 0)
    print(f"\n{time.monotonic() - start:.0f} s", file=sys.stdout)
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
