"""Hypothesis strategies that draw valid random prims graphs (NNSmith-style fuzzing).

:func:`fuzz_cases` draws a :class:`FuzzCase`: 1-3 inputs of random shapes (rank 0-4, sizes
from :data:`SIZES`, zero sizes rare), dtypes (float32 mostly) and layouts, then 2-12 random
*steps*, each appending a few prims nodes (pointwise math, broadcasting binaries, ``where``
with a comparison, casts, views, ``cat``, reductions and the softmax / layer-norm patterns
built from them, iota masks, ``gather``, an extern ``argmax``/``cumsum``), and 1-3 outputs
(the last value and some intermediates, so multi-output kernels appear).

Every graph is valid by construction:

* operands are brought to one shape by exact views (:meth:`GraphDraft.conform`: slices, a
  reshape dropping dims, ``broadcast_in_dim``) and to one dtype by casts;
* domain errors are avoided: ``log(|x| + 1)``, ``sqrt(|x|)``, divisors ``max(|b|, 1)``,
  float -> int casts of clamped, NaN-free values;
* ops that are discontinuous in their operands (comparisons, rounding, ``remainder``,
  ``atan2``, float -> int/bool casts, ``argmax``) read only *exact* values: values that any
  correct backend computes bit for bit like the reference interpreter (inputs, views,
  casts, ``where``, max/min, integer math). A rounding difference inside a correct kernel
  then changes a result only where it is continuous, which a tolerance absorbs; a discrete
  flip (a different branch, an integer off by one) is a real bug.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
from hypothesis import strategies as st

from torchstrata.core import (
    Graph,
    GraphBuilder,
    Level,
    Node,
    TensorMeta,
    contiguous_strides,
    eliminate_dead_code,
    parse,
    prim,
    random_inputs,
)

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
CPU = torch.device("cpu")

#: Sizes of input dims, smallest first (hypothesis shrinks towards the first); 0 is rarer.
SIZES = (1, 2, 3, 5, 7, 8, 16, 33, 64, 130)
#: The most elements a drawn value may have (zero sizes counted as one): small kernels.
MAX_VOLUME = 4096
#: Sizes and budget of the rare large cases, past the thresholds where the backends change
#: strategy: split sums (2048 rows), C++ column blocks (1024) and OpenMP (32768 elements),
#: row caches (8192), the Triton interpreter's one-program tile (65536 elements).
LARGE_SIZES = (*SIZES, 1024, 2049, 4100, 9000, 70001)
LARGE_VOLUME = 1 << 18
#: Input and cast dtypes, repeated by weight: float32 mostly, 16-bit floats sometimes,
#: integers and bool occasionally.
DTYPES = (F32,) * 8 + (BF16, BF16, F16, F16) + (torch.int32, torch.int64, torch.int8, torch.bool)
#: Python scalars standing in for an operand (non-dyadic ones probe how a backend types them).
FLOAT_CONSTANTS = (1.0, 0.5, -1.0, 2.0, 0.0, -0.25, 3.0, 0.1, -1.7)
#: Integer scalars; the large ones (used where they fit the dtype) make products wrap.
INT_CONSTANTS = (1, 2, -1, 0, 3, 7, -5, 100, -128, 40000, 2**31 - 1)
#: Special input values written at a few positions of float inputs.
SPECIAL_VALUES = ("nan", "inf", "-inf", "-0.0", "0.0", "2.5", "-0.5", "1e4", "-3e4")

_COMPARISONS = ("lt", "gt", "eq", "ne", "le", "ge")
#: Prims whose result is exact when their operands are (integer results always are).
_EXACT_PRIMS = frozenset(
    {
        *_COMPARISONS,
        *("broadcast_in_dim", "reshape", "permute", "slice", "cat", "gather", "where"),
        *("neg", "abs", "maximum", "minimum", "amax", "amin", "argmax", "argmin"),
        *("floor", "ceil", "round", "trunc", "sign", "isnan", "isinf"),
        *("convert_element_type", "full", "iota"),
    }
)


def is_exact(node: Node, exact: set[Node]) -> bool:
    """Whether ``node`` computes an exact value when the values in ``exact`` are: an input,
    or an exact prim (:data:`_EXACT_PRIMS`) or an integer/bool result of exact operands."""
    if node.op is None:
        return True
    if not all(arg in exact for arg in node.input_nodes()):
        return False
    name = node.op.name.removeprefix("prims.")
    return name in _EXACT_PRIMS or not node.tensor_meta.dtype.is_floating_point


def exact_values(graph: Graph) -> set[Node]:
    """The values of ``graph`` that every correct backend computes bit for bit."""
    exact: set[Node] = set()
    for node in (*graph.inputs, *graph.nodes):
        if is_exact(node, exact):
            exact.add(node)
    return exact


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True with probability ``1/n`` (shrinks to False)."""
    return st.sampled_from((False,) * (n - 1) + (True,))


