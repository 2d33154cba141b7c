"""One OpInfo sample the way a user runs it: capture -> aot_forward -> decompose -> interpret.

The sample becomes a Python function (:func:`.user_fn.user_function`); ``capture``
turns one call of it into torch-level graphs and a program. Every graph (also those
captured after a graph break, through capture's ``compile_segment`` callback) goes through
``aot_forward``, ``decompose_with_stats`` and ``verify``; the program runs the prims
graphs in the reference interpreter and its result is compared with eager's.

``Outcome.capture`` says what capture did: ``full`` (no graph break), ``breaks`` (graph
breaks, but some graph ran through the pipeline), ``eager`` (a program, but a graph
break before any op: every op ran eagerly), ``declined`` (no program; the function
runs eagerly) or ``error`` (capture or its program raised: a capture bug);
``capture_reason`` says why (the first graph break, or the error). Eager, declined and
errored samples then run through the one-node closure path of :mod:`.harness` (the
fallback column).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import attrs
import torch

from torchstrata.autograd import aot_forward
from torchstrata.capture import capture
from torchstrata.core import AotResult, CompileOptions, Graph, interpret, verify
from torchstrata.decomp import decompose_with_stats

from .harness import (
    SEED,
    UNCHECKED_OUTPUTS,
    UNCHECKED_PREFIXES,
    Outcome,
    compare,
    first_line,
    flat_outputs,
    float64_reference,
    run_sample,
    structure_mismatch,
)
from .user_fn import user_function

OPTIONS = CompileOptions(codegen="eager")

#: The mismatch reason when the ATen graphs are right once an output alias's
#: ``storage_offset`` is taken relative to the input's own offset: ``AotResult`` records
#: it from the traced input (offset 0) but documents it as absolute, so an output that
#: is a view of an input that is itself an offset view (every non-contiguous sample)
#: reads the wrong memory. The runtime applies it the same way.
ALIAS_OFFSET = "aot: output alias storage_offset not relative to the input's offset"


class _StageError(Exception):
    """A pipeline stage failed on a captured graph (``stage`` names it)."""

    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(f"{stage}: {first_line(error)}")
        self.stage = stage


@attrs.define
class _Pipeline:
    """Compiles captured graphs (aot -> decompose -> verify) and records what happened."""

    #: False: stop at ATen (interpret ``aot.forward``), to tell aot bugs from decomp bugs.
    decompose: bool = True
    #: True (the AotResult convention): an output alias's offset is relative to its input's
    #: own storage offset. False reproduces the old absolute reading (see ALIAS_OFFSET).
    relative_aliases: bool = True
    graphs: int = 0
    missing: set[str] = attrs.field(factory=set)
    failures: list[_StageError] = attrs.field(factory=list)

    def compile(self, graph: Graph) -> Callable[..., tuple[Any, ...]]:
        """The runner the program calls for ``graph``: the prims graph, interpreted."""
        try:
            aot = aot_forward(graph, OPTIONS)
        except Exception as error:
            self.failures.append(_StageError("trace", error))
            raise self.failures[-1] from error
        if not self.decompose:
            return self._runner(aot.forward, aot)
        try:
            prims, stats = decompose_with_stats(aot.forward, OPTIONS)
            verify(prims)
        except Exception as error:
            self.failures.append(_StageError("decompose", error))
            raise self.failures[-1] from error
        self.graphs += 1
        self.missing.update(stats.missing())
        return self._runner(prims, aot)

    def _runner(self, prims: Graph, aot: AotResult) -> Callable[..., tuple[Any, ...]]:
        total = len(aot.forward.outputs)
        num_user = aot.num_user_outputs or total - aot.num_mutations - aot.num_saved
        mutated = aot.mutated_inputs
        constants = tuple(getattr(aot, "constants", ()))  # lifted torch.tensor([...]) values

        def run(*inputs: Any) -> tuple[Any, ...]:
            try:
                outputs = interpret(prims, *inputs, *constants)
            except Exception as error:
                self.failures.append(_StageError("interpret", error))
                raise self.failures[-1] from error
            with torch.no_grad():
                for index, value in zip(mutated, outputs[num_user:]):
                    inputs[index].copy_(value)
            user = list(outputs[:num_user])
            for position, alias in enumerate(aot.output_aliases):
                if alias is not None:
                    index, size, stride, offset = alias
                    base = inputs[index]
                    if user[position].dtype != base.dtype:  # view_as_real, view(dtype)
                        base = _retyped(base, user[position].dtype)  # as the runtime does
                    if self.relative_aliases:
                        offset += base.storage_offset()
                    user[position] = base.as_strided(size, stride, offset)
            # the hidden bases of overlapping output views (AotResult.num_hidden_outputs)
            return tuple(user[: num_user - aot.num_hidden_outputs])

        return run


def _retyped(base: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``base``'s memory as ``dtype``, for an output alias in another dtype (the runtime's
    ``retyped_view``)."""
    if base.is_complex() and dtype == base.real.dtype:
        return torch.view_as_real(base)
    return base.view(dtype)


