"""One OpInfo sample through the whole compiler, generated kernels included.

:mod:`.captured` checks capture, aot and decompose through the reference interpreter.
This module runs the same user function (:func:`.user_fn.user_function`) through
``torchstrata.runtime.compile`` with real code generation (``cpp`` on the CPU, ``triton``
on a GPU or under Triton's interpreter) and compares each call with eager, float16 and
bfloat16 against a float64 run as :func:`.harness.compare` does. The compiled function is
called twice on fresh copies of the inputs: the first call compiles, the second runs
behind the guards.

Every sample ends in one status:

* ``compiled``: ran compiled code, results equal to eager's;
* ``eager``: ran eagerly by design (graph break before any op, capture declined), right;
* ``fallback``: a stage failed and the call fell back to eager with a warning, right;
* ``mismatch``: a wrong result, shape, dtype, mutated input, or an exception eager does
  not raise (the compiler must never do either);
* ``eager-differs``: on a GPU, a result that differs from eager there but matches eager
  on the CPU. Seen on the H200 (torch 2.11): a training batch norm whose running mean is
  a non-contiguous view leaves it unchanged on CUDA, where the CPU (and ours) update it;
* ``skip``: not a question for the compiler (eager fails, non-tensor or sparse output).

Results must have eager's structure exactly (``type(result) is type(eager)`` at every
level: ``torch.return_types`` structseqs, tuples, lists) and eager's dtypes.
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions
from torchstrata.runtime import TorchstrataFallbackWarning

from .captured import eager_baseline, fresh, outputs_mismatch, run_on_copies
from .harness import SEED, first_line, flat_outputs, float64_reference, structure_mismatch
from .user_fn import user_function

#: What one call of a compiled function gives :func:`call_twice`'s check.
Result = TypeVar("Result")

COMPILED_STATUSES = ("compiled", "eager", "fallback", "mismatch", "eager-differs", "skip")


@attrs.frozen
class CompiledOutcome:
    """What happened to one sample (``reason``: the fallback, eager or mismatch reason)."""

    status: str
    reason: str = ""


def eager_reason(compiled: Any) -> str | None:
    """Why the first cache entry runs eagerly, or None when it runs compiled code."""
    entries = compiled.cache.entries
    if entries and entries[0].run is None:
        return (entries[0].reason or "eager").splitlines()[0][:120]
    return None


def call_fresh(
    compiled: Callable[..., Any], tensors: Sequence[torch.Tensor]
) -> tuple[tuple[Any, list[torch.Tensor]], list[str]]:
    """``compiled`` on fresh copies: ((result, the inputs after the call), fallback
    warnings), the shape :func:`call_twice` calls for."""
    inputs = [fresh(t) for t in tensors]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(SEED)
        value = compiled(*inputs)
    return (value, inputs), fallback_messages(caught)


def fallback_messages(caught: Sequence[warnings.WarningMessage]) -> list[str]:
    """The first lines of the :class:`TorchstrataFallbackWarning` among ``caught``."""
    return [
        str(w.message).splitlines()[0][:160]
        for w in caught
        if issubclass(w.category, TorchstrataFallbackWarning)
    ]


def run_compiled_sample(op: Any, sample: Any, codegen: str) -> CompiledOutcome:
    """Compile one OpInfo sample's function with ``codegen``, call it twice, compare."""
    fn, tensors, _ = user_function(op.op, sample, op.name)
    baseline = eager_baseline(fn, tensors)
    if isinstance(baseline, str):
        return CompiledOutcome("skip", baseline)
    outputs, eager_inputs, expected = baseline
    reference = float64_reference(fn, tensors)
    compiled = tsr.compile(fn, options=CompileOptions(codegen=codegen))

    def check(call: str, result: tuple[Any, list[torch.Tensor]]) -> CompiledOutcome | None:
        value, inputs = result
        got = flat_outputs(value) or []
        problem = structure_mismatch(value, expected)
        problem = problem or outputs_mismatch(op, got, outputs, reference)
        if problem is None:
            problem = outputs_mismatch(op, inputs, eager_inputs, None)
            problem = f"mutated input {problem}" if problem else None
        if problem is None:
            return None
        if matches_cpu_eager(op, fn, tensors, outputs, got, inputs):
            return CompiledOutcome("eager-differs", f"{call}: {problem}")
        return CompiledOutcome("mismatch", f"{call}: {problem}")

    return call_twice(compiled, lambda: call_fresh(compiled, tensors), check)


