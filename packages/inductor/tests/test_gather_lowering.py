"""``prims.gather`` of a buffer as an indirect load inside the kernels of its users."""

from __future__ import annotations

import math
import re

import pytest
import torch

from torchstrata.core import (
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    eliminate_dead_code,
    interpret,
    prim,
)
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.triton import backend as triton_backend
from torchstrata.inductor.codegen.triton.tuning import Config
from torchstrata.inductor.ir.exprs import IndirectLoad, walk
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.passes.one_hot import one_hot_sums
from torchstrata.inductor.passes.rewrites import gather_as_reduction
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph
from torchstrata.inductor.schedule.scheduler import ExternStep

CPU = torch.device("cpu")


def _gather(shape, dim, index_shape, dtype=torch.float32, strides=None):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype, strides=strides))
    index = b.input("index", TensorMeta(index_shape, torch.int64))
    return b.build([b.call(prim("gather"), x, dim, index)])


def _indices(size, shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, shape, generator=generator)


def _indirect_loads(kernel: Kernel) -> list[IndirectLoad]:
    roots = [spec.body for spec in kernel.reductions]
    roots += [store.value for store in (*kernel.row_stores, *kernel.full_stores)]
    return [expr for root in roots for expr in walk(root) if isinstance(expr, IndirectLoad)]


def _plan(graph):
    """The plan ``compile_graph`` makes for the C++ backend (rewrites first)."""
    graph = eliminate_dead_code(one_hot_sums(gather_as_reduction(graph)))
    return plan_graph(graph, lower_graph(graph, CppBackend().supports))


@pytest.mark.parametrize(
    ("shape", "dim", "index_shape"),
    [
        ((7, 13), 1, (5, 9)),  # the last dim; fewer rows than the source
        ((7, 13), 0, (11, 13)),  # dim 0, more rows gathered than the source has
        ((6,), 0, (17,)),
        ((1, 5), 0, (1, 5)),  # a gathered dim of size one
        ((4, 1, 6), 2, (3, 1, 5)),  # a size-one dim between
        ((3, 5), 1, (0, 5)),  # nothing to gather
        ((0, 5), 1, (0, 3)),  # an empty source, nothing to gather
    ],
)
def test_gather_of_an_input_is_one_kernel(ind, codegen, shape, dim, index_shape):
    graph = _gather(shape, dim, index_shape)
    x = torch.randn(shape)
    index = _indices(shape[dim], index_shape)
    compiled = ind.check(graph, codegen, inputs=[x, index])
    assert compiled.eager_ops == ()
    assert len(compiled.kernels) == (1 if math.prod(index_shape) else 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_gather_of_other_float_dtypes(ind, codegen, dtype):
    graph = _gather((5, 11), 1, (5, 4), dtype)
    compiled = ind.check(
        graph, codegen, inputs=[torch.randn(5, 11).to(dtype), _indices(11, (5, 4))]
    )
    assert compiled.eager_ops == ()


def test_gather_of_a_transposed_input(ind, codegen):
    graph = _gather((7, 13), 1, (7, 5), strides=(1, 7))
    x = torch.randn(13, 7).t()
    compiled = ind.check(graph, codegen, inputs=[x, _indices(13, (7, 5))])
    assert compiled.eager_ops == ()


@pytest.mark.parametrize("view", ["permute", "slice", "reshape"])
def test_gather_of_a_view_of_an_input(ind, codegen, view):
    # Views of a buffer are strided loads: the gather reads the buffer itself.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((9, 8), torch.float32))
    if view == "permute":
        source = b.call(prim("permute"), x, (1, 0))  # [8, 9]
    elif view == "slice":
        source = b.call(prim("slice"), x, (1, 2), (9, 8), (2, 3))  # [4, 2]
    else:
        source = b.call(prim("reshape"), x, (3, 24))
    rows, width = source.tensor_meta.shape
    index = b.input("index", TensorMeta((rows, 5), torch.int64))
    graph = b.build([b.call(prim("gather"), source, 1, index)])
    compiled = ind.check(graph, codegen, inputs=[torch.randn(9, 8), _indices(width, (rows, 5))])
    assert compiled.eager_ops == () and len(compiled.kernels) == 1


def test_gather_of_an_extern_result(ind, codegen):
    # A matmul's result is a buffer too: the kernel after the extern call gathers from it.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 6), torch.float32))
    w = b.input("w", TensorMeta((6, 7), torch.float32))
    index = b.input("index", TensorMeta((5, 2), torch.int64))
    product = b.call(aten("mm.default"), x, w)
    graph = b.build([b.call(prim("neg"), b.call(prim("gather"), product, 1, index))])
    inputs = [torch.randn(5, 6), torch.randn(6, 7), _indices(7, (5, 2))]
    compiled = ind.check(graph, codegen, inputs=inputs, atol=1e-5, rtol=1e-5)
    assert compiled.eager_ops == ("aten.mm.default",) and len(compiled.kernels) == 1


def test_broadcast_index_as_index_select(ind, codegen):
    # index_select's form: one index per column, broadcast over the rows (stride 0).
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 10), torch.float32))
    t = b.input("t", TensorMeta((7,), torch.int64))
    index = b.call(prim("broadcast_in_dim"), t, (6, 7), (1,))
    graph = b.build([b.call(prim("gather"), x, 1, index)])
    compiled = ind.check(graph, codegen, inputs=[torch.randn(6, 10), _indices(10, (7,))])
    assert compiled.eager_ops == () and len(compiled.kernels) == 1


