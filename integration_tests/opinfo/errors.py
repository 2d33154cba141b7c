"""OpInfo error inputs through the whole compiler: bad input must raise, never pass.

An OpInfo's ``error_inputs`` are samples eager rejects, each with the exception type and
message it raises (an index out of range, mismatched shapes, a bad dtype). Each is
written as the user's function (:func:`.user_fn.user_function`), compiled with
``torchstrata.runtime.compile`` and real code generation, and called twice (the second
call behind the guards of a first call that may have compiled). Statuses:

* ``raised``: the compiled function raised eager's exception type (the message may
  differ: a check in a generated kernel words it its own way);
* ``raised-other``: it raised, but another type (a mismatch for the sweep's exit code:
  a user's ``except IndexError`` would miss it);
* ``accepted``: it returned a value where eager raises: the silent acceptance of bad
  input (a mismatch);
* ``skip``: eager does not raise on this sample with this torch, or it cannot be
  written as a function of tensors.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

import torchstrata.runtime as tsr
from torchstrata.core import CompileOptions

from .captured import fresh
from .compiled import CompiledOutcome
from .harness import first_line
from .user_fn import user_function

ERROR_STATUSES = ("raised", "raised-other", "accepted", "skip")
#: The statuses the sweep counts as mismatches.
BAD_ERROR_STATUSES = ("raised-other", "accepted")


def _raises(fn: Any, tensors: list[torch.Tensor]) -> BaseException | None:
    """What ``fn`` raises on fresh copies of ``tensors`` (None: it returns)."""
    inputs = [fresh(t) for t in tensors]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*inputs)
    except Exception as error:  # noqa: BLE001 - raising is what is asked of it
        return error
    return None


def run_error_input(op: Any, error_input: Any, codegen: str) -> CompiledOutcome:
    """Compile one error input's function with ``codegen``; call it twice; compare what
    it raises with eager. ``status`` is one of :data:`ERROR_STATUSES` (the reason names
    the exception, or the type eager raises where ours did not)."""
    sample = error_input.sample_input
    try:
        fn, tensors, _ = user_function(op.op, sample, op.name)
    except Exception as error:  # noqa: BLE001 - a sample the writer cannot express
        return CompiledOutcome("skip", f"not a function of tensors: {first_line(error)}")
    if any(t.is_complex() or t.layout is not torch.strided for t in tensors):
        return CompiledOutcome("skip", "complex or non-strided tensor")
    expected = _raises(fn, tensors)
    if expected is None:
        return CompiledOutcome("skip", "eager does not raise")
    compiled = tsr.compile(fn, options=CompileOptions(codegen=codegen))
    for call in ("first call", "second call"):
        got = _raises(compiled, tensors)
        if got is None:
            return CompiledOutcome("accepted", f"{call}: eager raises {first_line(expected)}")
        if not isinstance(got, type(expected)):
            reason = f"{call}: {first_line(got)}; eager raises {type(expected).__name__}"
            return CompiledOutcome("raised-other", reason)
    return CompiledOutcome("raised", type(expected).__name__)
