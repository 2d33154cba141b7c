"""Inner loops split where a condition on the loop variable changes (cat, pad, masks)."""

from __future__ import annotations

import random
import re

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.cpp.ranges import MAX_RANGES, split_loop
from torchstrata.inductor.ir.exprs import Constant, IndexValue, Load, Op, walk
from torchstrata.inductor.ir.indexing import FloorDiv, Index, Mod, Var
from torchstrata.inductor.ir.ranges import affine_pieces, condition_runs

F32, I64 = torch.float32, torch.int64
X = Var("x3", 64)


def _value(index: Index, v: int) -> int:
    """``index`` evaluated at ``x3 = v`` (every atom of these indices reads only x3)."""
    return eval(index.render(lambda _: str(v), "//"))


def _compare(name: str, index: Index, constant: int, swapped: bool = False) -> Op:
    args = (IndexValue(index, I64), Constant(constant, I64))
    return Op(name, args[::-1] if swapped else args, torch.bool)


def _mod(index: Index, modulus: int) -> Index:
    return Index.of(Mod(index, modulus))


@pytest.mark.parametrize(
    ("condition", "changes"),
    [
        (_compare("lt", Index.of(X), 32), {32}),
        (_compare("ge", _mod(Index.of(X), 32), 16), {16, 32, 48}),
        (_compare("eq", Index.of(X), 5), {5, 6}),
        (_compare("ne", Index.of(X), 0), {1}),
        (_compare("gt", Index.of(X), 10, swapped=True), {10}),  # 10 > x
        (_compare("lt", Index.of(X) * -1 + 63, 10), {54}),  # 63 - x < 10
        (_compare("eq", Index.of(FloorDiv(Index.of(X), 16)), 2), {32, 48}),
        (_compare("lt", Index.of(X) * 2 + 1, 21), {10}),  # a slice with step 2
        (_compare("lt", Index.of(X), 64), set()),  # always true
    ],
)
def test_condition_changes(condition, changes):
    runs = condition_runs(condition, X)
    assert runs is not None and {start for start, _ in runs[1:]} == changes


def test_conditions_that_read_another_variable_or_memory_are_not_analysed():
    row = Var("x2", 5)
    per_row = _compare("lt", Index.of(X) + Index.of(row) * 64, 32)
    loaded = Op("lt", (Load("a", Index.of(X), I64), Constant(3, I64)), torch.bool)
    assert condition_runs(per_row, X) is None and condition_runs(loaded, X) is None
    (whole,) = split_loop([per_row, loaded], X)
    assert whole.var == X


def test_too_many_ranges_leave_the_loop_whole():
    stripes = _compare("lt", _mod(Index.of(X), 4), 2)  # flips every 2 elements
    (whole,) = split_loop([stripes], X)
    assert whole.var == X and whole.expr(stripes) is stripes


def _random_index(rng: random.Random, var: Var, depth: int = 0) -> Index:
    index = Index.of(var) * rng.choice([1, 1, 2, 3, -1]) + rng.randrange(0, 200)
    if depth < 2 and rng.random() < 0.7:
        inner = _random_index(rng, var, depth + 1)
        atom = rng.choice([Mod(inner, rng.randrange(2, 70)), FloorDiv(inner, rng.randrange(2, 40))])
        index = index + Index.of(atom) * rng.choice([1, 5, -2])
    return index


def test_affine_pieces_agree_with_the_index_everywhere():
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        var = Var("x3", rng.randrange(2, 150))
        index = _random_index(rng, var)
        if min(_value(index, v) for v in range(var.size)) < 0:
            continue  # indices are non-negative by construction in kernels
        pieces = affine_pieces(index, var)
        if pieces is None:
            continue  # not piecewise affine in few enough pieces: the loop stays whole
        checked += 1
        assert pieces[0].start == 0 and pieces[-1].stop == var.size
        for piece in pieces:
            for v in range(piece.start, piece.stop):
                assert piece.slope * v + piece.offset == _value(index, v), (index, v)
    # The skips above must leave enough cases to check (else the test checks nothing).
    assert checked >= 100, f"only {checked} of 300 random indices were checked"