def fresh(tensor: torch.Tensor, on_cpu: bool = False) -> torch.Tensor:
    """A copy of ``tensor`` over a copy of its whole storage: same strides and offset, and
    the same bytes outside the view (``as_strided`` samples read them); on the CPU with
    ``on_cpu``, else on the tensor's own device."""
    with torch.no_grad():
        try:
            storage = tensor.untyped_storage()
            moved = on_cpu and storage.device.type != "cpu"
            storage = storage.cpu() if moved else storage.clone()
            copy = torch.empty(0, dtype=tensor.dtype, device=storage.device)
            return copy.set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())
        except (RuntimeError, NotImplementedError):  # sparse and other layouts
            return tensor.to("cpu", copy=True) if on_cpu else tensor.clone()


def run_on_copies(fn: Callable[..., Any], tensors: Sequence[torch.Tensor]) -> tuple[Any, list[Any]]:
    """``fn`` on fresh copies of ``tensors`` (RNG seeded): (result, the copies after it)."""
    inputs = [fresh(t) for t in tensors]
    torch.manual_seed(SEED)
    return fn(*inputs), inputs


def outputs_mismatch(
    op: Any,
    got: Sequence[Any],
    want: Sequence[torch.Tensor],
    reference: list[Any] | None,
) -> str | None:
    """None if ``got`` matches eager's ``want`` (float16/bfloat16 against ``reference``, a
    float64 run), else what differs."""
    check_values = not op.name.startswith(UNCHECKED_PREFIXES)
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for index, (actual, expected) in enumerate(zip(got, want, strict=True)):
        ref = reference[index] if reference is not None and index < len(reference) else None
        if not isinstance(actual, torch.Tensor):
            return f"output {index} is {type(actual).__name__}"
        ref = ref if isinstance(ref, torch.Tensor) else None
        values = check_values and index not in UNCHECKED_OUTPUTS.get(op.name, ())
        problem = compare(actual, expected, ref, values)
        if problem is not None:
            return f"output {index}: {problem}"
    return None


def _rerun(
    fn: Callable[..., Any], tensors: Sequence[torch.Tensor], aten: bool, relative: bool = False
) -> Any:
    """The flat result with the torch-level graphs interpreted (``aten``: the ATen graphs,
    through aot but not decompose; ``relative``: aliases relative); None if that fails."""
    try:
        inputs = [fresh(t) for t in tensors]
        pipeline = _Pipeline(decompose=False, relative_aliases=relative) if aten else None
        segments = pipeline.compile if pipeline is not None else None
        result = capture(fn, tuple(inputs), {}, OPTIONS, compile_segment=segments)
        if result.program is None:
            return None
        if pipeline is not None:
            runners = [pipeline.compile(g) for g in result.graphs]
        else:
            runners = [functools.partial(interpret, g) for g in result.graphs]
        torch.manual_seed(SEED)
        return flat_outputs(result.program(runners, tuple(inputs), {}))
    except Exception:  # noqa: BLE001 - attribution only
        return None


def _culprit(op: Any, fn: Callable[..., Any], tensors: Sequence[torch.Tensor], want: Any) -> str:
    """Which stage a mismatch comes from: the first whose own result is already wrong."""
    reference = float64_reference(fn, tensors)
    for stage, aten in (("capture", False), ("aot", True)):
        got = _rerun(fn, tensors, aten)
        if got is None or outputs_mismatch(op, got, want, reference) is not None:
            if aten and outputs_mismatch(
                op, _rerun(fn, tensors, True, True) or [], want, reference
            ):
                return stage
            return ALIAS_OFFSET if aten else stage
    return "decomp"