def _fused_graph():
    """Wrapped negative indices before, pointwise after, and a sum and max over the
    gathered values, all from one gather."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 13), torch.float32))
    t = b.input("t", TensorMeta((6, 9), torch.int64))
    w = b.input("w", TensorMeta((6, 9), torch.float32))
    wrapped = b.call(prim("where"), b.call(prim("lt"), t, 0), b.call(prim("add"), t, 13), t)
    picked = b.call(prim("gather"), x, 1, wrapped)
    scaled = b.call(prim("mul"), b.call(prim("exp"), picked), w)
    total = b.call(prim("sum"), scaled, (1,))
    peak = b.call(prim("amax"), picked, (1,))
    return b.build([total, peak])


def test_gather_fused_with_pointwise_and_reductions(ind, codegen):
    inputs = [torch.randn(6, 13), torch.randint(-13, 13, (6, 9)), torch.randn(6, 9)]
    compiled = ind.check(_fused_graph(), codegen, inputs=inputs, atol=1e-5, rtol=1e-5)
    assert compiled.eager_ops == () and len(compiled.kernels) == 1


@pytest.mark.parametrize("width", [300, 9000])
def test_gather_in_a_looped_softmax(ind, codegen, monkeypatch, width):
    # Triton: the gathered values feed an online max/sum loop over the row, then the store
    # loop (the indirect load is emitted in each loop's scope). C++: rows of 300 reuse the
    # first loop's exps (a row cache); rows of 9000 take the chunked online loop.
    if codegen == "triton":
        looped = Config(1, 128, 1, persistent=False)
        monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [looped])
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, 10007), torch.bfloat16))
    t = b.input("t", TensorMeta((3, width), torch.int64))
    picked = b.call(prim("convert_element_type"), b.call(prim("gather"), x, 1, t), torch.float32)
    graph = b.build([ind.softmax_last(b, picked)])
    inputs = [torch.randn(3, 10007).to(torch.bfloat16), _indices(10007, (3, width))]
    compiled = ind.check(graph, codegen, inputs=inputs, atol=1e-6, rtol=1e-5)
    assert compiled.eager_ops == () and len(compiled.kernels) == 1
    if codegen == "triton":
        assert "for roffset" in compiled.kernels[0].source


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_out_of_range_indices_raise_or_give_nan_without_reading_out_of_bounds(ind, codegen, dtype):
    # Eager raises; so does C++ (the kernel reports the index, the call raises), while a
    # Triton kernel cannot: its result is NaN there. The source is a slice of a wider
    # input whose other columns hold 1000: a load past the slice's columns would read
    # those (a plausible number), and one at 2**40 or -2**63 would fault.
    b = GraphBuilder(Level.PRIMS)
    base = b.input("base", TensorMeta((4, 10), dtype))
    x = b.call(prim("slice"), base, (0, 0), (4, 6), (1, 1))
    index = b.input("index", TensorMeta((4, 3), torch.int64))
    graph = b.build([b.call(prim("gather"), x, 1, index)])
    values = torch.full((4, 10), 1000.0, dtype=dtype)
    values[:, :6] = torch.randn(4, 6).to(dtype)
    index_values = torch.tensor(
        [[-1, 0, 6], [2**40, 5, -(2**40)], [3, 7, 1], [-(2**63), 2**63 - 1, 2]]
    )
    compiled = ind.compile(graph, codegen)
    assert compiled.eager_ops == ()
    if codegen == "cpp":
        with pytest.raises(IndexError, match=r"^index -1 is out of bounds .* size 6 "):
            compiled(values, index_values)
        return
    (actual,) = compiled(values, index_values)
    inside = (index_values >= 0) & (index_values < 6)
    assert torch.isnan(actual[~inside]).all()
    expected = values[:, :6].gather(1, index_values.clamp(0, 5))
    assert torch.equal(actual[inside], expected[inside])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (40000, "index 40000 is out of bounds for dimension with size 37"),
        (37, "index 37 is out of bounds for dimension with size 37"),
        (-1, "index -1 is out of bounds for dimension with size 37"),
        (-(2**63), f"index {-(2**63)} is out of bounds for dimension with size 37"),
    ],
)
def test_cpp_out_of_range_gather_raises(ind, bad, message):
    graph = _gather((5, 37), 1, (5, 9))
    x, index = torch.randn(5, 37), _indices(37, (5, 9))
    compiled = ind.compile(graph, "cpp")
    (kernel,) = compiled.kernels
    assert "ts_gather_error" in kernel.source and "reduction(|:oob_buf_x_37)" in kernel.source
    torch.testing.assert_close(compiled(x, index)[0], x.gather(1, index))
    index[3, 4] = bad
    with pytest.raises(IndexError) as raised:
        compiled(x, index)
    assert str(raised.value) == f"{message} (gather from 'x' in C++ kernel {kernel.name})"
    with pytest.raises((IndexError, RuntimeError)):  # eager raises too
        x.gather(1, index)
    index[3, 4] = 0  # the same kernel, in range again
    torch.testing.assert_close(compiled(x, index)[0], x.gather(1, index))


def test_cpp_names_the_first_bad_index(ind):
    # After its loops, the failing kernel scans the index expression in its loop order
    # (here row-major) and names the first bad index, as eager does.
    compiled = ind.compile(_gather((5, 37), 1, (5, 9)), "cpp")
    x, index = torch.randn(5, 37), _indices(37, (5, 9))
    index[3, 2], index[1, 7], index[4, 0] = -4, 50, 38
    with pytest.raises(IndexError, match=r"^index 50 is out of bounds"):
        compiled(x, index)


@pytest.mark.parametrize(
    "case", ["long_1d", "row_cache", "online", "columns", "two_sources", "from_a_reduction"]
)
def test_cpp_gather_checks_in_every_loop_shape(ind, case):
    # The flag's reduction clause goes on whichever omp loops evaluate the indirect load:
    # a 1-D `parallel for simd`, a row-cached loop, the chunked online loop, a column
    # reduction's SIMD loop over columns. In range the results match; out of range the
    # call raises.
    b = GraphBuilder(Level.PRIMS)
    if case == "long_1d":
        x = b.input("x", TensorMeta((50000,), torch.float32))
        t = b.input("t", TensorMeta((70000,), torch.int64))
        outputs = [b.call(prim("neg"), b.call(prim("gather"), x, 0, t))]
        shapes, bad = [(50000,), (70000,)], ((65432,), 50000)
    elif case in ("row_cache", "online"):
        width = 300 if case == "row_cache" else 9000
        x = b.input("x", TensorMeta((3, 10007), torch.float32))
        t = b.input("t", TensorMeta((3, width), torch.int64))
        outputs = [ind.softmax_last(b, b.call(prim("gather"), x, 1, t))]
        shapes, bad = [(3, 10007), (3, width)], ((2, width - 1), -5)
    elif case == "columns":
        x = b.input("x", TensorMeta((64, 40), torch.float32))
        t = b.input("t", TensorMeta((64, 32), torch.int64))
        outputs = [b.call(prim("sum"), b.call(prim("gather"), x, 1, t), (0,))]
        shapes, bad = [(64, 40), (64, 32)], ((40, 2), 99)
    elif case == "two_sources":
        x = b.input("x", TensorMeta((6, 10), torch.float32))
        t = b.input("t", TensorMeta((6, 4), torch.int64))
        y = b.input("y", TensorMeta((6, 12), torch.float32))
        picked = [b.call(prim("gather"), source, 1, t) for source in (x, y)]
        outputs = [b.call(prim("add"), *picked)]
        shapes, bad = [(6, 10), (6, 4), (6, 12)], ((1, 1), 11)  # in range for y only
    else:  # the gathered index is computed from a reduction in the same kernel
        x = b.input("x", TensorMeta((6, 10), torch.float32))
        t = b.input("t", TensorMeta((6, 4), torch.int64))
        peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), t, (1,)), (6, 4), (0,))
        outputs = [b.call(prim("gather"), x, 1, b.call(prim("sub"), peak, t))]
        shapes, bad = [(6, 10), (6, 4)], ((2, 1), 12)
    graph = b.build(outputs)
    compiled = ind.compile(graph, "cpp")
    assert compiled.eager_ops == ()
    gathered = shapes[0][-1]
    inputs = [
        _indices(gathered, shape) if len(shapes) > 1 and i == 1 else torch.randn(shape)
        for i, shape in enumerate(shapes)
    ]
    if case == "from_a_reduction":  # amax(t) - t is in [0, 10) when t is
        inputs[1] = _indices(5, (6, 4))
    expected = interpret(graph, *inputs)
    for got, want in zip(compiled(*inputs), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    position, value = bad
    inputs[1][position] = value
    if case == "from_a_reduction":
        inputs[1][2] = torch.tensor([0, 12, 3, 1])  # amax 12: 12 - 0 = 12 is out of range
        # the index reads a reduction of the kernel: no scan after the loops
        expected_message = r"^an index is out of bounds for dimension with size 10 "
    elif case == "two_sources":
        expected_message = (
            r"^index 11 is out of bounds for dimension with size 10 \(gather from 'x'"
        )
    else:
        expected_message = rf"^index {value} is out of bounds for dimension with size {gathered} "
    with pytest.raises(IndexError, match=expected_message):
        compiled(*inputs)


def test_kernels_without_gathers_have_no_checks(ind):
    # The code of a kernel without an indirect load is unchanged: a void function of its
    # buffers, no flag, no error slot, no clause.
    compiled = ind.check(ind.demo_graph(8, 300), "cpp", atol=1e-6, rtol=1e-5)
    for kernel in compiled.kernels:
        assert 'extern "C" void ' in kernel.source
        assert "ts_gather_error" not in kernel.source and "oob_" not in kernel.source
        assert "gather checks" not in kernel.source


def _cross_entropy(rows: int, classes: int):
    """``F.cross_entropy(logits.float(), target)`` as the decomposition spells it: a
    log-softmax, then nll_loss's gather at ``where(t != -100, t, 0)`` and a weighted mean."""
    b = GraphBuilder(Level.PRIMS)
    logits = b.input("logits", TensorMeta((rows, classes), torch.bfloat16))
    target = b.input("target", TensorMeta((rows,), torch.int64))
    x = b.call(prim("convert_element_type"), logits, torch.float32)
    shape, keep = (rows, classes), (0,)
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (1,)), shape, keep)
    shifted = b.call(prim("sub"), x, peak)
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    lse = b.call(prim("broadcast_in_dim"), b.call(prim("log"), total), shape, keep)
    logp = b.call(prim("sub"), shifted, lse)
    kept = b.call(prim("ne"), target, -100)
    zero = b.call(prim("full"), (rows,), 0, torch.int64, CPU)
    safe = b.call(prim("where"), kept, target, zero)
    picked = b.call(prim("gather"), logp, 1, b.call(prim("reshape"), safe, (rows, 1)))
    picked = b.call(prim("reshape"), picked, (rows,))
    one = b.call(prim("full"), (rows,), 1.0, torch.float32, CPU)
    nothing = b.call(prim("full"), (rows,), 0.0, torch.float32, CPU)
    weight = b.call(prim("where"), kept, one, nothing)
    loss = b.call(prim("neg"), b.call(prim("mul"), picked, weight))
    mean = b.call(prim("div"), b.call(prim("sum"), loss, (0,)), b.call(prim("sum"), weight, (0,)))
    return b.build([mean])