def test_split_ranges_fold_every_analysed_condition_exactly():
    """Random conditions on random (non-negative) indices: in each range the condition
    folds to the constant that brute force finds at every position of the range, and
    rewritten indices keep their values."""
    rng = random.Random(1)
    split = checked = 0
    for _ in range(300):
        var = Var("x3", rng.randrange(2, 150))
        index = _random_index(rng, var)
        if min(_value(index, v) for v in range(var.size)) < 0:
            continue  # indices are non-negative by construction in kernels
        checked += 1
        name = rng.choice(["lt", "le", "gt", "ge", "eq", "ne"])
        constant = _value(index, rng.randrange(var.size)) + rng.choice([-1, 0, 1])
        condition = _compare(name, index, constant, swapped=rng.random() < 0.5)
        ranges = split_loop([condition], var)
        split += len(ranges) > 1
        for loop_range in ranges:
            folded = loop_range.expr(condition)
            values = {
                _condition_value(name, _value(index, v), constant, condition)
                for v in range(loop_range.start, loop_range.stop)
            }
            if len(ranges) > 1:
                assert isinstance(folded, Constant) and values == {folded.value}
            rewritten = loop_range.index(index)  # the same values, from the range's start
            for u in range(loop_range.stop - loop_range.start):
                assert _value(rewritten, u) == _value(index, u + loop_range.start)
    assert checked >= 150 and split > 50, (checked, split)


def _condition_value(name: str, value: int, constant: int, condition: Op) -> bool:
    """Brute force: the comparison at one position."""
    a, b = (value, constant) if isinstance(condition.args[0], IndexValue) else (constant, value)
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[name]


def test_a_cat_splits_into_contiguous_ranges():
    """where(x < 32, -q[x % 32 + 32], q[x % 32]): each range keeps one affine load."""
    wrapped = _mod(Index.of(X), 32)
    first = Op("neg", (Load("q", wrapped + 32, F32),), F32)
    cat = Op("where", (_compare("lt", Index.of(X), 32), first, Load("q", wrapped, F32)), F32)
    low, high = split_loop([cat], X)
    assert (low.start, low.stop, high.start, high.stop) == (0, 32, 32, 64)
    assert low.expr(cat) == Op("neg", (Load("q", Index.of(low.var) + 32, F32),), F32)
    assert high.expr(cat) == Load("q", Index.of(high.var), F32)


def test_conjunctions_of_conditions_fold():
    inside = Op(
        "bitwise_and",
        (_compare("ge", Index.of(X), 2), _compare("lt", Index.of(X), 7)),
        torch.bool,
    )
    masked = Op("where", (inside, Load("a", Index.of(X), F32), Constant(0.0, F32)), F32)
    ranges = split_loop([masked], X)
    assert [(r.start, r.stop) for r in ranges] == [(0, 2), (2, 7), (7, 64)]
    assert [type(r.expr(masked)) for r in ranges] == [Constant, Load, Constant]


# -- whole kernels against the reference interpreter --------------------------------------


def _source(compiled) -> str:
    return "\n".join(kernel.source for kernel in compiled.kernels)


def _inner_loop_lines(source: str) -> list[str]:
    """The lines inside innermost loops (after an ``omp simd`` pragma, up to its brace)."""
    lines, inside, depth = [], False, 0
    for line in source.splitlines():
        if "#pragma omp" in line and "simd" in line:
            inside, depth = True, 0
            continue
        if inside:
            depth += line.count("{") - line.count("}")
            lines.append(line)
            if depth <= 0 and "}" in line:
                inside = False
    return lines


def _rope_graph(shape, dtype=F32):
    """RoPE on q and k: x * cos + cat(-x2, x1) * sin over the last dim, cos/sin [T, D]."""
    b = GraphBuilder(Level.PRIMS)
    *lead, t, d = shape
    q = b.input("q", TensorMeta(tuple(shape), dtype))
    k = b.input("k", TensorMeta(tuple(shape), dtype))
    cos = b.input("c", TensorMeta((t, d), dtype))
    sin = b.input("s", TensorMeta((t, d), dtype))
    dims = (len(shape) - 2, len(shape) - 1)
    wide_cos = b.call(prim("broadcast_in_dim"), cos, tuple(shape), dims)
    wide_sin = b.call(prim("broadcast_in_dim"), sin, tuple(shape), dims)
    starts, half = [0] * len(shape), d // 2
    outputs = []
    for x in (q, k):
        x1 = b.call(prim("slice"), x, starts, (*lead, t, half), [1] * len(shape))
        x2 = b.call(prim("slice"), x, (*starts[:-1], half), tuple(shape), [1] * len(shape))
        rotated = b.call(prim("cat"), [b.call(prim("neg"), x2), x1], len(shape) - 1)
        outputs.append(
            b.call(
                prim("add"),
                b.call(prim("mul"), x, wide_cos),
                b.call(prim("mul"), rotated, wide_sin),
            )
        )
    return b.build(outputs)


