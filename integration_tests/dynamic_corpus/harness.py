"""Calling a corpus program at every size of its dynamic dimension: each call compared
with eager, warnings turned into errors, and the entries the runtime made counted
against what the dynamic-shapes policy should make (decision 0200)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

import torchstrata.runtime as rt

#: The sizes of the dynamic dimension most programs are called with: 0 and 1 (each
#: specialised into a static entry), odd and even sizes. Size 1 first, so the second
#: call already sees a new size and compiles symbolic (see :func:`expected_entries`).
EDGE_SIZES = (1, 16, 17, 0, 5, 33, 2, 9)


@attrs.frozen
class Program:
    """One corpus entry.

    :param fn: the function (or ``nn.Module``) compiled.
    :param make_args: the call's arguments for one size of the dynamic dimension.
    :param sizes: the sizes it is called with, in order.
    :param extra_entries: symbolic entries beyond the policy's, each from a decision on a
        size the trace guards (a branch, a derived size of 0 or 1); say why where set.
    :param per_size: a decision on every size (a ``range(n)`` loop unrolled): every
        distinct size is its own entry.
    :param dynamic: the ``dynamic`` compile option.
    """

    fn: Callable[..., Any]
    make_args: Callable[[int], tuple[Any, ...]]
    sizes: Sequence[int] = EDGE_SIZES
    extra_entries: int = 0
    per_size: bool = False
    dynamic: bool | None = None

    @property
    def name(self) -> str:
        """The test id."""
        fn = self.fn
        return type(fn).__name__ if isinstance(fn, torch.nn.Module) else fn.__name__


def policy_entries(sizes: Sequence[int], dynamic: bool | None) -> int:
    """The entries the runtime's policy makes for a program whose trace decides nothing
    on its dynamic size: sizes 0 and 1 each get a static entry; with ``dynamic=None``
    the first other size is compiled static, and one symbolic entry serves every size
    >= 2 from the first call that shows a second distinct size (``dynamic=True``: from
    the first call of a size >= 2)."""
    static: set[int] = set()
    symbolic = False
    seen: set[int] = set()
    for size in sizes:
        served = size in static or (symbolic and size >= 2)
        if not served:
            if size < 2 or dynamic is False or (dynamic is None and not seen - {size}):
                static.add(size)
            else:
                symbolic = True
        seen.add(size)
    return len(static) + symbolic


def expected_entries(program: Program) -> int:
    """The entries ``program`` should end with after its calls."""
    if program.per_size:
        return len(set(program.sizes))
    return policy_entries(program.sizes, program.dynamic) + program.extra_entries


def compile_program(program: Program, codegen: str = "eager") -> Any:
    """``program.fn`` compiled as the corpus compiles it: by default its ATen graphs run
    by the reference interpreter (capture, guards and the policy are what is tested)."""
    return rt.compile(program.fn, codegen=codegen, dynamic=program.dynamic)


def assert_same(got: Any, want: Any, where: str) -> None:
    """``got`` equals eager's ``want`` (tensors by ``assert_close``, NaN equal to NaN;
    other values exactly, of the same type)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__}, not a tensor"
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{where}: {m}")
    elif isinstance(want, list | tuple):
        assert type(got) is type(want) and len(got) == len(want), f"{where}: {got!r}"
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{index}]")
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


def eager_copies(args: Sequence[Any]) -> list[Any]:
    """``args`` with each tensor cloned: eager's call of a program that writes its inputs
    (``p.add_(g)``) leaves the compiled call's as they were."""
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def call_all(compiled: Any, program: Program, caplog: Any) -> None:
    """Call ``compiled`` at every size of ``program``, each compared with eager, with
    every warning an error and no runtime log line at WARNING or above (a lowering that
    failed and was interpreted)."""
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="torchstrata"):
        for size in program.sizes:
            args = program.make_args(size)
            with warnings.catch_warnings():  # eager's own (var() of one row...)
                warnings.simplefilter("ignore")
                want = program.fn(*eager_copies(args))  # a program may write its inputs
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = compiled(*args)
            assert_same(got, want, f"{program.name} at size {size}")
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, problems


def static_reasons(caplog: Any) -> list[str]:
    """The runtime's log lines saying a compile went static per shape, and why."""
    return [r.getMessage() for r in caplog.records if "static per shape" in r.getMessage()]
