"""Reduction kernels: row fusion, other dims, NaN propagation."""

from __future__ import annotations

import math

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim, random_inputs
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.codegen.triton.split_sums import parts_for
from torchstrata.inductor.codegen.triton.tuning import Config
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph


def _reduce(kind, shape, dims, dtype=torch.float32, strides=None):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype, strides=strides))
    return b.build(
        [b.call(prim(kind), b.call(prim("mul"), x, 2) if dtype.is_floating_point else x, dims)]
    )


@pytest.mark.parametrize("kind", ["sum", "amax", "amin", "prod"])
@pytest.mark.parametrize(
    ("shape", "dims"),
    [
        ((5, 9), (1,)),
        ((5, 9), (0,)),
        ((2, 3, 4), (0, 2)),
        ((6, 7), (0, 1)),
        ((3, 0), (0,)),
        ((4, 1), (1,)),
    ],
)
def test_reductions(ind, codegen, kind, shape, dims):
    if kind in ("amax", "amin") and any(shape[d] == 0 for d in dims):
        pytest.skip("torch refuses max/min over empty dims")
    compiled = ind.check(_reduce(kind, shape, dims), codegen)
    assert len(compiled.kernels) <= 1


def test_integer_sum(ind, codegen):
    ind.check(_reduce("sum", (4, 33), (1,), torch.int32), codegen)
    ind.check(_reduce("amax", (4, 33), (1,), torch.int64), codegen)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("kind", ["amax", "amin"])
