"""``--check layouts``: whether compiled results come back in eager's memory layout.

:mod:`.compiled` checks values. This module runs one OpInfo sample the same way (the
user function through ``torchstrata.runtime.compile`` with real code generation, called
twice on fresh copies of the inputs) and also compares each output's layout with
eager's, where eager's output is dense (an output that is a view of an input with gaps
or overlaps is not a layout question). Two stridings are the same layout when they put
every element at the same offset (size-one dimensions' strides do not count).

Statuses:

* ``same``: compiled code ran, values equal to eager's, every dense output in eager's
  layout;
* ``other-layout``: values equal, but a dense output laid out otherwise (the reason
  names the output, its shape, our strides and eager's);
* ``eager``, ``fallback``, ``mismatch``, ``skip``: as in :mod:`.compiled` (a mismatch of
  values comes first: a result must never be wrong);
* ``not-dense``: compiled, right, and no output of eager's is dense.

Run it over the OpInfos with ``python -m integration_tests.opinfo.sweep --check layouts
--codegen cpp --layouts transposed,channels-last --dtypes float32 --max-samples 2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions, is_dense, same_layout

from .captured import eager_baseline, outputs_mismatch
from .compiled import CompiledOutcome, call_fresh, call_twice
from .harness import flat_outputs, float64_reference
from .user_fn import user_function

LAYOUT_STATUSES = ("same", "other-layout", "not-dense", "eager", "fallback", "mismatch", "skip")
#: The statuses the sweep counts against the compiler.
BAD_LAYOUT_STATUSES = ("other-layout", "mismatch")


def layout_difference(got: Sequence[Any], want: Sequence[torch.Tensor]) -> str | None:
    """The first output of ``got`` whose layout differs from eager's dense output in
    ``want`` at the same position, described; None when every dense one agrees."""
    for index, (ours, eagers) in enumerate(zip(got, want, strict=False)):
        if not isinstance(ours, torch.Tensor) or ours.shape != eagers.shape:
            continue
        shape = tuple(eagers.shape)
        if not is_dense(shape, eagers.stride()):
            continue
        if not same_layout(shape, ours.stride(), eagers.stride()):
            return f"output {index} {list(shape)}: {ours.stride()} vs eager's {eagers.stride()}"
    return None


def run_layout_sample(op: Any, sample: Any, codegen: str) -> CompiledOutcome:
    """Compile one OpInfo sample's function with ``codegen``, call it twice, compare the
    values and then the dense outputs' layouts with eager's."""
    fn, tensors, _ = user_function(op.op, sample, op.name)
    baseline = eager_baseline(fn, tensors)
    if isinstance(baseline, str):
        return CompiledOutcome("skip", baseline)
    outputs = baseline.outputs
    reference = float64_reference(fn, tensors)
    compiled = tsr.compile(fn, options=CompileOptions(codegen=codegen))
    differences: list[str] = []

    def check(call: str, result: tuple[Any, list[torch.Tensor]]) -> CompiledOutcome | None:
        got = flat_outputs(result[0]) or []
        problem = outputs_mismatch(op, got, outputs, reference)
        if problem is not None:
            return CompiledOutcome("mismatch", f"{call}: {problem}")
        difference = layout_difference(got, outputs)
        if difference is not None:
            differences.append(difference)
        return None

    outcome = call_twice(compiled, lambda: call_fresh(compiled, tensors), check)
    if outcome.status != "compiled":
        return outcome
    if differences:
        return CompiledOutcome("other-layout", differences[0])
    if not any(is_dense(tuple(t.shape), t.stride()) for t in outputs):
        return CompiledOutcome("not-dense")
    return CompiledOutcome("same")
