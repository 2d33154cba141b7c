"""Correctness against eager: an fp64 reference and a tolerance scaled by eager's own error.

A compiler's result passes when, for every output and gradient tensor,
``max|compiled - ref| <= 3 * max|eager - ref| + atol``, where ``ref`` is the same
workload run in fp64 from the same (exactly upcast) inputs and
``atol = max(eps(dtype), sqrt(L) * eps(fp32)) * max|ref|``, ``L`` being the longest
dimension of any input. The ``sqrt(L)`` term admits a different but sound fp32
summation order (Inductor's sequential vector sums vs eager's pairwise ones over
L terms); a wrong op is off by far more.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from bench.execution import grad_leaves, grad_mode, run_step
from bench.workloads import Case

ERROR_FACTOR = 3.0
_LOW_PRECISION = (torch.float32, torch.float16, torch.bfloat16)
_TO_DOUBLE_METHODS = (torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16)


class Float64Mode(TorchFunctionMode):
    """Turns explicit casts to low-precision floats into casts to fp64.

    Workloads upcast the way users do (``x.float()``, ``dtype=torch.float32``);
    inside this mode those calls keep fp64, so the reference is fp64 end to end.
    """

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func in _TO_DOUBLE_METHODS:
            return args[0].double()
        if kwargs.get("dtype") in _LOW_PRECISION:
            kwargs["dtype"] = torch.float64
        if func is torch.Tensor.to:
            args = [torch.float64 if _is_low_dtype(a) else a for a in args]
        return func(*args, **kwargs)


def _is_low_dtype(value: Any) -> bool:
    return isinstance(value, torch.dtype) and value in _LOW_PRECISION


def _to_double(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().double().requires_grad_(value.requires_grad)
    return value


def fp64_case(case: Case) -> Case:
    """A copy of ``case`` in fp64: module deep-copied and cast, autocast switched off."""
    fn = case.fn
    if isinstance(fn, nn.Module):
        fn = copy.deepcopy(fn).double()
        for module in fn.modules():
            if hasattr(module, "amp_dtype"):
                setattr(module, "amp_dtype", None)  # noqa: B010 - Module.__setattr__ typing
    grads = None if case.grad_outputs is None else tuple(g.double() for g in case.grad_outputs)
    return Case(fn, tuple(_to_double(a) for a in case.args), grads)


def fp64_reference(case: Case, train: bool) -> list[torch.Tensor | None]:
    """Outputs (and gradients, for training) of ``case`` computed in fp64."""
    ref = fp64_case(case)
    with grad_mode(train), Float64Mode():
        return run_step(ref.fn, ref, train, grad_leaves(ref))


def max_errors(
    produced: Sequence[torch.Tensor | None], reference: Sequence[torch.Tensor | None]
) -> list[float]:
    """Per-tensor max absolute error (``inf`` for a missing tensor, shape mismatch or NaN)."""
    if len(produced) != len(reference):
        return [float("inf")]
    errors = []
    for got, want in zip(produced, reference, strict=True):
        if got is None or want is None:
            errors.append(0.0 if got is None and want is None else float("inf"))
        elif got.shape != want.shape:
            errors.append(float("inf"))
        elif not want.is_floating_point():
            errors.append(0.0 if torch.equal(got, want) else float("inf"))
        else:
            err = (got.double() - want).abs().max().item() if got.numel() else 0.0
            errors.append(err if err == err else float("inf"))  # NaN -> inf
    return errors


@dataclass(frozen=True)
class Verdict:
    """Outcome of a correctness check; ``reason`` says what failed."""

    ok: bool
    max_error: float
    reason: str = ""


def judge(
    produced: Sequence[torch.Tensor | None],
    eager: Sequence[torch.Tensor | None],
    reference: Sequence[torch.Tensor | None],
    eager_errors: Sequence[float],
    longest_dim: int,
) -> Verdict:
    """Compare a compiler's tensors with the reference, allowing a multiple of eager's error.

    ``longest_dim`` is the longest dimension of any input (the longest reduction).
    """
    accumulation = math.sqrt(max(longest_dim, 1)) * torch.finfo(torch.float32).eps
    errors = max_errors(produced, reference)
    if len(errors) != len(eager_errors):
        return Verdict(False, float("inf"), f"{len(produced)} tensors, eager has {len(eager)}")
    for i, (got, ref_eager) in enumerate(zip(produced, eager, strict=True)):
        if got is not None and ref_eager is not None and got.dtype != ref_eager.dtype:
            return Verdict(
                False, float("inf"), f"tensor {i}: dtype {got.dtype}, eager {ref_eager.dtype}"
            )
    for i, (err, eager_err, got, want) in enumerate(
        zip(errors, eager_errors, produced, reference, strict=True)
    ):
        if want is None or got is None or not want.is_floating_point():
            allowed = 0.0
        else:
            scale = want.abs().max().item() if want.numel() else 0.0
            relative = max(torch.finfo(got.dtype).eps, accumulation)
            allowed = ERROR_FACTOR * eager_err + relative * scale
        if not err <= allowed:
            return Verdict(False, max(errors), f"tensor {i}: err {err:.3g} > {allowed:.3g}")
    return Verdict(True, max(errors, default=0.0))