def _fallback(op: Any, sample: Any, kind: str, reason: str) -> Outcome:
    closure = run_sample(op, sample)
    return attrs.evolve(closure, capture=kind, capture_reason=reason)


class Baseline(NamedTuple):
    """Eager's run of a sample: flat outputs, the inputs after the call, the result."""

    outputs: list[torch.Tensor]
    inputs: list[Any]
    value: Any


def eager_baseline(fn: Callable[..., Any], tensors: Sequence[torch.Tensor]) -> Baseline | str:
    """Eager's :class:`Baseline` on copies of ``tensors``, or why the sample is not a
    question for the compiler (a skip reason)."""
    try:
        expected, eager_inputs = run_on_copies(fn, tensors)
    except Exception as error:  # noqa: BLE001 - eager refuses the sample: not our question
        return f"eager fails: {type(error).__name__}"
    outputs = flat_outputs(expected)
    if outputs is None:
        return "non-tensor output"
    if any(t.is_sparse or t.layout is not torch.strided for t in (*tensors, *outputs)):
        return "non-strided tensor"
    return Baseline(outputs, eager_inputs, expected)


def run_captured_sample(op: Any, sample: Any) -> Outcome:
    """Run one OpInfo sample through capture and the pipeline; compare with eager."""
    fn, tensors, _ = user_function(op.op, sample, op.name)
    baseline = eager_baseline(fn, tensors)
    if isinstance(baseline, str):
        return Outcome("skip", baseline)
    outputs, eager_inputs, expected = baseline
    inputs = [fresh(t) for t in tensors]
    pipeline = _Pipeline()
    try:
        # later segments go through the pipeline too
        result = capture(fn, tuple(inputs), {}, OPTIONS, compile_segment=pipeline.compile)
    except Exception as error:  # noqa: BLE001 - a capture bug: counted, then the fallback
        return _fallback(op, sample, "error", f"capture: {first_line(error)}")
    if result.program is None:
        reason = result.graph_breaks[0].reason if result.graph_breaks else "no program"
        return _fallback(op, sample, "declined", reason.splitlines()[0][:120])
    try:
        compiled = [pipeline.compile(graph) for graph in result.graphs]
    except _StageError as error:
        status = "skip" if error.stage == "trace" else "mismatch"
        return Outcome(status, str(error), capture="breaks" if result.graph_breaks else "full")
    program = result.program
    torch.manual_seed(SEED)
    try:
        value = program(compiled, tuple(inputs), {})
        raised = None
    except Exception as error:  # noqa: BLE001 - ours if a stage failed, else capture's
        raised = error
    breaks = tuple(getattr(program, "graph_breaks", result.graph_breaks))
    kind = "breaks" if breaks else "full"
    break_reason = breaks[0].reason.splitlines()[0][:120] if breaks else ""
    failures = [f for f in pipeline.failures if f.stage != "trace"]
    if failures:
        return Outcome("mismatch", str(failures[0]), capture=kind, capture_reason=break_reason)
    if raised is not None:
        return _fallback(op, sample, "error", f"program: {first_line(raised)}")
    if pipeline.failures:
        return Outcome("skip", str(pipeline.failures[0]), capture=kind)
    if pipeline.graphs == 0:  # every instruction ran eagerly: capture fell back
        return _fallback(op, sample, "eager", break_reason or "no graph")
    got = flat_outputs(value) or []
    reference = float64_reference(fn, tensors)
    problem = structure_mismatch(value, expected) or outputs_mismatch(op, got, outputs, reference)
    if problem is None and any(isinstance(t, torch.Tensor) for t in inputs):
        problem = outputs_mismatch(op, inputs, eager_inputs, None)
        problem = f"mutated input {problem}" if problem else None
    if problem is not None:
        stage = _culprit(op, fn, tensors, outputs)
        return Outcome("mismatch", f"{stage}: {problem}", capture=kind, capture_reason=break_reason)
    missing = tuple(sorted(pipeline.missing))
    status = "extern" if missing else "decomposed"
    return Outcome(status, extern=missing, capture=kind, capture_reason=break_reason)