def call_twice(
    compiled: Any,
    call: Callable[[], tuple[Result, list[str]]],
    check: Callable[[str, Result], CompiledOutcome | None],
) -> CompiledOutcome:
    """The sample loop shared by the compiled checks: ``call()`` runs ``compiled`` once
    (returning its result and the fallback warnings it raised); it runs twice, the first
    call compiling and the second running behind the guards. ``check(call_name, result)``
    judges each call's result, returning an outcome that ends the sample or None.

    A call that raises is a ``mismatch`` (eager ran the sample: ours must too). After two
    calls that pass the check: ``fallback`` if either warned, ``eager`` if the compiled
    function's first cache entry runs eagerly, else ``compiled``."""
    fallbacks: list[str] = []
    for name in ("first call", "second call"):
        try:
            result, warned = call()
        except Exception as error:  # noqa: BLE001 - eager ran this sample: ours must too
            return CompiledOutcome("mismatch", f"{name} raised {first_line(error)}")
        fallbacks += warned
        outcome = check(name, result)
        if outcome is not None:
            return outcome
    if fallbacks:
        return CompiledOutcome("fallback", fallbacks[0])
    eager = eager_reason(compiled)
    return CompiledOutcome("eager", eager) if eager is not None else CompiledOutcome("compiled")


def matches_cpu_eager(
    op: Any,
    fn: Callable[..., Any],
    tensors: Sequence[torch.Tensor],
    device_outputs: Sequence[torch.Tensor],
    got: Sequence[Any],
    inputs: Sequence[torch.Tensor],
) -> bool:
    """Whether a GPU result (outputs ``got``, inputs after the call ``inputs``) matches
    eager run on CPU copies of ``tensors``; False on the CPU or when that run fails.

    Where eager's output dtype differs between the CPU and the device (``device_outputs``:
    eager's there), ours is compared in the CPU's dtype: CUDA's float16 batch norm in
    eval mode returns float32 statistics of the running stats' shape, the CPU empty
    float16 ones (H200, torch 2.11)."""
    if not tensors or tensors[0].device.type == "cpu":
        return False
    cpu = [fresh(t, on_cpu=True) for t in tensors]
    try:
        expected, eager_inputs = run_on_copies(fn, cpu)
    except Exception:  # noqa: BLE001 - no CPU answer: the mismatch stands
        return False
    outputs = flat_outputs(expected) or []
    reference = float64_reference(fn, cpu)
    moved = [
        t.cpu().to(cpu_out.dtype) if cpu_out.dtype != device_out.dtype else t.cpu()
        for t, cpu_out, device_out in zip(got, outputs, device_outputs, strict=False)
    ]
    if outputs_mismatch(op, moved, outputs, reference) is not None:
        return False
    return outputs_mismatch(op, [t.cpu() for t in inputs], eager_inputs, None) is None


def report_compiled(
    per_op: dict[str, list[tuple[str, CompiledOutcome]]],
    out: Any,
    columns: Sequence[str] = COMPILED_STATUSES,
    bad: Sequence[str] = ("mismatch",),
) -> int:
    """Print the per-op table (one column per status in ``columns``), the reasons of
    each status that is neither ``bad`` nor the first column, and every outcome whose
    status is ``bad``; return how many there are."""
    print(f"{'op':40} " + " ".join(f"{s:>12}" for s in ("samples", *columns)), file=out)
    totals: collections.Counter[str] = collections.Counter()
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    mismatches = []
    for name, results in per_op.items():
        counts = collections.Counter(outcome.status for _, outcome in results)
        totals.update(counts)
        row = [len(results), *(counts[s] for s in columns)]
        print(f"{name:40} " + " ".join(f"{n:12}" for n in row), file=out)
        for where, outcome in results:
            reasons[outcome.status][outcome.reason] += 1
            if outcome.status in bad:
                mismatches.append(f"{name} [{where}] {outcome.status}: {outcome.reason}")
    print("\nsamples: " + "  ".join(f"{s}: {totals[s]}" for s in columns), file=out)
    for status in columns[1:]:
        if status not in bad:
            _print_top(f"{status} reasons", reasons[status], out)
    print(f"\nmismatches ({len(mismatches)}):", file=out)
    for line in mismatches:
        print(f"  {line}", file=out)
    return len(mismatches)


def _print_top(title: str, counter: collections.Counter[str], out: Any, limit: int = 25) -> None:
    print(f"\n{title} ({sum(counter.values())} samples):", file=out)
    for reason, count in counter.most_common(limit):
        print(f"  {count:6}  {reason}", file=out)


def statuses(results: Iterable[tuple[str, CompiledOutcome]]) -> collections.Counter[str]:
    """How many samples ended in each status."""
    return collections.Counter(outcome.status for _, outcome in results)