@pytest.mark.parametrize("shape", [(2,), (3, 8), (16,), (2, 17)])
def test_integer_extrema_of_short_rows(ind, codegen, dtype, kind, shape):
    """GCC 12 miscompiled an `omp simd reduction(max:)` whose update was a masked select
    on integers, at row lengths 2, 8 and 16: amax of -[3, 2] came back as INT_MIN."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype))
    graph = b.build([b.call(prim(kind), b.call(prim("mul"), x, -1), (len(shape) - 1,))])
    ind.check(graph, codegen)


def test_max_propagates_nan(ind, codegen):
    graph = _reduce("amax", (3, 4), (1,))
    x = torch.randn(3, 4)
    x[1, 2] = float("nan")
    out = ind.compile(graph, codegen)(x)[0]
    assert torch.isnan(out[1]) and not torch.isnan(out[0]) and not torch.isnan(out[2])


def test_reduction_with_prologue_and_epilogue_outputs(ind, codegen):
    # y = x * 2 (an output too), s = sum(y, -1), z = y / s: one kernel, two outputs.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 10), torch.float32))
    y = b.call(prim("mul"), x, 2.0)
    s = b.call(prim("sum"), y, (1,))
    z = b.call(prim("div"), y, b.call(prim("broadcast_in_dim"), s, (6, 10), (0,)))
    compiled = ind.check(b.build([y, z, b.call(prim("sqrt"), b.call(prim("abs"), s))]), codegen)
    assert len(compiled.kernels) == 1


@pytest.mark.parametrize("rows, n", [(5, 33), (2, 70001)])
def test_layer_norm_like_is_one_kernel(ind, codegen, rows, n):
    # (2, 70001): beyond the interpreter's persistent tile, so two looped phases.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), float(n))
    centered = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (rows, n), (0,)))
    var = b.call(
        prim("div"), b.call(prim("sum"), b.call(prim("mul"), centered, centered), (1,)), float(n)
    )
    rstd = b.call(prim("rsqrt"), b.call(prim("add"), var, 1e-5))
    out = b.call(prim("mul"), centered, b.call(prim("broadcast_in_dim"), rstd, (rows, n), (0,)))
    compiled = ind.check(b.build([out]), codegen, atol=1e-4, rtol=1e-4)
    assert len(compiled.kernels) == 1


def test_reduction_read_at_another_row_is_materialised(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 8), torch.float32))
    s = b.call(prim("sum"), x, (1,))  # [4]
    flipped = b.call(prim("slice"), s, (1,), (4,), (1,))  # [3]: rows 1..3
    other = b.call(prim("slice"), x, (0, 0), (3, 8), (1, 1))
    out = b.call(prim("mul"), other, b.call(prim("broadcast_in_dim"), flipped, (3, 8), (0,)))
    compiled = ind.check(b.build([out]), codegen)
    assert len(compiled.kernels) == 2


@pytest.mark.parametrize("group", [0, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_huge_rows_use_an_online_softmax(ind, codegen, dtype, group, monkeypatch):
    # Rows beyond the persistent limit of the interpreter: max and sum of exp(x - max)
    # share one online loop (running sums rescaled), then one loop writes the output.
    # group: the variant with a running max per group of 8 elements (the autotuner may
    # pick either).
    if group and codegen != "triton":
        pytest.skip("a Triton code variant")
    if group:
        looped = Config(1, 4096, 1, persistent=False, group=group)
        monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [looped])
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 70001), dtype))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    out = b.call(prim("convert_element_type"), ind.softmax_last(b, xf), dtype)
    graph = b.build([out])
    compiled = ind.compile(graph, codegen)
    assert len(compiled.kernels) == 1
    inputs = random_inputs(graph, seed=0)
    inputs[0][0, 5000:] += 30.0  # the max grows late in the row: the sums are rescaled
    inputs[0][1, 7] = float("-inf")
    inputs[0][2, :] = float("-inf")
    inputs[0][3, 69000] = float("nan")
    expected = torch.softmax(inputs[0].double(), -1)
    actual = compiled(*inputs)[0]
    # softmax values of rows of 70001 are ~1e-5: an absolute tolerance would hide errors
    torch.testing.assert_close(actual.double(), expected, equal_nan=True, atol=1e-9, rtol=1e-2)
    if codegen == "triton":
        source = compiled.kernels[0].source
        # per group: the tile reshaped to [XBLOCK, RBLOCK // 8, 8], the groups' sums
        # rescaled to the row's max after the loop (``rsafe_``)
        assert ("tl.reshape(" in source) == ("rsafe_" in source) == bool(group)
        assert "scale_" in source


@pytest.mark.parametrize("group", [0, 8])
def test_the_maxima_are_counted_in_the_online_loop(ind, codegen, group, monkeypatch):
    # amax's backward counts the row's maxima (ties share the gradient): a sum of
    # (x == max(x)) that the online loop keeps beside the running max and sum of exps.
    if codegen != "triton" and group:
        pytest.skip("a Triton code variant")
    if codegen == "triton":
        looped = Config(1, 4096, 1, persistent=False, group=group)
        monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [looped])
    rows, n = 5, 70001
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.bfloat16))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    peak = b.call(prim("amax"), xf, (1,))
    spread = b.call(prim("broadcast_in_dim"), peak, (rows, n), (0,))
    total = b.call(prim("sum"), b.call(prim("exp"), b.call(prim("sub"), xf, spread)), (1,))
    ties = b.call(prim("eq"), spread, xf)
    count = b.call(prim("sum"), b.call(prim("convert_element_type"), ties, torch.int64), (1,))
    graph = b.build([peak, total, count])
    value = torch.randn(rows, n).to(torch.bfloat16)
    value[0, [10, 4200, 50000, n - 1]] = 40.0  # ties in several tiles, the last masked
    value[1, 3000:] += 8.0  # the max grows late: the count restarts
    value[1, 7] = float("-inf")
    value[2, :] = float("-inf")  # every element ties
    value[3, 69000] = float("nan")  # no element equals a NaN max
    value[4, 20000:20008] = 12.0  # ties within one group of 8
    compiled = ind.compile(graph, codegen)
    peak_out, total_out, count_out = compiled(value)
    reference = value.double()
    want_peak = reference.amax(1)
    torch.testing.assert_close(peak_out.double(), want_peak, equal_nan=True)
    want_count = (reference == want_peak[:, None]).sum(1)
    assert count_out.tolist() == want_count.tolist() == [4, want_count[1].item(), n, 0, 8]
    want_total = (reference - want_peak[:, None]).exp().sum(1)
    torch.testing.assert_close(total_out.double(), want_total, equal_nan=True, rtol=1e-5, atol=0)
    if codegen == "triton":
        assert compiled.kernels[0].source.count("for roffset") == 1


def test_keepdim_max_and_a_recomputed_output_share_the_kernel(ind, codegen):
    # The shape of cross-entropy's saved values: max kept as [M, 1], an iota output that
    # the picked-logit sum also reads (recomputed, not loaded from a later kernel).
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 10), torch.float32))
    t = b.input("t", TensorMeta((6,), torch.int64))
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (1,)), (6, 1), (0,))
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), peak, (6, 10), (0, 1)))
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    iota = b.call(prim("iota"), 10, 0, 1, torch.int64, torch.device("cpu"))
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, (6, 10), (1,)),
        b.call(prim("broadcast_in_dim"), t, (6, 10), (0,)),
    )
    zero = b.call(
        prim("broadcast_in_dim"),
        b.call(prim("full"), (), 0.0, torch.float32, torch.device("cpu")),
        (6, 10),
        (),
    )
    picked = b.call(prim("sum"), b.call(prim("where"), hit, x, zero), (1,))
    graph = b.build([peak, total, picked, iota])
    inputs = [torch.randn(6, 10), torch.randint(0, 10, (6,))]
    compiled = ind.check(graph, codegen, inputs=inputs)
    # the row kernel (the picked logit is one indirect load per row, behind its range
    # check) and the iota output of its own
    assert len(compiled.kernels) == 2 and compiled.eager_ops == ()


def test_gather_of_one_index_per_row_fuses(ind, codegen):
    # Cross-entropy's picked log-probability: gather(log_softmax(x), 1, t[:, None]) is a
    # where-sum over the row in the softmax kernel, not a materialised [M, V] tensor.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((7, 33), torch.float32))
    t = b.input("t", TensorMeta((7, 1), torch.int64))
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (1,)), (7, 33), (0,))
    shifted = b.call(prim("sub"), x, peak)
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    logp = b.call(
        prim("sub"),
        shifted,
        b.call(prim("broadcast_in_dim"), b.call(prim("log"), total), (7, 33), (0,)),
    )
    picked = b.call(prim("gather"), logp, 1, t)
    graph = b.build([b.call(prim("neg"), picked)])
    inputs = [torch.randn(7, 33), torch.randint(0, 33, (7, 1))]
    compiled = ind.check(graph, codegen, inputs=inputs, atol=1e-5, rtol=1e-5)
    # gather(x - m - log(s)) is gather(x) - m - log(s): the input's one element per row
    # is an indirect load, combined with the row statistics in the same kernel; no
    # [7, 33] value is materialised.
    assert compiled.eager_ops == () and len(compiled.kernels) == 1


def test_gather_of_a_computed_leaf_is_a_where_sum(ind, codegen):
    # Pushed through exp and mul, the gather meets a slice of the input: a computed leaf
    # (index arithmetic), picked by a where-sum over the row inside the kernel.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((7, 40), torch.float32))
    t = b.input("t", TensorMeta((7, 1), torch.int64))
    window = b.call(prim("slice"), x, (0, 5), (7, 38), (1, 1))
    picked = b.call(prim("gather"), b.call(prim("exp"), b.call(prim("mul"), window, 3.0)), 1, t)
    graph = b.build([picked])
    inputs = [torch.randn(7, 40), torch.randint(0, 33, (7, 1))]
    compiled = ind.check(graph, codegen, inputs=inputs, atol=1e-5, rtol=1e-5)
    assert "prims.gather" not in compiled.eager_ops


@pytest.mark.parametrize("kind", ["sum", "prod"])
def test_reduction_over_an_empty_dim(ind, codegen, kind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 0), torch.float32))
    ind.check(b.build([b.call(prim(kind), x, (1,))]), codegen)


def test_cross_entropy_of_huge_rows_reads_the_row_once(ind, codegen):
    # gather(log_softmax(x)) is pushed through the subtractions down to x: the picked logit
    # is one element read by an indirect load, the max and the sum of exponentials share
    # ONE online loop over the row.
    rows, n = 3, 70001
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.bfloat16))
    t = b.input("t", TensorMeta((rows, 1), torch.int64))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), xf, (1,)), (rows, n), (0,))
    shifted = b.call(prim("sub"), xf, peak)
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    lse = b.call(prim("broadcast_in_dim"), b.call(prim("log"), total), (rows, n), (0,))
    picked = b.call(prim("gather"), b.call(prim("sub"), shifted, lse), 1, t)
    graph = b.build([b.call(prim("neg"), picked)])
    x_value = torch.randn(rows, n).to(torch.bfloat16)
    x_value[1, 5] = float("-inf")
    target = torch.tensor([[0], [n - 1], [12345]])
    compiled = ind.compile(graph, codegen)
    actual = compiled(x_value, target)[0]
    expected = -torch.log_softmax(x_value.double(), -1).gather(1, target)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)
    # One kernel: the row's statistics, then the gathered logit combined with them.
    assert compiled.eager_ops == () and len(compiled.kernels) == 1
    if codegen == "triton":
        assert compiled.kernels[0].source.count("for roffset") == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape, dims",
    [((4096, 3), (0,)), ((2, 2048, 5), (0, 1)), ((4099, 3), (0,)), ((2, 2053, 5), (0, 1))],
)
def test_long_column_sums_are_exact_in_two_levels(ind, codegen, dtype, shape, dims):
    # Triton splits sums over >= 2048 leading rows into partial sums (float32 for bf16).
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype))
    y = b.input("y", TensorMeta(shape, dtype))
    graph = b.build([b.call(prim("sum"), b.call(prim("mul"), x, y), dims)])
    compiled = ind.compile(graph, codegen)
    inputs = random_inputs(graph, seed=1)
    expected = (inputs[0].double() * inputs[1].double()).sum(dims)
    actual = compiled(*inputs)[0]
    assert actual.dtype == dtype
    tolerance = 1e-2 if dtype is torch.bfloat16 else 1e-4
    torch.testing.assert_close(actual.double(), expected, atol=tolerance, rtol=tolerance)
    if codegen != "cpp":
        assert len(compiled.kernels) == 2


def test_parts_of_a_split_sum_divide_the_length():
    assert parts_for(16384) == 16 and parts_for(4096) == 4 and parts_for(2047) == 1
    assert parts_for(16384, 64) == 256 and parts_for(4096, 64) == 64
    assert parts_for(3001, 64) == 1  # a prime: no even split
    assert parts_for(6000, 64) == 80  # the largest divisor of 6000 up to 6000 // 64


def test_split_sums_pad_lengths_without_a_near_divisor():
    from torchstrata.inductor.codegen.triton.split_sums import CHUNK, split_plan

    assert split_plan(16384) == (16, 0) and split_plan(2047) == (1, 0)
    assert split_plan(6000, 64) == (80, 0)  # 75 rows per part: no padding
    # a prime, and twice a prime: parts of at most CHUNK rows over zero-padded rows
    for length, chunk in ((100003, 64), (100003, CHUNK), (4106, CHUNK)):
        parts, padding = split_plan(length, chunk)
        size = (length + padding) // parts
        assert parts > 1 and size <= CHUNK and (length + padding) % parts == 0
        assert 0 < padding < parts  # the last rows of the last parts only


@pytest.mark.parametrize("hosted", [True, False])
def test_column_sums_take_small_parts_only_with_a_row_kernel_to_join(hosted, monkeypatch):
    from torchstrata.inductor.codegen.triton.split_sums import CHUNK, HOSTED_CHUNK, split_long_sums

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8192, 256), torch.float32))
    y = b.call(prim("mul"), x, 2.0)
    outputs = [b.call(prim("sum"), y, (0,))]
    if hosted:  # a row sum over the same [8192, 256] domain: the parts will join its kernel
        outputs.append(b.call(prim("sum"), y, (1,)))
    graph = split_long_sums(b.build(outputs))
    shapes = [n.tensor_meta.shape for n in graph.nodes if n.op == prim("reshape")]
    chunk = HOSTED_CHUNK if hosted else CHUNK
    assert [tuple(s) for s in shapes] == [(8192 // chunk, chunk, 256)]


def _one_hot_sum(picked_varies: bool):
    b = GraphBuilder(Level.PRIMS)
    index = b.input("index", TensorMeta((6,), torch.int64))
    v = b.input("v", TensorMeta((6,), torch.float32))
    x = b.input("x", TensorMeta((6, 9), torch.float32))
    iota = b.call(prim("iota"), 9, 0, 1, torch.int64, torch.device("cpu"))
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, (6, 9), (1,)),
        b.call(prim("broadcast_in_dim"), index, (6, 9), (0,)),
    )
    picked = x if picked_varies else b.call(prim("broadcast_in_dim"), v, (6, 9), (0,))
    zero = b.call(prim("full"), (6, 9), 0.0, torch.float32, torch.device("cpu"))
    return b.build([b.call(prim("sum"), b.call(prim("where"), hit, picked, zero), (1,))])


@pytest.mark.parametrize("picked_varies", [False, True])
def test_a_sum_of_one_hot_rows_needs_no_loop(ind, codegen, picked_varies):
    # Cross-entropy backward's sum of its one-hot gradient: where(0 <= i < 9, v, 0).
    graph = _one_hot_sum(picked_varies)
    index = torch.tensor([0, 8, 3, -1, 9, -100])  # out of range on both sides: 0
    inputs = [index, torch.randn(6), torch.randn(6, 9)]
    compiled = ind.check(graph, codegen, inputs=inputs)
    # varying along the row: x (in memory) is read by an indirect load at the clamped
    # index, in the kernel (no extern gather)
    assert compiled.eager_ops == ()
    if codegen == "triton":
        body = compiled.kernels[0].source.split("def kernel")[-1]
        assert "tl.reduce" not in body


def _picked_logit(dtype: torch.dtype, leaf: str):
    """sum(where(iota == t, f(x), 0), 1): x.float() (pushed down to x) or a sliced window of
    x times 3 (a computed leaf, no gather possible)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 11), dtype))
    t = b.input("t", TensorMeta((6,), torch.int64))
    if leaf == "convert":
        value = b.call(prim("convert_element_type"), x, torch.float32)
    else:
        window = b.call(prim("slice"), x, (0, 1), (6, 10), (1, 1))
        value = b.call(
            prim("mul"), b.call(prim("convert_element_type"), window, torch.float32), 3.0
        )
    width = value.tensor_meta.shape[1]
    iota = b.call(prim("iota"), width, 0, 1, torch.int64, torch.device("cpu"))
    # as eager code spells it: arange(w)[None, :] == t[:, None], two broadcasts each
    rows = b.call(prim("broadcast_in_dim"), iota, (1, width), (1,))
    column = b.call(prim("broadcast_in_dim"), t, (6, 1), (0,))
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), rows, (6, width), (0, 1)),
        b.call(prim("broadcast_in_dim"), column, (6, width), (0, 1)),
    )
    zero = b.call(prim("full"), (6, width), 0.0, torch.float32, torch.device("cpu"))
    return b.build([b.call(prim("sum"), b.call(prim("where"), hit, value, zero), (1,))])


