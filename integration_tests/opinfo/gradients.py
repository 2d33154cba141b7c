"""One OpInfo sample's gradients through the whole compiler, backward kernels included.

:mod:`.compiled` checks forward results. This module takes the OpInfo's samples made
with ``requires_grad=True`` (the OpInfo marks which of their tensors are
differentiable), compiles the user function (:func:`.user_fn.user_function`) with
``torchstrata.runtime.compile`` and real code generation, and pulls seeded random
cotangents back through it with ``torch.autograd.grad``. That runs the training path: the
traced joint graph, its partition into forward and backward, both decomposed, fused and
generated. The compiled function is called twice on fresh leaves (the first call
compiles, the second runs behind the guards); each call's outputs and input gradients
are compared with eager's.

Gradients are compared as :func:`.harness.compare` compares outputs, against a float64
run where eager's own float32 or low-precision answer is not matched exactly: an element
that differs from eager must be at most 3x as far from the float64 answer as eager's is,
plus a small tolerance relative to the value's size: ``1e-5`` for float32, about one
rounding step for float16 (``1e-3``) and bfloat16 (``8e-3``), whose gradients eager also
rounds at every op. A gradient eager leaves as None (an input the outputs do not use) may come
back as None or as zeros.

The statuses are :mod:`.compiled`'s: ``compiled``, ``eager``, ``fallback``, ``mismatch``,
``eager-differs`` (outputs only: on a GPU, an output that differs from eager there but
matches eager on the CPU) and ``skip`` (no differentiable input or output, eager
fails, the OpInfo has no autograd).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions

from .captured import fresh, outputs_mismatch
from .compiled import CompiledOutcome, call_twice, fallback_messages, matches_cpu_eager
from .harness import SEED, UNCHECKED_PREFIXES, flat_outputs
from .user_fn import user_function

#: Where eager's gradient is not matched exactly: the tolerance, relative to the float64
#: answer's size, on top of 3x eager's own error.
_SLACK = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5, torch.float64: 1e-9}


def _leaves(tensors: Sequence[torch.Tensor], wide: bool = False) -> list[torch.Tensor]:
    """Fresh leaf copies of ``tensors`` that require grad where the sample's do (float64
    copies of the floating ones with ``wide``)."""
    leaves = []
    for tensor in tensors:
        leaf = fresh(tensor)
        if wide and leaf.is_floating_point():
            leaf = leaf.double()
        leaves.append(leaf.requires_grad_(tensor.requires_grad))
    return leaves


def _cotangents(outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Seeded random cotangents, one per differentiable output."""
    generator = torch.Generator().manual_seed(SEED)
    return [
        torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.device, o.dtype)
        for o in outputs
    ]