def volume(shape: Sequence[int]) -> int:
    """The number of elements of ``shape``, zero sizes counted as one (the drawing budget)."""
    return math.prod(max(size, 1) for size in shape)


@st.composite
def shapes(
    draw: st.DrawFn, max_rank: int = 4, sizes: Sequence[int] = SIZES, budget: int = MAX_VOLUME
) -> tuple[int, ...]:
    """A shape of rank 0..``max_rank`` from ``sizes`` (0 rarely) within ``budget``."""
    shape: list[int] = []
    for _ in range(draw(st.integers(0, max_rank))):
        fitting = [size for size in sizes if size * volume(shape) <= budget]
        shape.append(0 if draw(one_in(16)) else draw(st.sampled_from(fitting)))
    return tuple(shape)


@st.composite
def input_metas(draw: st.DrawFn, large: bool = False) -> TensorMeta:
    """An input: random shape (``large``: :data:`LARGE_SIZES`) and dtype; contiguous mostly,
    else permuted, broadcast (a stride 0) or strided (every other element of a wider row)."""
    scale = (LARGE_SIZES, LARGE_VOLUME) if large else (SIZES, MAX_VOLUME)
    shape, dtype = draw(shapes(4, *scale)), draw(st.sampled_from(DTYPES))
    layout = draw(st.sampled_from(("contiguous",) * 5 + ("permuted", "broadcast", "strided")))
    strides = list(contiguous_strides(shape))
    if layout == "permuted" and len(shape) > 1:
        order = draw(st.permutations(range(len(shape))))
        permuted = contiguous_strides([shape[d] for d in order])
        for position, dim in enumerate(order):
            strides[dim] = permuted[position]
    elif layout == "broadcast" and shape:
        strides[draw(st.integers(0, len(shape) - 1))] = 0
    elif layout == "strided" and shape:
        strides = [2 * stride for stride in contiguous_strides(shape)]
    return TensorMeta(shape, dtype, strides=tuple(strides))


