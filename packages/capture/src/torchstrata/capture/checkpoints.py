"""``torch.utils.checkpoint.checkpoint`` inside a captured function: its function is
inlined into the graph, every node it makes tagged :data:`~torchstrata.core.RECOMPUTE`
and with its region's own tag, ``recompute_<n>`` (numbered in call order): a value one
region makes and another reads (``x = checkpoint(block, x)`` in a loop) is that region's
output, saved as eager's next checkpoint saves its input.

Eager checkpointing runs the function without saving its intermediate values and runs it
again in the backward. In a graph the autograd stage gives the same trade: it recomputes
the tagged nodes in the backward rather than saving them (see the autograd package's
``recompute`` module). Only the non-reentrant form (``use_reentrant=False``) is captured;
the reentrant one runs its own ``autograd.Function`` and stays a graph break, as does a
``context_fn`` (selective checkpointing: its policy decides per op, at run time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch.utils.checkpoint as torch_checkpoint

from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import NotConstant, Var, python_value
from torchstrata.core import RECOMPUTE, recompute_region

#: ``call(fn, args, kwargs)``: the capture-time call (``calls.call_function``).
Call = Callable[[Var, list[Var], dict[str, Var]], Var]

#: Keywords of ``checkpoint`` itself that change nothing the graph computes: the
#: recomputation's checks (``determinism_check``, ``debug``), when it may stop
#: (``early_stop``) and whether it restores the random state (the graph computes each
#: random draw once: see the autograd stage).
_NO_EFFECT = ("determinism_check", "debug", "early_stop", "preserve_rng_state")


def is_checkpoint(fn: Any) -> bool:
    """True for ``torch.utils.checkpoint.checkpoint`` (or the function it wraps)."""
    entry = torch_checkpoint.checkpoint
    return fn is entry or fn is getattr(entry, "__wrapped__", entry)


def call_checkpoint(
    tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """``checkpoint(function, *args, use_reentrant=False, **kwargs)`` at capture time:
    ``function(*args, **kwargs)`` inlined with its nodes tagged ``recompute``.

    :raises Unsupported: (a graph break naming the reason) for the reentrant form, a
        ``use_reentrant`` left out (PyTorch then warns and takes the reentrant form),
        a ``context_fn``, or no function.
    """
    if not args:
        raise Unsupported("torch.utils.checkpoint.checkpoint() without a function")
    passed = dict(kwargs)
    reentrant = _constant(passed.pop("use_reentrant", None), "use_reentrant")
    if reentrant is not False:
        raise Unsupported(
            "torch.utils.checkpoint.checkpoint with use_reentrant="
            f"{reentrant!r} is not captured (it runs an autograd.Function of its own): "
            "pass use_reentrant=False"
        )
    context_fn = passed.pop("context_fn", None)
    if context_fn is not None and _constant(context_fn, "context_fn") is not (
        torch_checkpoint.noop_context_fn
    ):
        raise Unsupported(
            "torch.utils.checkpoint.checkpoint with a context_fn (selective activation "
            "checkpointing) is not captured"
        )
    for name in _NO_EFFECT:
        passed.pop(name, None)
    tracer.checkpoint_regions += 1
    with tracer.builder.tagged({RECOMPUTE, recompute_region(tracer.checkpoint_regions)}):
        return call(args[0], list(args[1:]), passed)


def _constant(var: Var | None, name: str) -> Any:
    if var is None:
        return None
    try:
        return python_value(var)
    except NotConstant:
        raise Unsupported(f"torch.utils.checkpoint.checkpoint: {name} is not a constant") from None