def test_rope_is_split_into_contiguous_loops(ind):
    compiled = ind.check(_rope_graph((1, 4, 16, 64)), "cpp", seeds=(0, 1))
    (kernel,) = compiled.kernels
    inner = _inner_loop_lines(kernel.source)
    loads = [line for line in inner if "buf_q[" in line or "buf_k[" in line]
    assert loads and not any("%" in line for line in loads)
    assert not any("ts_where" in line for line in inner)
    assert ind.serial_rows(kernel.source).count("#pragma omp simd") == 2


@pytest.mark.parametrize("shape", [(2, 3, 7, 10), (1, 1, 5, 6), (3, 2), (2, 5, 2)])
@pytest.mark.parametrize("dtype", [F32, torch.bfloat16, torch.float64])
def test_rope_with_odd_sizes_matches(ind, shape, dtype):
    tolerance = 1e-2 if dtype is torch.bfloat16 else 1e-5
    ind.check(_rope_graph(shape, dtype), "cpp", seeds=(0, 1), atol=tolerance, rtol=tolerance)


def _cat_graph(sizes, dim=-1, lead=(3, 4), dtype=F32, transform=None):
    """cat of pieces of ``sizes`` along ``dim``: every other piece negated, then ``* 2``."""
    b = GraphBuilder(Level.PRIMS)
    rank = len(lead) + 1
    dim = dim % rank
    pieces = []
    for i, size in enumerate(sizes):
        shape = list(lead)
        shape.insert(dim, size)
        x = b.input(f"x{i}", TensorMeta(tuple(shape), dtype))
        negate = prim("bitwise_not" if dtype is torch.bool else "neg")
        pieces.append(b.call(negate, x) if i % 2 else x)
    out = b.call(prim("cat"), pieces, dim)
    if transform is not None:
        out = transform(b, out)
    elif dtype.is_floating_point:
        out = b.call(prim("mul"), out, 2.0)
    return b.build([out])


@pytest.mark.parametrize(
    "sizes",
    [(3, 5), (1, 7, 2), (4, 4, 4, 4), (5, 1, 1, 9, 2), (13, 11), tuple(range(1, 18))],
)
def test_cat_along_the_last_dim_with_unequal_pieces(ind, sizes):
    compiled = ind.check(_cat_graph(sizes), "cpp", seeds=(0, 1))
    pieces = len(sizes)
    loops = ind.serial_rows(_source(compiled)).count("#pragma omp simd")
    assert loops == (pieces if pieces <= MAX_RANGES else 1)


@pytest.mark.parametrize("dim", [0, 1])
def test_cat_along_an_outer_dim_matches(ind, dim):
    ind.check(_cat_graph((2, 3, 1), dim=dim, lead=(4, 6)), "cpp", seeds=(0, 1))


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float16])
def test_cat_in_other_dtypes(ind, dtype):
    ind.check(_cat_graph((3, 6, 2), dtype=dtype), "cpp", seeds=(0, 1))


def test_a_strided_slice_of_a_cat(ind):
    """cat(...)[..., 1::2] and [..., 2:15:3]: the position is an affine 2x+1 / 3x+2."""

    def slices(b, out):
        width = out.tensor_meta.shape[-1]
        odd = b.call(prim("slice"), out, (0, 0, 1), (3, 4, width), (1, 1, 2))
        third = b.call(prim("slice"), out, (0, 0, 2), (3, 4, 15), (1, 1, 3))
        return b.call(
            prim("add"), b.call(prim("slice"), odd, (0, 0, 0), (3, 4, 5), (1, 1, 1)), third
        )

    ind.check(_cat_graph((7, 4, 6), transform=slices), "cpp", seeds=(0, 1))