@attrs.frozen(repr=False)
class FuzzCase:
    """A drawn graph and how to make its inputs: the seed of :func:`random_inputs`,
    ``specials`` written into them and the ``storage_offset`` they start at.

    ``specials`` holds ``(input index, element index, value)``, the value a float literal
    such as ``"nan"``. The repr is Python that rebuilds the case from the graph's text form:
    paste a shrunk failure into a regression test.
    """

    graph: Graph
    seed: int = 0
    specials: tuple[tuple[int, int, str], ...] = ()
    storage_offset: int = 0

    @classmethod
    def from_text(cls, text: str, **how: Any) -> FuzzCase:
        """A case from ``str(graph)`` and the other fields, as :meth:`__repr__` writes it."""
        return cls(parse(text), **how)

    def inputs(self) -> list[torch.Tensor]:
        """Fresh random inputs with the special values in place."""
        tensors = [self._offset(tensor) for tensor in random_inputs(self.graph, seed=self.seed)]
        for which, element, value in self.specials:
            tensor = tensors[which]
            if tensor.numel() and tensor.dtype.is_floating_point:
                index = torch.unravel_index(torch.tensor(element % tensor.numel()), tensor.shape)
                tensor[tuple(int(i) for i in index)] = float(value)
        return tensors

    def _offset(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (a view of its own storage from element 0) at ``storage_offset``."""
        if not self.storage_offset:
            return tensor
        storage = torch.as_strided(
            tensor, (tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0
        )
        padded = torch.cat([storage.new_zeros(self.storage_offset), storage])
        return padded.as_strided(tensor.shape, tensor.stride(), self.storage_offset)

    def __repr__(self) -> str:
        return (
            f'FuzzCase.from_text(\n    """\n{self.graph}\n""",\n    seed={self.seed},\n'
            f"    specials={self.specials!r},\n    storage_offset={self.storage_offset},\n)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints attrs classes field by field unless they define this."""
        printer.text(repr(self))


class GraphDraft:
    """A prims graph being drawn: its builder, the values steps may read, which are exact."""

    def __init__(self, draw: st.DrawFn, budget: int = MAX_VOLUME) -> None:
        self.draw = draw
        self.budget = budget
        self.rotation = draw(st.integers(0, 1 << 16))
        self.builder = GraphBuilder(Level.PRIMS)
        self.values: list[Node] = []
        self.exact: set[Node] = set()

    def input(self, meta: TensorMeta) -> Node:
        """Add a graph input (exact, readable by later steps)."""
        node = self.builder.input(f"in{len(self.values)}", meta)
        self.exact.add(node)
        return self.keep(node)

    def choose(self, options: Sequence[Any]) -> Any:
        """One of ``options``. Hypothesis draws the simplest choice (index 0) far more often
        than the others while generating; rotating the options by a number drawn once per
        graph spreads that bias over all of them across graphs."""
        return options[(self.draw(st.integers(0, len(options) - 1)) + self.rotation) % len(options)]

    def keep(self, node: Node) -> Node:
        """Make ``node`` available to later steps."""
        self.values.append(node)
        return node

    def call(self, name: str, *args: Any) -> Node:
        """Append ``prims.<name>(*args)``, tracking whether its value is exact."""
        node = self.builder.call(prim(name), *args)
        if is_exact(node, self.exact):
            self.exact.add(node)
        return node

    def pick(self, accept: Callable[[Node], bool] = lambda node: True) -> Node | None:
        """A value that ``accept`` takes: one of the last three half of the time (long
        chains fuse into deep kernels), else any (shrinks to the latest)."""
        candidates = [node for node in reversed(self.values) if accept(node)]
        if not candidates:
            return None
        recent = len(candidates) if self.draw(st.booleans()) else min(3, len(candidates))
        return candidates[self.draw(st.integers(0, recent - 1))]

    def constant(self, dtype: torch.dtype, *, divisor: bool = False) -> int | float | bool:
        """A Python scalar for an operand of ``dtype``; a divisor is neither 0 nor -1."""
        if dtype is torch.bool:
            return self.draw(st.booleans())
        pool: tuple[int | float, ...]
        if dtype.is_floating_point:
            pool = FLOAT_CONSTANTS
        else:
            info = torch.iinfo(dtype)
            pool = tuple(c for c in INT_CONSTANTS if info.min <= c <= info.max)
        return self.choose([c for c in pool if not divisor or c not in (0, -1)])

    # ------------------------------------------------------------- shapes and dtypes

    def conform(self, value: Node, shape: tuple[int, ...]) -> Node:
        """``value`` viewed as ``shape``: each of its dims is matched to a target dim (extra
        leading dims are sliced to one element and reshaped away), then sliced (with a
        start and step) or broadcast to the target size. Exact; a ``full`` if impossible."""
        source = value.tensor_meta.shape
        if source == shape:
            return value
        dropped = max(0, len(source) - len(shape))
        kept = len(source) - dropped
        slots = list(itertools.combinations(range(len(shape)), kept))
        targets = self.draw(st.sampled_from(slots))
        window = [self.window(size, 1) for size in source[:dropped]]
        for size, target in zip(source[dropped:], targets, strict=True):
            want = shape[target]
            window.append(self.window(size, want if size >= want else 1))
        if any(w is None for w in window):  # an empty dim cannot become a non-empty one
            return self.call(
                "full", shape, self.constant(value.tensor_meta.dtype), value.tensor_meta.dtype, CPU
            )
        starts, limits, steps = zip(*window, strict=True) if window else ((), (), ())
        if any(
            limit - start != size or step != 1
            for size, start, limit, step in zip(source, starts, limits, steps)
        ):
            value = self.call("slice", value, starts, limits, steps)
        if dropped:
            value = self.call("reshape", value, value.tensor_meta.shape[dropped:])
        return self.call("broadcast_in_dim", value, shape, targets)

    def window(self, size: int, length: int) -> tuple[int, int, int] | None:
        """``(start, limit, step)`` of a slice of ``length`` elements out of ``size``."""
        if length > size:
            return None
        if length <= 1:
            start = self.draw(st.integers(0, size - length))
            return start, start + length, 1
        step = self.draw(st.sampled_from([s for s in (1, 2, 3) if (length - 1) * s < size]))
        span = (length - 1) * step + 1
        start = self.draw(st.integers(0, size - span))
        return start, start + span, step

    def last_or_any_dim(self, rank: int) -> int:
        """The last dim half of the time (where cats and masks split C++ loops), else any."""
        return rank - 1 if self.draw(st.booleans()) else self.draw(st.integers(0, rank - 1))

    def common_shape(self, a: Node, b: Node) -> tuple[int, ...]:
        """Numpy broadcasting of the two shapes when it applies and fits, else ``a``'s."""
        try:
            shape = tuple(torch.broadcast_shapes(a.tensor_meta.shape, b.tensor_meta.shape))
        except RuntimeError:
            return a.tensor_meta.shape
        return shape if volume(shape) <= self.budget else a.tensor_meta.shape

    def can_cast(self, value: Node, dtype: torch.dtype) -> bool:
        """Float -> int/bool casts are discontinuous: only of exact values."""
        source = value.tensor_meta.dtype
        return dtype.is_floating_point or not source.is_floating_point or value in self.exact

    def cast(self, value: Node, dtype: torch.dtype) -> Node:
        """``value`` as ``dtype``; floats going to integers are clamped and NaN-free first
        (out-of-range float -> int conversion is undefined in C++)."""
        source = value.tensor_meta.dtype
        if source == dtype:
            return value
        if source.is_floating_point and dtype is not torch.bool and not dtype.is_floating_point:
            bounded = self.call("minimum", self.call("maximum", value, -100.0), 100.0)
            value = self.call("where", self.call("isnan", value), 0.0, bounded)
        return self.call("convert_element_type", value, dtype)

    def operand_like(self, a: Node, *, exact: bool = False) -> Node:
        """A second tensor operand for ``a``: some value (exact if asked) cast to ``a``'s
        dtype (any shape: see :meth:`binary_operands`)."""
        dtype = a.tensor_meta.dtype
        b = self.pick(lambda v: self.can_cast(v, dtype) and (v in self.exact or not exact))
        return self.cast(b, dtype) if b is not None else a

    def binary_operands(self, a: Node, b: Node) -> tuple[Node, Node]:
        """``a`` and ``b`` viewed as one common shape."""
        shape = self.common_shape(a, b)
        return self.conform(a, shape), self.conform(b, shape)

    def safe_divisor(self, b: Node | int | float) -> Node | int | float:
        """``max(|b|, 1)``: never 0 nor -1 (``INT_MIN / -1`` traps), and exact."""
        if not isinstance(b, Node):
            return b
        one = 1.0 if b.tensor_meta.dtype.is_floating_point else 1
        return self.call("maximum", self.call("abs", b), one)


# ------------------------------------------------------------------------ the steps

_FLOAT_UNARY: dict[str, Callable[[GraphDraft, Node], Node]] = {
    "exp": lambda d, x: d.call("exp", x),
    "tanh": lambda d, x: d.call("tanh", x),
    "neg": lambda d, x: d.call("neg", x),
    "abs": lambda d, x: d.call("abs", x),
    "sin": lambda d, x: d.call("sin", x),
    "cos": lambda d, x: d.call("cos", x),
    "erf": lambda d, x: d.call("erf", x),
    "atan": lambda d, x: d.call("atan", x),
    "expm1": lambda d, x: d.call("expm1", x),
    "exp2": lambda d, x: d.call("exp2", x),
    "sinh": lambda d, x: d.call("sinh", x),
    "gelu": lambda d, x: d.call(
        "mul",
        d.call("mul", x, 0.5),
        d.call("add", d.call("erf", d.call("mul", x, 0.7071067811865476)), 1.0),
    ),
    "sigmoid": lambda d, x: d.call(
        "reciprocal", d.call("add", d.call("exp", d.call("neg", x)), 1.0)
    ),
    "log": lambda d, x: d.call("log", d.call("add", d.call("abs", x), 1.0)),
    "log2": lambda d, x: d.call("log2", d.call("add", d.call("abs", x), 1.0)),
    "log1p": lambda d, x: d.call("log1p", d.call("abs", x)),
    "sqrt": lambda d, x: d.call("sqrt", d.call("abs", x)),
    "rsqrt": lambda d, x: d.call("rsqrt", d.call("add", d.call("abs", x), 1.0)),
    "reciprocal": lambda d, x: d.call("reciprocal", d.call("add", d.call("abs", x), 1.0)),
    "asin": lambda d, x: d.call("asin", d.call("tanh", x)),
    "pow": lambda d, x: d.call(
        "pow", d.call("add", d.call("abs", x), 0.5), d.choose((2, 3, 0.5, -1, 1.5))
    ),
}
#: Unary prims discontinuous in their operand: only applied to exact values.
#: (``reciprocal`` of a signed zero is a signed infinity.)
_DISCONTINUOUS_UNARY = ("floor", "ceil", "round", "trunc", "sign", "isnan", "isinf", "reciprocal")
_INT_UNARY = ("neg", "abs", "sign", "bitwise_not")
_FLOAT_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "remainder", "fmod", "atan2")
_BOOL_BINARY = ("bitwise_and", "bitwise_or", "bitwise_xor")
_INT_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "remainder", "fmod", *_BOOL_BINARY)
_DIVISIONS = ("div", "remainder", "fmod")
_DISCONTINUOUS_BINARY = ("remainder", "fmod", "atan2")