def run_grads(
    fn: Callable[..., Any], tensors: Sequence[torch.Tensor], wide: bool = False
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """``fn`` on fresh leaves, then its input gradients for seeded cotangents: (the flat
    outputs, detached; one gradient or None per input that requires grad)."""
    leaves = _leaves(tensors, wide)
    torch.manual_seed(SEED)
    outputs = flat_outputs(fn(*leaves)) or []
    pulled = [o for o in outputs if o.requires_grad and o.is_floating_point()]
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    grads: Sequence[torch.Tensor | None] = [None] * len(wanted)
    if pulled and wanted:
        grads = torch.autograd.grad(pulled, wanted, _cotangents(pulled), allow_unused=True)
    return [o.detach() for o in outputs], list(grads)


def _question(op: Any, tensors: Sequence[torch.Tensor]) -> str | None:
    """Why a sample is not a gradient question (a skip reason), or None."""
    if not op.supports_autograd:
        return "no autograd"
    if op.name.startswith(UNCHECKED_PREFIXES):
        return "random or uninitialised values"
    if not any(t.requires_grad and t.is_floating_point() for t in tensors):
        return "no differentiable input"
    if any(t.is_complex() or t.layout is not torch.strided for t in tensors):
        return "complex or non-strided tensor"
    return None


def grads_mismatch(
    got: Sequence[torch.Tensor | None],
    want: Sequence[torch.Tensor | None],
    reference: Sequence[torch.Tensor | None] | None,
) -> str | None:
    """None if the gradients ``got`` match eager's ``want`` (see the module docstring;
    ``reference``: the float64 run's, when there is one), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} gradients, eager has {len(want)}"
    for index, (actual, expected) in enumerate(zip(got, want, strict=True)):
        if expected is None:
            if actual is not None and bool(actual.count_nonzero()):
                return f"gradient {index} is nonzero where eager's is None"
            continue
        if actual is None:
            actual = torch.zeros_like(expected)
        wide = reference[index] if reference is not None else None
        problem = _grad_mismatch(actual, expected, wide)
        if problem is not None:
            return f"gradient {index}: {problem}"
    return None


def _grad_mismatch(
    actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor | None
) -> str | None:
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.numel() == 0:
        return None
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False)
        return None
    except AssertionError as error:
        strict = " ".join(str(error).split())[:200]
    if reference is None or not expected.is_floating_point():
        return strict
    same = (actual == expected) | (actual.isnan() & expected.isnan())
    ref = reference.double().to(actual.device)[~same]
    ours = (actual.double()[~same] - ref).abs()
    eagers = (expected.double()[~same] - ref).abs()
    slack = _SLACK.get(expected.dtype, 1e-5)
    bad = ~(ours <= 3 * eagers + slack * (1 + ref.abs())) & ~(ours.isnan() & eagers.isnan())
    if bool(bad.any()):
        return f"error {ours.max().item():.3g} vs eager's {eagers.max().item():.3g} ({strict})"
    return None


def _call(
    compiled: Callable[..., Any], tensors: Sequence[torch.Tensor]
) -> tuple[tuple[list[torch.Tensor], list[torch.Tensor | None]], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs, grads = run_grads(compiled, tensors)
    return (outputs, grads), fallback_messages(caught)


def run_gradient_sample(
    op: Any,
    sample: Any,
    codegen: str,
    on_grads: Callable[[list[torch.Tensor | None], list[torch.Tensor | None]], None] | None = None,
) -> CompiledOutcome:
    """Compile one OpInfo sample's function with ``codegen``, pull gradients through it
    twice, compare outputs and gradients with eager's. ``on_grads(ours, eagers)`` is
    called with each call's gradients once their values match (for further checks)."""
    fn, tensors, _ = user_function(op.op, sample, op.name)
    reason = _question(op, tensors)
    if reason is not None:
        return CompiledOutcome("skip", reason)
    try:
        outputs, grads = run_grads(fn, tensors)
    except Exception as error:  # noqa: BLE001 - eager refuses the sample: not our question
        return CompiledOutcome("skip", f"eager fails: {type(error).__name__}")
    if any(o.is_complex() or o.layout is not torch.strided for o in outputs):
        return CompiledOutcome("skip", "complex or non-strided output")
    if all(g is None for g in grads):
        return CompiledOutcome("skip", "no gradient flows")
    try:
        wide_outputs, wide_grads = run_grads(fn, tensors, wide=True)
        reference: list[torch.Tensor | None] | None = wide_grads
    except Exception:  # noqa: BLE001 - no float64 run: eager's answer must be matched
        wide_outputs, reference = [], None
    low = any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors)
    out_reference = wide_outputs if low and wide_outputs else None
    compiled = tsr.compile(fn, options=CompileOptions(codegen=codegen))

    def check(
        call: str, result: tuple[list[torch.Tensor], list[torch.Tensor | None]]
    ) -> CompiledOutcome | None:
        got_outputs, got_grads = result
        problem = outputs_mismatch(op, got_outputs, outputs, out_reference)
        if problem is not None:
            plain = [t.detach() for t in tensors]
            if matches_cpu_eager(op, fn, plain, outputs, got_outputs, plain):
                return CompiledOutcome("eager-differs", f"{call}: {problem}")
            return CompiledOutcome("mismatch", f"{call}: {problem}")
        problem = grads_mismatch(got_grads, grads, reference)
        if problem is not None:
            return CompiledOutcome("mismatch", f"{call}: {problem}")
        if on_grads is not None:
            on_grads(got_grads, grads)
        return None

    return call_twice(compiled, lambda: _call(compiled, tensors), check)