def test_a_cat_flattened_to_one_dim_splits_on_the_modulo(ind):
    """reshape(cat(a, -b), [-1]): the position along the cat is ``x0 % 8``."""

    def flatten(b, out):
        return b.call(prim("mul"), b.call(prim("reshape"), out, (24,)), 3.0)

    compiled = ind.check(_cat_graph((5, 3), lead=(3,), transform=flatten), "cpp", seeds=(0, 1))
    inner = _inner_loop_lines(_source(compiled))
    assert not any("%" in line for line in inner)


def test_a_long_one_dim_cat_keeps_its_parallel_loops(ind):
    compiled = ind.check(_cat_graph((40000, 30000, 5), lead=()), "cpp")
    assert _source(compiled).count("#pragma omp parallel for simd") == 1


def test_padding_with_constants(ind):
    """cat(zeros, x, ones): the constant ranges store constants, the middle one copies."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 9), F32))
    zeros = b.call(prim("full"), (5, 2), 0.0, F32, torch.device("cpu"))
    ones = b.call(prim("full"), (5, 3), 1.0, F32, torch.device("cpu"))
    padded = b.call(prim("cat"), [zeros, x, ones], 1)
    compiled = ind.check(b.build([b.call(prim("mul"), padded, 2.0)]), "cpp", seeds=(0, 1))
    inner = "\n".join(_inner_loop_lines(_source(compiled)))
    assert "ts_where" not in inner and "%" not in inner


def test_a_mask_from_an_iota_matches(ind):
    """where(2 <= i & i < 7, x, 0) (the iota is a buffer: its loads are not analysed)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 9), F32))
    position = b.call(prim("iota"), 9, start=0, step=1, dtype=I64, device="cpu")
    position = b.call(prim("broadcast_in_dim"), position, (5, 9), (1,))
    inside = b.call(
        prim("bitwise_and"), b.call(prim("ge"), position, 2), b.call(prim("lt"), position, 7)
    )
    masked = b.call(prim("where"), inside, x, 0.0)
    ind.check(b.build([b.call(prim("add"), masked, 1.0)]), "cpp", seeds=(0, 1))


@pytest.mark.parametrize("length", [9, 40])
def test_reductions_over_a_cat(ind, length):
    """sum and softmax over cat(x, -y) along the reduced dim (split reduction loops)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, length), F32))
    y = b.input("y", TensorMeta((6, 5), F32))
    joined = b.call(prim("cat"), [x, b.call(prim("neg"), y)], 1)
    total = b.call(prim("sum"), joined, (1,))
    peak = b.call(prim("amax"), b.call(prim("mul"), joined, 3.0), (1,))
    graph = b.build([total, peak, ind.softmax_last(b, joined)])
    ind.check(graph, "cpp", seeds=(0, 1), atol=1e-5, rtol=1e-5)


def test_a_reduction_over_a_cat_is_split(ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 16), F32))
    y = b.input("y", TensorMeta((6, 16), F32))
    joined = b.call(prim("cat"), [x, b.call(prim("neg"), y)], 1)
    compiled = ind.check(b.build([b.call(prim("sum"), joined, (1,))]), "cpp", seeds=(0, 1))
    source = ind.serial_rows(_source(compiled))
    assert len(re.findall(r"#pragma omp simd reduction", source)) == 2
    assert "%" not in "\n".join(_inner_loop_lines(source))


def test_a_kernel_without_conditions_is_not_split(ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 33), F32))
    compiled = ind.check(b.build([b.call(prim("exp"), x)]), "cpp")
    assert ind.serial_rows(_source(compiled)).count("#pragma omp simd") == 1
    assert "x1_0" not in _source(compiled)


def test_split_expressions_only_contain_range_variables():
    wrapped = _mod(Index.of(X), 32)
    cat = Op(
        "where",
        (_compare("lt", Index.of(X), 32), Load("q", wrapped + 32, F32), Load("q", wrapped, F32)),
        F32,
    )
    for loop_range in split_loop([cat], X):
        for node in walk(loop_range.expr(cat)):
            if isinstance(node, Load):
                assert node.index.variables() == {loop_range.var.name}