def unary_step(d: GraphDraft) -> None:
    """A unary pointwise op valid for the value's dtype (domain-safe compositions)."""
    x = d.pick()
    assert x is not None
    dtype = x.tensor_meta.dtype
    if dtype is torch.bool:
        d.keep(d.call("bitwise_not", x))
    elif not dtype.is_floating_point:
        d.keep(d.call(d.choose(_INT_UNARY), x))
    elif x in d.exact and d.draw(one_in(3)):
        d.keep(d.call(d.choose(_DISCONTINUOUS_UNARY), x))
    else:
        d.keep(_FLOAT_UNARY[d.choose(sorted(_FLOAT_UNARY))](d, x))


def binary_step(d: GraphDraft) -> None:
    """A binary pointwise op, operands broadcast to a common shape; sometimes a scalar."""
    a = d.pick()
    assert a is not None
    dtype = a.tensor_meta.dtype
    names: tuple[str, ...]
    if dtype is torch.bool:
        names = _BOOL_BINARY
    elif dtype.is_floating_point:
        names = _FLOAT_BINARY
    else:
        names = _INT_BINARY
    name = d.choose(names)
    exact = name in _DISCONTINUOUS_BINARY
    if exact and a not in d.exact:
        name, exact = "add", False
    b: Node | int | float | bool
    if d.draw(one_in(4)):
        b = d.constant(dtype, divisor=name in _DIVISIONS)
    else:
        a, b = d.binary_operands(a, d.operand_like(a, exact=exact))
    if name in _DIVISIONS:
        b = d.safe_divisor(b)
    scalar_first = not isinstance(b, Node) and name not in _DIVISIONS and d.draw(one_in(3))
    d.keep(d.call(name, *((b, a) if scalar_first else (a, b))))


