"""Symbolic sizes: tensor dimensions that stand for any size (dynamic shapes).

A symbolic size is a ``torch.SymInt`` backed by one ``ShapeEnv``
(``torch.fx.experimental.symbolic_shapes``) per compile: :class:`SymbolicSizes`. While
a :func:`symbolic_scope` is active, capture gives the dimensions it names a symbol
(``s0``...) instead of their size, meta inference runs on fake tensors of that
``ShapeEnv``, and every decision Python code makes on a size (``x.shape[0] > 20``,
``T // 2`` as a slice bound, ``int(n)``) is recorded by the ``ShapeEnv`` as a guard.
:meth:`SymbolicSizes.check` re-checks those guards, and the sizes of every symbolic
input, for a call's actual sizes; :func:`concretize` turns a symbolic value back into
the ints of one call. See docs/decisions/0200.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core.int_arguments import readable_source

#: Symbolic scalar types (their ``.node.expr`` is a sympy expression over the symbols).
SYMBOLIC_TYPES = (torch.SymInt, torch.SymBool, torch.SymFloat)

_SYMBOL_NAME = re.compile(r"s(\d+)")
_SIZE_OF = re.compile(r"(?P<source>.+)\.size\(\)\[(?P<dim>\d+)\]")

_ACTIVE: contextvars.ContextVar[SymbolicSizes | None] = contextvars.ContextVar(
    "torchstrata_symbolic_sizes", default=None
)


def is_symbolic(value: Any) -> bool:
    """Whether ``value`` is a symbolic scalar that is not a known constant."""
    if not isinstance(value, SYMBOLIC_TYPES):
        return False
    return value.node.maybe_as_int() is None if isinstance(value, torch.SymInt) else True


def has_symbols(value: Any) -> bool:
    """Whether ``value`` (a scalar, a sequence or mapping of them) holds a symbolic size."""
    if isinstance(value, list | tuple):
        return any(has_symbols(item) for item in value)
    if isinstance(value, dict):
        return any(has_symbols(item) for item in value.values())
    return is_symbolic(value)


def size_hint(value: Any) -> int:
    """A size's value in the call being traced (a ``SymInt``'s hint), without a guard;
    a ``ValueError`` for a data-dependent size, which has none."""
    if isinstance(value, torch.SymInt):
        hint = value.node.hint
        if hint is None:
            raise ValueError(f"size {value} has no value in this call (data-dependent)")
        return int(hint)
    return int(value)


def specialise_sizes(value: Any) -> Any:
    """``value`` with every symbolic scalar in it made the plain ``int``, ``float`` or
    ``bool`` it is in the call being traced, each recording its guard in the ShapeEnv
    (``int(s0)`` records ``Eq(s0, 16)``): a trace that hands the value on stays right,
    for this size only. Unlike :func:`concretize` (values given, nothing guarded).

    Goes through lists, tuples and plain dicts (rebuilt), ``torch.Size`` and slices;
    other tuples (named tuples, ``torch.return_types``) are rebuilt with their type only
    where an item changed. A tensor comes back as it is, its symbolic sizes, strides and
    storage offset guarded (Dynamo's example values: the trace relied on them too).
    """
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.Tensor):
        specialise_sizes((*value.shape, *value.stride(), value.storage_offset()))
        return value
    if isinstance(value, slice):
        return slice(*specialise_sizes((value.start, value.stop, value.step)))
    if type(value) is dict:
        return {key: specialise_sizes(item) for key, item in value.items()}
    if not isinstance(value, list | tuple):
        return value
    items = [specialise_sizes(item) for item in value]
    if type(value) in (list, tuple, torch.Size):
        return type(value)(items)
    if all(new is old for new, old in zip(items, value, strict=True)):
        return value
    return value._make(items) if hasattr(value, "_make") else type(value)(items)


def size_or_int(value: Any) -> Any:
    """``value`` as an ``int``, or kept as a ``SymInt`` when it is truly symbolic."""
    if isinstance(value, torch.SymInt):
        constant = value.node.maybe_as_int()
        return value if constant is None else int(constant)
    if getattr(value, "is_size_value", False):  # a symbolic lowering's size (0381)
        return value
    return int(value)


def active_symbolic_sizes() -> SymbolicSizes | None:
    """The :class:`SymbolicSizes` of the compile in progress, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def symbolic_scope(sizes: SymbolicSizes | None) -> Iterator[None]:
    """Make ``sizes`` the active symbolic sizes (None: no dimension is symbolic)."""
    token = _ACTIVE.set(sizes)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def fake_mode_for(values: Any) -> contextlib.AbstractContextManager[Any]:
    """The fake-tensor mode (and torch's Python dispatcher) meta inference runs under
    when ``values`` hold symbolic sizes (meta tensors alone cannot carry them); a null
    context otherwise."""
    sizes = _ACTIVE.get()
    if sizes is None or not _metas_symbolic(values):
        return contextlib.nullcontext()
    from torch._dispatch.python import enable_python_dispatcher

    stack = contextlib.ExitStack()
    stack.enter_context(sizes.fake_mode)
    # Composite ops whose C++ kernels read plain sizes (``aten.pad``'s ``sizes()``)
    # would specialise every symbol they meet; the Python dispatcher runs torch's
    # SymInt-aware Python kernels of those ops instead, as torch.compile's tracing does.
    stack.enter_context(enable_python_dispatcher())
    return stack


def _metas_symbolic(values: Any) -> bool:
    if isinstance(values, list | tuple):
        return any(_metas_symbolic(item) for item in values)
    if isinstance(values, dict):
        return any(_metas_symbolic(item) for item in values.values())
    meta = getattr(values, "meta", values)
    if isinstance(meta, tuple):
        return any(_metas_symbolic(item) for item in meta)
    shape = getattr(meta, "shape", None)  # any SymInt, even one specialised since
    if shape is not None and any(isinstance(size, SYMBOLIC_TYPES) for size in shape):
        return True
    return isinstance(values, SYMBOLIC_TYPES)


def _size_source() -> type:
    from torch._guards import GuardSource, Source

    class _Name(str):
        """The source's name: a str (torch 2.13 reads ``source.name``) that also answers
        a call (versions that call ``source.name()``)."""

        def __call__(self) -> str:
            return str(self)

    @dataclasses.dataclass(frozen=True)
    class SizeSource(Source):
        """Where a symbol's value is read: ``L['x'].size()[0]``."""

        text: str

        # properties as in torch 2.13; the name also answers a call (see _Name)
        @functools.cached_property
        def name(self) -> str:
            return _Name(self.text)

        @functools.cached_property
        def guard_source(self) -> GuardSource:
            return GuardSource.LOCAL

        def reconstruct(self, codegen: Any) -> None:
            raise NotImplementedError

    return SizeSource


@dataclasses.dataclass(frozen=True)
class SymbolBinding:
    """Symbol ``name`` is the size of dimension ``dim`` of the input at ``source``."""

    name: str
    source: str
    dim: int


class SymbolicSizes:
    """The symbols of one compile and the guards recorded on them.

    :param dims: input source (``L['x']``) -> the dimensions of it to make symbolic.
    :param shape_env: the ``ShapeEnv`` to hold the symbols (default: a new one).
    """

    def __init__(self, dims: Mapping[str, Sequence[int]], shape_env: Any = None) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        self.dims = {source: tuple(sorted(set(d))) for source, d in dims.items()}
        self.shape_env = ShapeEnv() if shape_env is None else shape_env
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        self.bindings: list[SymbolBinding] = []
        #: inputs whose dims were asked to be symbolic but stayed static, and why
        self.refused: dict[str, str] = {}
        self._source_type = _size_source()

    def size(self, source: str, dim: int, hint: int) -> Any:
        """The size of ``dim`` of the input at ``source``: a new symbol when that
        dimension is symbolic (and its size is not 0 or 1), else ``hint``."""
        if dim not in self.dims.get(source, ()) or hint < 2:
            return hint
        return self.declare(f"{source}.size()[{dim}]", hint)

    def declare(self, where: str, hint: int, name: str | None = None) -> Any:
        """A new symbol read at ``where`` (``L['x'].size()[0]``: bound to that input
        dimension; any other text only names it), captured at size ``hint``; called
        ``name`` (``s77``) where that name is free (a parsed graph keeps its names)."""
        from unittest import mock

        from torch.fx.experimental.symbolic_shapes import DimDynamic

        source = self._source_type(where)
        number = _SYMBOL_NAME.fullmatch(name or "")
        taken = getattr(self.shape_env, "unique_ids", None)
        if not hasattr(self.shape_env, "_generate_unique_id"):
            taken = None  # a torch that names symbols otherwise: the name is not kept
        naming: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if number and taken is not None and int(number[1]) not in taken:
            # the ShapeEnv numbers a symbol by its source's hash; this one keeps its name
            def keep(_: str, wanted: int = int(number[1])) -> int:
                taken.add(wanted)
                return wanted

            naming = mock.patch.object(self.shape_env, "_generate_unique_id", keep)
        with naming:
            symbol = self.shape_env.create_symbol(
                hint, source=source, dynamic_dim=DimDynamic.DYNAMIC
            )
        bound = _SIZE_OF.fullmatch(where)
        if bound:
            self.bindings.append(SymbolBinding(str(symbol), bound["source"], int(bound["dim"])))
        return self.shape_env.create_symintnode(symbol, hint=hint, source=source)

    def guard_exprs(self) -> tuple[Any, ...]:
        """The sympy conditions the trace relied on (``s0 > 20``, ``Eq(s1, 64)``...)."""
        return tuple(guard.expr for guard in self.shape_env.guards)

    def describe_guards(self) -> tuple[str, ...]:
        """The recorded conditions as text, with each symbol named by its dimension."""
        names = {b.name: readable_source(f"{b.source}.size()[{b.dim}]") for b in self.bindings}
        texts = []
        for expr in self.guard_exprs():
            text = str(expr)
            for name in sorted(names, key=len, reverse=True):
                text = text.replace(name, names[name])
            texts.append(text)
        return tuple(texts)


def evaluate(value: Any, values: Mapping[str, int]) -> Any:
    """A symbolic scalar evaluated with ``values`` (symbol name -> int)."""
    import sympy  # type: ignore[import-untyped]

    expr = value.node.expr if isinstance(value, SYMBOLIC_TYPES) else value
    if not isinstance(expr, sympy.Basic):
        return value
    substituted = expr.xreplace({s: sympy.Integer(values[s.name]) for s in expr.free_symbols})
    if substituted is sympy.true or substituted is sympy.false:
        return bool(substituted)
    if isinstance(value, torch.SymBool):
        return bool(substituted)
    if isinstance(value, torch.SymFloat) or (substituted.is_Number and not substituted.is_Integer):
        return float(substituted)
    return int(substituted)