@pytest.mark.parametrize("leaf", ["convert", "window"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_picked_logit_written_as_a_where_sum(ind, codegen, dtype, leaf):
    # Explicit cross-entropy's picked logit: one element per row, with out-of-range targets
    # (0), NaN and inf off the target (ignored) and -0.0 on it (the sum gives +0.0).
    graph = _picked_logit(dtype, leaf)
    x = torch.randn(6, 11).to(dtype)
    x[0, 4], x[1, :] = float("nan"), float("inf")
    x[2, 3 + (leaf == "window")] = -0.0
    t = torch.tensor([2, 5, 3, -1, 9, 11 if leaf == "convert" else 9])
    x[1, 5 + (leaf == "window")] = 1.5
    compiled = ind.check(graph, codegen, inputs=[x, t])
    actual = compiled(x, t)[0]
    assert math.copysign(1.0, actual[2].item()) == 1.0  # +0.0, as eager's sum gives
    # convert: the gather pushed down to x is an indirect load; window: a where-sum
    assert compiled.eager_ops == ()


def test_a_row_value_joins_the_kernel_of_the_reductions_it_reads(ind, codegen):
    # p = sum(x, 1) + 1 comes after s = sum(2 * sum(x, 1)), whose kernel walks the rows'
    # sums and would take p too (its domain is p's shape), loading the row sums back;
    # p is stored per row by the kernel that computes them instead
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8, 16), torch.float32))
    rows = b.call(prim("sum"), x, (1,))
    total = b.call(prim("sum"), b.call(prim("mul"), rows, 2.0), (0,))
    graph = b.build([total, b.call(prim("add"), rows, 1.0)])
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=True))
    kernels = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    (host,) = [k for k in kernels if k.red_shape == (16,)]
    stored = [store.buffer for store in host.row_stores]
    assert any(name.startswith("buf_add") for name in stored), stored
    ind.check(graph, codegen)
