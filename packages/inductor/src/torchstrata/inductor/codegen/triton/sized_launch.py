"""A Triton kernel of a symbolic lowering, launched at the sizes of each call (decision 0400).

A kernel lowered with ``core.SizeValue`` sizes has one source for every size the lowering
serves: its rows (``xnumel``), row length (``rnumel``) and other size arguments are
expressions over the lowering's symbols, and so are the index coefficients its body
prints, over the symbols it takes as arguments. The generated launcher passes the
symbols' values after the buffers (``kernel.run(buf0, buf1, s0, s1)``);
:class:`SizedKernel` evaluates the size arguments from them (one generated Python
function), and launches a :class:`~.tuning.TunedKernel` bound to those sizes: the
configuration is tuned once per power-of-two bucket of the rows (:func:`~.tuning.rows_bucket`,
the first at the lowering's own call), and every size of a bucket launches its choice,
with its own grid. One choice for every bucket left RMSNorm over 2049 rows of 4096 at
0.55x its static kernel on an H100 (tuned at another row count). A launcher per distinct
size is kept (at most :data:`KEPT_SIZES`): a repeated size costs a dict lookup, as a
static kernel's launch, and a size launched directly takes the generated hot path of
decision 0461 as a static kernel does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import SizeValue, active_symbols, python_source, size_printer
from torchstrata.inductor.codegen.triton.printer import RED_PARAM, ROWS_PARAM
from torchstrata.inductor.codegen.triton.size_buckets import (
    column_sum,
    hint,
    record_specialisation,
)
from torchstrata.inductor.codegen.triton.tuning import Config, TunedKernel, rows_bucket
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.triton_launch import DirectLaunch

#: Launchers kept per kernel, one per distinct size (then all are dropped and rebuilt).
KEPT_SIZES = 256


def size_function(
    symbols: Sequence[str], values: Sequence[int | SizeValue]
) -> Callable[..., tuple[int, ...]]:
    """``f(*symbol values) -> values`` evaluated there, as one generated function.
    A size that cannot be printed raises ``core.SizeRead`` here, during the lowering,
    not at a launch."""
    with size_printer(python_source):  # ``//`` and ``%`` as Python reads them (0438)
        texts = [f"({value})," for value in values]
    source = f"lambda {', '.join(symbols)}: ({''.join(texts)})"
    return eval(compile(source, "<triton sizes>", "eval"), {})


class SizedKernel:
    """``tuned`` (its rows and sizes symbolic) launched as ``run(*tensors, *symbols)``.

    :param tuned: the kernel, its ``rows`` and ``sizes`` expressions of the symbols.
    :param symbols: the names of the symbols the launcher passes, in order.
    :param hints: the symbols' values where the kernel was lowered (default: those of the
        lowering in progress; a kernel loaded from the compiled-graph cache gives them).
    """

    def __init__(
        self, tuned: TunedKernel, symbols: Sequence[str], hints: Sequence[int] | None = None
    ) -> None:
        self.tuned = tuned
        self.symbols = tuple(symbols)
        self.names = tuple(tuned.sizes)
        self.evaluate = size_function(self.symbols, (tuned.rows, *tuned.sizes.values()))
        self.launches: dict[tuple[int, ...], Callable[..., Any]] = {}
        #: The symbols' values in the call being lowered (compiles ahead are for them).
        self.hints = tuple(hints) if hints is not None else tuple(hint(s) for s in active_symbols())
        #: The configuration tuned at the first call of each bucket of rows.
        self.chosen: dict[int, Config] = {}

    def run(self, *args: Any) -> None:
        """Launch on ``args``: the tensors, then the symbols' values."""
        count = len(self.symbols)
        values = tuple(args[-count:])
        launch = self.launches.get(values)
        if launch is None:
            launch = self._launch_for(values)
        launch(*args[:-count])

    __call__ = run

    def at(self, values: Sequence[int]) -> TunedKernel:
        """The kernel with its sizes and symbols evaluated at ``values`` (not tuned)."""
        rows, *sizes = self.evaluate(*values)
        sized = copy.copy(self.tuned)
        sized.rows = rows
        if self.tuned.choice_cache is not None:  # a choice per bucket of rows
            sized.choice_cache = self.tuned.choice_cache.at_rows(rows)
        sized.sizes = {
            **dict(zip(self.names, sizes, strict=True)),
            **dict(zip(self.symbols, values, strict=True)),
        }
        sized.pending, sized.chosen = None, None
        sized.run = sized._first_call
        return sized

    def start_compiles(self, dtypes: Sequence[torch.dtype], device: int | None) -> None:
        """Queue the compiles at the lowering's own sizes (see ``TunedKernel``): the
        binaries every size it serves launches (decision 0400)."""
        sized = self.at(self.hints)
        sized.start_compiles(dtypes, device)
        self._launch_for(self.hints, sized)

    def _launch_for(
        self, values: tuple[int, ...], sized: TunedKernel | None = None
    ) -> Callable[..., Any]:
        sized = self.at(values) if sized is None else sized
        bucket = rows_bucket(sized.rows)
        chosen = self.chosen.get(bucket)
        if chosen is not None:
            return self._keep(values, self._handing_on(values, sized.bind(chosen)))

        def first(*tensors: Any) -> None:  # tunes, then keeps the bound launcher
            sized.run(*tensors)
            if sized.chosen is not None:
                self.chosen.setdefault(bucket, sized.chosen)
            self._keep(values, self._handing_on(values, sized.run))

        return self._keep(values, first)

    def _handing_on(
        self, values: tuple[int, ...], launch: Callable[..., Any]
    ) -> Callable[..., Any]:
        """``launch``; a :class:`DirectLaunch` not yet proven hands the generated hot
        path it makes after its first direct launch (decision 0461) to this size's entry,
        as a static kernel's ``TunedKernel.run`` takes it."""
        if isinstance(launch, DirectLaunch) and not launch.proven:

            def take(hot: Callable[..., Any]) -> None:
                self._keep(values, hot)

            launch.on_proven = take
        return launch

    def _keep(self, values: tuple[int, ...], launch: Callable[..., Any]) -> Callable[..., Any]:
        if len(self.launches) >= KEPT_SIZES:
            self.launches.clear()
        self.launches[values] = launch
        return launch


def sized_record_checks(
    kernel: Kernel,
    configs: Sequence[Config],
    sizes: Mapping[str, int | SizeValue],
    interpret: bool,
) -> None:
    """What a symbolic lowering of ``kernel`` (launched by ``configs`` with the size
    arguments ``sizes``) relies on, checked during the lowering: no scratch buffers sized
    by the kernel (split rows, clusters, tails, partials: ``NotImplementedError``, the
    graph lowers per size), and, compiled, Triton's specialisation of each size argument
    recorded as a condition (:func:`~.size_buckets.record_specialisation`)."""
    if kernel.tail is not None or kernel.partials is not None:
        raise NotImplementedError("a Triton kernel with a tail or partials lowers per size")
    if any(config.split > 1 or config.cluster > 1 for config in configs):
        raise NotImplementedError("split or clustered Triton rows lower per size")
    if not interpret:  # but a reduction's rows or a column sum's length (``module_source``)
        values = {ROWS_PARAM: kernel.rows, **sizes}
        if kernel.red_shape:
            del values[RED_PARAM if column_sum(kernel) else ROWS_PARAM]
        record_specialisation(values.values())