def test_cross_entropy_plan_has_no_gather_extern():
    # The gather, pushed down to the logits by gather_as_reduction, is an indirect load of
    # the logits in the final mean kernel; no ATen gather runs between the kernels.
    plan = _plan(_cross_entropy(64, 1000))
    assert not [step for step in plan.steps if isinstance(step, ExternStep)]
    kernels = [step for step in plan.steps if isinstance(step, Kernel)]
    assert len(kernels) == 2
    (load,) = _indirect_loads(kernels[-1])
    assert load.buffer == "buf_logits" and load.stride == 1 and load.size == 1000
    assert not _indirect_loads(kernels[0])


def test_cross_entropy_matches_eager(ind, codegen):
    graph = _cross_entropy(9, 37)
    logits = torch.randn(9, 37).to(torch.bfloat16)
    target = _indices(37, (9,))
    target[4] = -100  # ignored: weight 0, gathered at the safe index 0
    compiled = ind.check(graph, codegen, inputs=[logits, target], atol=1e-6, rtol=1e-5)
    # on Triton the mean is the row kernel's tail (tails.py)
    assert compiled.eager_ops == () and len(compiled.kernels) == (2 if codegen == "cpp" else 1)
    expected = torch.nn.functional.cross_entropy(logits.float(), target)
    torch.testing.assert_close(compiled(logits, target)[0], expected)


