"""Run one step of a workload: a forward call, plus backward for training workloads."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from bench.workloads import Case


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Tensors of a (nested) output in a stable order: tuples, lists and dict values."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flatten_tensors(item)]
    if isinstance(value, dict):
        return [t for key in sorted(value) for t in flatten_tensors(value[key])]
    return []


def grad_leaves(case: Case) -> list[torch.Tensor]:
    """Tensors whose ``.grad`` a training step produces: argument leaves, then parameters."""
    leaves = [a for a in case.args if isinstance(a, torch.Tensor) and a.requires_grad]
    if isinstance(case.fn, nn.Module):
        leaves += [p for p in case.fn.parameters() if p.requires_grad]
    return leaves


def clear_grads(leaves: list[torch.Tensor]) -> None:
    """Drop accumulated gradients so the next step starts from ``None``."""
    for t in leaves:
        t.grad = None


@contextlib.contextmanager
def grad_mode(train: bool) -> Iterator[None]:
    """Autograd on for training workloads, off (``no_grad``) for inference ones."""
    with torch.set_grad_enabled(train):
        yield


def run_step(
    fn: Callable[..., Any], case: Case, train: bool, leaves: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    """Call ``fn(*case.args)``; for training also backward. Returns outputs then grads.

    Must run inside :func:`grad_mode`. Outputs are detached; a gradient that was
    never produced is ``None``.
    """
    if not train:
        return list(flatten_tensors(fn(*case.args)))
    clear_grads(leaves)
    outputs = flatten_tensors(fn(*case.args))
    if case.grad_outputs is None:
        outputs[0].backward()
    else:
        torch.autograd.backward(outputs, list(case.grad_outputs))
    return [o.detach() for o in outputs] + [t.grad for t in leaves]


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
