"""The three contenders: eager, torch.compile (Inductor) and torchstrata.

Compiling is lazy for both compilers, so failures usually surface at the first
call; the runner catches them there. ``fallback_note`` recognises the warning a
compiler gives when it quietly runs a function eagerly.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

COMPILERS = ("eager", "inductor", "torchstrata")
LABELS = {"eager": "eager", "inductor": "torch.compile", "torchstrata": "torchstrata"}
_ALIASES = {"torch.compile": "inductor", "compile": "inductor", "ours": "torchstrata"}
_FALLBACK = re.compile(r"fall(s|ing)?[ -]?back|fallback|eagerly", re.IGNORECASE)


class CompilerUnavailable(Exception):
    """The compiler cannot be imported; the message is the status to report."""


def parse_compilers(spec: str) -> list[str]:
    """Names from a comma list (aliases accepted); eager is always first."""
    names = [_ALIASES.get(s.strip(), s.strip()) for s in spec.split(",") if s.strip()]
    unknown = sorted(set(names) - set(COMPILERS))
    if unknown:
        raise ValueError(f"unknown compiler(s): {', '.join(unknown)}; choose from {COMPILERS}")
    return ["eager"] + [n for n in COMPILERS[1:] if n in names]


def compile_with(name: str, fn: Callable[..., Any], options: Any = None) -> Callable[..., Any]:
    """Wrap ``fn`` (a function or ``nn.Module``) with the named compiler; ``options``:
    torchstrata's ``CompileOptions`` (ignored by the others)."""
    if name == "eager":
        return fn
    if name == "inductor":
        return torch.compile(fn)
    try:
        import torchstrata.runtime as tsr
    except ImportError as exc:
        raise CompilerUnavailable("not installed") from exc
    return tsr.compile(fn, options=options)


def reset(name: str) -> None:
    """Clear the compiler's in-process caches so the next workload starts clean."""
    if name == "inductor":
        torch._dynamo.reset()
    elif name == "torchstrata":
        try:
            import torchstrata.runtime as tsr
        except ImportError:
            return
        tsr.reset()


def fallback_note(records: Sequence[warnings.WarningMessage]) -> str | None:
    """The first UserWarning that says the compiler fell back to eager, if any.

    Deliberately simple: the warning's class name or message mentions falling
    back, or running eagerly.
    """
    for record in records:
        text = f"{record.category.__name__}: {record.message}"
        if issubclass(record.category, UserWarning) and _FALLBACK.search(text):
            return str(record.message).strip().splitlines()[0][:160]
    return None


def describe_error(exc: BaseException) -> str:
    """A one-line status for an exception raised while compiling or running."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"error: {type(exc).__name__}: {message}"[:200]