@pytest.mark.parametrize("group", [0, 8])
def test_looped_cross_entropy_matches_eager(ind, monkeypatch, group):
    # Rows longer than a tile: the online loop (per row, or per group of 8 with the
    # rescaled sums merged after the loop), the pick, the tail's mean.
    looped = Config(1, 1024, 1, persistent=False, group=group)
    monkeypatch.setattr(triton_backend, "candidate_configs", lambda kernel, *_, **__: [looped])
    graph = _cross_entropy(5, 3001)
    logits = torch.randn(5, 3001).to(torch.bfloat16)
    logits[1, 2500:] += 20.0  # the max grows in a late tile
    logits[2, :] = float("-inf")
    logits[2, 7] = 3.0  # a single finite logit
    target = _indices(3001, (5,))
    target[2] = 7
    target[3] = -100
    compiled = ind.compile(graph, "triton")
    assert ("tl.reshape(" in compiled.kernels[0].source) == bool(group)
    expected = torch.nn.functional.cross_entropy(logits.double(), target)
    torch.testing.assert_close(compiled(logits, target)[0].double(), expected, rtol=1e-5, atol=1e-5)


def test_cross_entropy_with_a_bad_target_raises_on_cpp(ind):
    compiled = ind.compile(_cross_entropy(9, 37), "cpp")
    logits, target = torch.randn(9, 37).to(torch.bfloat16), _indices(37, (9,))
    target[4] = -100  # ignored: gathered at the safe index 0
    target[6] = 37
    with pytest.raises(IndexError, match=r"^index 37 is out of bounds .* size 37 .*'logits'"):
        compiled(logits, target)


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("bad", [32000, -3])
def test_compiled_cross_entropy_with_a_bad_target_raises(requires_grad, bad):
    # End to end through the runtime (capture, decompositions, autograd, C++ kernels):
    # the user sees an error, as in eager, not a NaN loss.
    runtime = pytest.importorskip("torchstrata.runtime")
    compiled = runtime.compile(lambda x, t: torch.nn.functional.cross_entropy(x, t))
    x = torch.randn(16, 32000, requires_grad=requires_grad)
    target = _indices(32000, (16,))
    expected = torch.nn.functional.cross_entropy(x, target)
    torch.testing.assert_close(compiled(x, target), expected)
    target[5] = bad
    with pytest.raises(IndexError):
        torch.nn.functional.cross_entropy(x, target)
    with pytest.raises(IndexError, match=rf"index {bad} is out of bounds"):
        compiled(x, target)