def comparison(d: GraphDraft, x: Node) -> Node:
    """``x <cmp> y`` for an exact ``x``: against a scalar or another exact value."""
    if x.tensor_meta.dtype is torch.bool and d.draw(st.booleans()):
        return x
    name = d.choose(_COMPARISONS)
    if d.draw(st.booleans()):
        return d.call(name, x, d.constant(x.tensor_meta.dtype))
    return d.call(name, *d.binary_operands(x, d.operand_like(x, exact=True)))


def where_step(d: GraphDraft) -> None:
    """``where(cmp, a, b)``: the condition compares exact values, the branches are any."""
    condition = comparison(d, d.pick(lambda v: v in d.exact) or d.values[0])
    a = d.pick()
    assert a is not None
    condition, a = d.binary_operands(condition, a)
    shape, dtype = condition.tensor_meta.shape, a.tensor_meta.dtype
    if d.draw(one_in(4)):
        b: Node | int | float | bool = d.constant(dtype)
    else:
        b = d.conform(d.operand_like(a), shape)
    branches = (a, b) if d.draw(st.booleans()) else (b, a)
    d.keep(d.call("where", condition, *branches))


def cast_step(d: GraphDraft) -> None:
    """``convert_element_type`` to a random dtype (float -> int/bool of exact values only)."""
    x = d.pick()
    assert x is not None
    dtype = d.choose(DTYPES)
    if d.can_cast(x, dtype):
        d.keep(d.cast(x, dtype))


