"""``--check grad-layouts``: whether compiled gradients come back in eager's layout.

:mod:`.gradients` checks gradient values. This module runs one OpInfo sample the same
way (:func:`.gradients.run_gradient_sample`: the user function compiled with
``torchstrata.runtime.compile``, gradients pulled through it with
``torch.autograd.grad`` on fresh leaves, called twice) and also compares each input
gradient's layout with eager's, where eager's gradient is dense. ``torch.autograd.grad``
hands the backward's own results back: ``.grad`` after ``backward()`` goes through
autograd's gradient accumulation, which copies a gradient into its dense leaf's layout
and so hides the question.

The cotangents are seeded random row-major tensors, as in :mod:`.gradients`, so eager
and the compiled backward start from the same tangent layout (the runtime hands the
backward graph row-major tangents); what is left is each backward kernel's layout.

Statuses are :mod:`.layout_survey`'s: ``same``, ``other-layout`` (gradient values equal
to eager's, a dense gradient laid out otherwise: the reason names the gradient, its
shape, our strides and eager's), ``not-dense`` (no gradient of eager's is dense),
``eager``, ``fallback``, ``mismatch`` and ``skip``.

Run it over the OpInfos with ``python -m integration_tests.opinfo.sweep --check
grad-layouts --codegen cpp --layouts transposed,channels-last --dtypes float32
--max-samples 2`` (``--codegen eager`` traces the same graphs without generating code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torchstrata.core import is_dense, same_layout

from .compiled import CompiledOutcome
from .gradients import run_gradient_sample


def grad_layout_difference(
    got: Sequence[torch.Tensor | None], want: Sequence[torch.Tensor | None]
) -> str | None:
    """The first gradient of ``got`` whose layout differs from eager's dense gradient in
    ``want`` at the same position, described; None when every dense one agrees (a
    gradient either side leaves as None is not compared)."""
    for index, (ours, eagers) in enumerate(zip(got, want, strict=False)):
        if not isinstance(ours, torch.Tensor) or not isinstance(eagers, torch.Tensor):
            continue
        shape = tuple(eagers.shape)
        if ours.shape != eagers.shape or not is_dense(shape, eagers.stride()):
            continue
        if not same_layout(shape, ours.stride(), eagers.stride()):
            return f"gradient {index} {list(shape)}: {ours.stride()} vs eager's {eagers.stride()}"
    return None


def run_grad_layout_sample(op: Any, sample: Any, codegen: str) -> CompiledOutcome:
    """Compile one OpInfo sample's function with ``codegen``, pull gradients through it
    twice, compare their values and then the dense gradients' layouts with eager's."""
    differences: list[str] = []
    dense: list[bool] = []

    def compare(got: Sequence[torch.Tensor | None], want: Sequence[torch.Tensor | None]) -> None:
        dense.extend(
            isinstance(g, torch.Tensor) and is_dense(tuple(g.shape), g.stride()) for g in want
        )
        difference = grad_layout_difference(got, want)
        if difference is not None:
            differences.append(difference)

    outcome = run_gradient_sample(op, sample, codegen, on_grads=compare)
    if outcome.status != "compiled":
        return outcome
    if differences:
        return CompiledOutcome("other-layout", differences[0])
    if not any(dense):
        return CompiledOutcome("not-dense")
    return CompiledOutcome("same")