def test_explicit_cross_entropy_pick_is_an_indirect_load():
    # sum(where(iota == t, x, 0)) read by _pick_one_hot at the clamped index: a gather of x
    # that now lowers to an indirect load in the kernel.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 9), torch.float32))
    t = b.input("t", TensorMeta((6,), torch.int64))
    iota = b.call(prim("iota"), 9, 0, 1, torch.int64, CPU)
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, (6, 9), (1,)),
        b.call(prim("broadcast_in_dim"), t, (6, 9), (0,)),
    )
    zero = b.call(prim("full"), (6, 9), 0.0, torch.float32, CPU)
    graph = b.build([b.call(prim("sum"), b.call(prim("where"), hit, x, zero), (1,))])
    plan = _plan(graph)
    assert not [step for step in plan.steps if isinstance(step, ExternStep)]
    (kernel,) = plan.steps
    assert isinstance(kernel, Kernel) and len(_indirect_loads(kernel)) == 1


@pytest.mark.parametrize("case", ["integer", "computed"])
def test_gathers_left_to_aten(ind, codegen, case):
    # Integers have no NaN to mark an out-of-range index: ATen checks and raises, as eager.
    # A computed source is not in memory: the extern call materialises it.
    b = GraphBuilder(Level.PRIMS)
    dtype = torch.int64 if case == "integer" else torch.float32
    x = b.input("x", TensorMeta((5, 8), dtype))
    index = b.input("index", TensorMeta((5, 3), torch.int64))
    source = x if case == "integer" else b.call(prim("exp"), x)
    graph = b.build([b.call(prim("gather"), source, 1, index)])
    x_value = torch.randint(-9, 9, (5, 8)) if case == "integer" else torch.randn(5, 8)
    compiled = ind.check(graph, codegen, inputs=[x_value, _indices(8, (5, 3))])
    assert compiled.eager_ops == ("prims.gather",)