def view_step(d: GraphDraft) -> None:
    """A view: a slice with steps, a reshape, a broadcast adding dims, or a permute."""
    x = d.pick()
    assert x is not None
    shape = x.tensor_meta.shape
    kind = d.choose(("slice", "reshape", "broadcast", "permute"))
    if kind == "slice" and shape:
        windows = []
        for size in shape:
            length = d.draw(st.integers(min(size, 1), size))
            window = d.window(size, length)
            assert window is not None
            windows.append(window)
        d.keep(d.call("slice", x, *zip(*windows, strict=True)))
    elif kind == "reshape":
        d.keep(d.call("reshape", x, d.draw(reshaped(shape))))
    elif kind == "permute" and len(shape) > 1:
        d.keep(d.call("permute", x, tuple(d.draw(st.permutations(range(len(shape)))))))
    else:
        d.keep(d.conform(x, d.draw(broadcast_targets(shape, d.budget))))


@st.composite
def reshaped(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape of the same numel: flatten, merge two adjacent dims, split one, add or
    remove a size-1 dim."""
    dims = list(shape)
    kind = draw(st.sampled_from(("flatten", "merge", "split", "unsqueeze", "squeeze")))
    if kind == "flatten":
        return (math.prod(dims),)
    if kind == "merge" and len(dims) > 1:
        at = draw(st.integers(0, len(dims) - 2))
        return (*dims[:at], dims[at] * dims[at + 1], *dims[at + 2 :])
    if kind == "split" and dims:
        at = draw(st.integers(0, len(dims) - 1))
        factors = [f for f in range(2, dims[at]) if dims[at] % f == 0]
        if factors:
            factor = draw(st.sampled_from(factors))
            return (*dims[:at], factor, dims[at] // factor, *dims[at + 1 :])
    if kind == "squeeze" and 1 in dims:
        dims.remove(1)
        return tuple(dims)
    at = draw(st.integers(0, len(dims)))
    return (*dims[:at], 1, *dims[at:])


@st.composite
def broadcast_targets(draw: st.DrawFn, shape: tuple[int, ...], budget: int) -> tuple[int, ...]:
    """``shape`` with 1-2 new dims inserted and size-1 dims possibly expanded."""
    dims = list(shape)
    for at, size in enumerate(shape):
        wider = draw(st.sampled_from((1, 2, 3, 5)))
        if size == 1 and volume(dims) * wider <= budget:
            dims[at] = wider
    for _ in range(draw(st.integers(1, 2))):
        size = draw(st.sampled_from((1, 2, 3, 5, 8)))
        if volume(dims) * size <= budget:
            dims.insert(draw(st.integers(0, len(dims))), size)
    return tuple(dims)


def cat_step(d: GraphDraft) -> None:
    """``cat`` of 2-3 pieces along a dim: slices of one value (reordered, some negated, as
    in RoPE's rotate_half) and/or another value made to the same other dims."""
    x = d.pick(lambda v: v.tensor_meta.ndim > 0)
    if x is None:
        return
    shape = x.tensor_meta.shape
    dim = d.last_or_any_dim(len(shape))
    size = shape[dim]
    cuts = sorted(d.draw(st.lists(st.integers(0, size), min_size=1, max_size=2)))
    bounds = [0, *cuts, size]
    pieces = []
    for start, limit in itertools.pairwise(bounds):
        starts = [0] * len(shape)
        limits = list(shape)
        starts[dim], limits[dim] = start, limit
        piece = d.call("slice", x, tuple(starts), tuple(limits), (1,) * len(shape))
        if x.tensor_meta.dtype is not torch.bool and d.draw(one_in(3)):
            piece = d.call("neg", piece)
        pieces.append(piece)
    if d.draw(one_in(3)):
        other_shape = list(shape)
        other_shape[dim] = d.draw(st.sampled_from((1, 2, 3, 5)))
        if volume(other_shape) + volume(shape) <= d.budget:
            pieces.insert(
                d.draw(st.integers(0, len(pieces))),
                d.conform(d.operand_like(x), tuple(other_shape)),
            )
    order = d.draw(st.permutations(range(len(pieces))))
    d.keep(d.call("cat", [pieces[i] for i in order], dim))


def reduction_step(d: GraphDraft) -> None:
    """sum/amax/amin/prod over 1-2 dims; then maybe kept as size-1 dims, or broadcast back
    and combined with the input (the shape of softmax and normalisation)."""
    x = d.pick()
    assert x is not None
    if x.tensor_meta.dtype is torch.bool:
        x = d.cast(x, torch.int32)
    shape = x.tensor_meta.shape
    dims = (
        tuple(
            sorted(
                d.draw(
                    st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=2, unique=True)
                )
            )
        )
        if shape
        else ()
    )
    kind = d.choose(("sum", "sum", "amax", "amin", "prod"))
    if kind in ("amax", "amin") and any(shape[dim] == 0 for dim in dims):
        kind = "sum"  # torch refuses max/min over an empty dim
    reduced = d.call(kind, x, dims)
    kept = tuple(dim for dim in range(len(shape)) if dim not in dims)
    mode = d.choose(("plain", "keepdim", "combine"))
    if mode == "keepdim":
        keepdim = tuple(1 if dim in dims else size for dim, size in enumerate(shape))
        reduced = d.call("broadcast_in_dim", reduced, keepdim, kept)
    elif mode == "combine":
        back = d.call("broadcast_in_dim", reduced, shape, kept)
        name = d.choose(("sub", "add", "mul", "div"))
        d.keep(reduced)
        reduced = d.call(name, x, d.safe_divisor(back) if name == "div" else back)
    d.keep(reduced)


def softmax_step(d: GraphDraft) -> None:
    """softmax over a dim (amax, sub, exp, sum, div), 16-bit floats often upcast first."""
    x = d.pick(lambda v: v.tensor_meta.ndim > 0 and 0 not in v.tensor_meta.shape)
    if x is None:
        return
    dtype = x.tensor_meta.dtype
    compute = (
        F32 if not dtype.is_floating_point or (dtype != F32 and d.draw(st.booleans())) else dtype
    )
    xc = d.cast(x, compute)
    shape = xc.tensor_meta.shape
    dim = d.draw(st.integers(0, len(shape) - 1))
    kept = tuple(i for i in range(len(shape)) if i != dim)
    peak = d.call("broadcast_in_dim", d.call("amax", xc, (dim,)), shape, kept)
    e = d.call("exp", d.call("sub", xc, peak))
    total = d.call("broadcast_in_dim", d.call("sum", e, (dim,)), shape, kept)
    out = d.call("div", e, total)
    d.keep(d.cast(out, dtype) if dtype.is_floating_point else out)


def layer_norm_step(d: GraphDraft) -> None:
    """(x - mean) * rsqrt(var + 0.1) over the last 1-2 dims, 16-bit floats upcast."""
    x = d.pick(lambda v: v.tensor_meta.ndim > 0)
    if x is None:
        return
    dtype = x.tensor_meta.dtype
    xc = d.cast(x, F32 if dtype != F32 else dtype)
    shape = xc.tensor_meta.shape
    dims = tuple(range(len(shape) - d.draw(st.integers(1, min(2, len(shape)))), len(shape)))
    kept = tuple(i for i in range(len(shape)) if i not in dims)
    count = float(math.prod(shape[i] for i in dims))
    mean = d.call("div", d.call("sum", xc, dims), count)
    centered = d.call("sub", xc, d.call("broadcast_in_dim", mean, shape, kept))
    var = d.call("div", d.call("sum", d.call("mul", centered, centered), dims), count)
    # eps 0.1, not 1e-5: a constant row's variance is rounding noise, which 1e-5 would
    # amplify 300-fold past any tolerance.
    rstd = d.call("rsqrt", d.call("add", var, 0.1))
    out = d.call("mul", centered, d.call("broadcast_in_dim", rstd, shape, kept))
    d.keep(mean)
    d.keep(d.cast(out, dtype) if dtype.is_floating_point else out)


def iota_step(d: GraphDraft) -> None:
    """A position mask along a dim (``iota`` broadcast, compared): selects from a value,
    or picks one element per row (``sum(where(iota == index, x, 0))``)."""
    x = d.pick(lambda v: v.tensor_meta.ndim > 0)
    if x is None:
        return
    shape = x.tensor_meta.shape
    dim = d.last_or_any_dim(len(shape))
    start, step = d.draw(st.sampled_from((0, 1, -2))), d.draw(st.sampled_from((1, 2)))
    index_dtype = d.draw(st.sampled_from((torch.int64, torch.int32)))
    position = d.call("iota", shape[dim], start, step, index_dtype, CPU)
    position = d.call("broadcast_in_dim", position, shape, (dim,))
    index = d.pick(lambda v: v in d.exact and not v.tensor_meta.dtype.is_floating_point)
    if index is None or d.draw(one_in(3)):
        mask = d.call(d.choose(_COMPARISONS), position, d.draw(st.integers(-1, 9)))
    else:
        row_shape = tuple(1 if i == dim else size for i, size in enumerate(shape))
        index = d.conform(d.cast(index, index_dtype), row_shape)
        kept = tuple(range(len(shape)))
        mask = d.call("eq", position, d.call("broadcast_in_dim", index, shape, kept))
    dtype = x.tensor_meta.dtype
    zero = d.call("full", shape, False if dtype is torch.bool else 0, dtype, CPU)
    picked = d.call("where", mask, x, zero)
    if dtype is not torch.bool and d.draw(st.booleans()):
        picked = d.call("sum", picked, (dim,))
    d.keep(mask)
    d.keep(picked)


def gather_step(d: GraphDraft) -> None:
    """``gather`` along a dim with in-range int64 indices (often one per row)."""
    x = d.pick(lambda v: v.tensor_meta.ndim > 0 and 0 not in v.tensor_meta.shape)
    if x is None:
        return
    shape = x.tensor_meta.shape
    dim = d.draw(st.integers(0, len(shape) - 1))
    index_shape = list(shape)
    index_shape[dim] = d.draw(st.sampled_from((1, 1, 2, shape[dim])))
    source = d.pick(lambda v: v in d.exact and not v.tensor_meta.dtype.is_floating_point)
    if source is None:
        source = d.call("iota", index_shape[dim], 3, 5, torch.int64, CPU)
    index = d.conform(d.cast(source, torch.int64), tuple(index_shape))
    index = d.call("remainder", index, shape[dim])
    d.keep(d.call("gather", x, dim, index))


def extern_step(d: GraphDraft) -> None:
    """A prim with no lowering (``argmax`` of an exact value, ``cumsum``): an extern call
    between kernels."""
    x = d.pick(lambda v: v.tensor_meta.dtype is not torch.bool)
    if x is None:
        return
    shape = x.tensor_meta.shape
    dim = d.draw(st.integers(0, max(len(shape) - 1, 0)))
    if x in d.exact and (not shape or shape[dim]) and d.draw(st.booleans()):
        d.keep(d.call(d.choose(("argmax", "argmin")), x, dim))
    else:
        d.keep(d.call("cumsum", x, dim))


#: The steps, repeated by weight.
STEPS: tuple[Callable[[GraphDraft], None], ...] = (
    *(unary_step,) * 4,
    *(binary_step,) * 4,
    *(where_step,) * 2,
    *(cast_step,) * 2,
    *(view_step,) * 3,
    *(cat_step,) * 2,
    *(reduction_step,) * 3,
    softmax_step,
    layer_norm_step,
    iota_step,
    gather_step,
    extern_step,
)


@st.composite
def fuzz_cases(draw: st.DrawFn, max_steps: int = 12) -> FuzzCase:
    """A valid prims graph of 1-3 inputs, 2-``max_steps`` steps and 1-3 outputs, with the
    seed of its inputs and (sometimes) special values in its float inputs."""
    large = draw(one_in(8))
    d = GraphDraft(draw, LARGE_VOLUME if large else MAX_VOLUME)
    for _ in range(draw(st.integers(1, 3))):
        d.input(draw(input_metas(large)))
    for _ in range(draw(st.integers(2, max_steps))):
        d.choose(STEPS)(d)
    outputs = [d.values[-1]]
    for _ in range(draw(st.integers(0, 2))):
        node = d.pick()
        assert node is not None
        outputs.append(node)
    graph = eliminate_dead_code(d.builder.build(outputs))
    used = {arg for node in graph.nodes for arg in node.input_nodes()} | set(outputs)
    inputs = tuple(node for node in graph.inputs if node in used)
    graph = Graph(graph.level, inputs, graph.nodes, graph.outputs)
    specials: tuple[tuple[int, int, str], ...] = ()
    # len(): with ``inputs and draw(...)`` mypy types the draw by the tuple's type
    if len(inputs) > 0 and draw(one_in(4)):
        specials = tuple(
            draw(
                st.lists(
                    st.tuples(
                        st.integers(0, len(graph.inputs) - 1),
                        st.integers(0, LARGE_VOLUME),
                        st.sampled_from(SPECIAL_VALUES),
                    ),
                    min_size=1,
                    max_size=4,
                )
            )
        )
    offset = draw(st.sampled_from((1, 3, 8))) if draw(one_in(4)) else 0
    return FuzzCase(graph, draw(st.integers(0, 3)), specials, offset)