@pytest.mark.triton
def test_triton_offsets_are_int64_when_the_source_is_huge():
    # A source past 2**31 elements (never allocated here: only the code is generated): the
    # row offset is computed in int64 before the gathered position is added.
    from torchstrata.inductor.codegen.triton.generate import generate_triton

    graph = _gather((3, 5), 1, (3, 2), strides=(2**31, 1))
    (kernel,) = _plan(graph).steps
    assert isinstance(kernel, Kernel)
    source = generate_triton(kernel, interpret=True, persistent=True)
    assert "x0.to(tl.int64)" in source
    small = _gather((3, 5), 1, (3, 2))
    (kernel,) = _plan(small).steps
    assert isinstance(kernel, Kernel)
    assert "x0.to(tl.int64)" not in generate_triton(kernel, interpret=True, persistent=True)


def _gpu_kernels(graph) -> list[Kernel]:
    from torchstrata.inductor.codegen.triton.printer import supports

    graph = eliminate_dead_code(one_hot_sums(gather_as_reduction(graph)))
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    return [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]


@pytest.mark.triton
@pytest.mark.parametrize("case", ["cross_entropy", "huge_source", "looped"])
def test_gpu_source_with_indirect_loads_compiles(case, tmp_path):
    # Ahead of time for sm_90 (no GPU needed): the masked load with NaN as its other value,
    # the unsigned range compare and the int64 offsets pass Triton's compiler, not only
    # its interpreter.
    pytest.importorskip("triton")
    from torchstrata.inductor.codegen.triton.ptx import kernel_ptx

    if case == "cross_entropy":
        kernel = _gpu_kernels(_cross_entropy(8192, 32000))[-1]
        configs = [Config(1, 8192, 8, True), Config(1, 1024, 4, False)]
    elif case == "huge_source":
        (kernel,) = _gpu_kernels(_gather((3, 5), 1, (3, 2), strides=(2**31, 1)))
        configs = [Config(4, 1, 1, True)]
    else:
        b = GraphBuilder(Level.PRIMS)
        x = b.input("x", TensorMeta((64, 50000), torch.bfloat16))
        t = b.input("t", TensorMeta((64, 40000), torch.int64))
        picked = b.call(prim("gather"), x, 1, t)
        (kernel,) = _gpu_kernels(b.build([b.call(prim("amax"), picked, (1,))]))
        configs = [Config(1, 4096, 8, False)]
    assert _indirect_loads(kernel)
    for config in configs:
        ptx = kernel_ptx(kernel, config, cache_dir=str(tmp_path))
        assert re.search(r"setp\.\w*lt\.u64", ptx), config  # 0 <= i < size in one compare
        assert re.search(r"@%p\d+ ld\.global", ptx), config  # the masked load
