"""Cross-entropy's row statistics on the C++ backend: a long row's max in lanes, the
picked logit read once per row (decision 0335), against the reference interpreter and
eager ``F.cross_entropy``."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

CPU = torch.device("cpu")


def _row_statistics(rows: int, classes: int):
    """max, sum(exp(x - max)) and the logit at ``where(t != -100, t, 0)`` of each row, as
    the GPT step's forward kernel computes them (the pick as a where-sum over an iota).
    ``x`` is a window of the input (from column 1), which no gather can read: the where-sum
    stays, as over the GPT's matmul result."""
    b = GraphBuilder(Level.PRIMS)
    full = b.input("x", TensorMeta((rows, classes + 1), torch.float32))
    x = b.call(prim("slice"), full, (0, 1), (rows, classes + 1), (1, 1))
    t = b.input("t", TensorMeta((rows,), torch.int64))
    shape, keep = (rows, classes), (0,)
    peak = b.call(prim("amax"), x, (1,))
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), peak, shape, keep))
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    zero = b.call(prim("full"), (rows,), 0, torch.int64, CPU)
    safe = b.call(prim("where"), b.call(prim("ne"), t, -100), t, zero)
    iota = b.call(prim("iota"), classes, 0, 1, torch.int64, CPU)
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, shape, (1,)),
        b.call(prim("broadcast_in_dim"), safe, shape, keep),
    )
    nothing = b.call(prim("full"), shape, 0.0, torch.float32, CPU)
    picked = b.call(prim("sum"), b.call(prim("where"), hit, x, nothing), (1,))
    return b.build([peak, total, picked])


@pytest.mark.parametrize(("rows", "classes"), [(1, 8192), (7, 8192), (3, 1000), (2, 32001)])
def test_row_statistics_match_the_interpreter(ind, rows, classes):
    generator = torch.Generator().manual_seed(rows * classes)
    x = torch.randn(rows, classes, generator=generator) * 4
    t = torch.randint(0, classes, (rows,), generator=generator)
    t[0] = classes - 1
    if rows > 1:
        t[1] = -100  # ignored: the pick at 0
        x[1, classes // 2] = float("nan")  # max NaN, the pick (at 0) not
    if rows > 2:
        x[2, t[2]] = -0.0  # the pick's sum: +0.0
        x[2, 5] = float("inf")
    if rows > 3:
        x[3, :] = float("-inf")
    if rows > 4:
        x[4, t[4]] = float("nan")  # the pick NaN
    padded = torch.cat([torch.full((rows, 1), 1e30), x], 1)  # column 0: not in the row
    compiled = ind.check(_row_statistics(rows, classes), "cpp", inputs=[padded, t])
    source = "".join(kernel.source for kernel in compiled.kernels)
    assert "pick_" in source  # read once per row, not compared at every element
    peak, _, picked = compiled(padded, t)
    torch.testing.assert_close(peak, x.amax(1), equal_nan=True, rtol=0, atol=0)
    expected = x.gather(1, torch.where(t != -100, t, 0)[:, None])[:, 0] + 0.0
    torch.testing.assert_close(picked, expected, equal_nan=True, rtol=0, atol=0)
    if rows > 2:
        assert torch.copysign(torch.ones(()), picked[2]).item() == 1.0


@pytest.mark.parametrize(
    ("classes", "options"),
    [(8192, {}), (1000, {"ignore_index": 3, "label_smoothing": 0.1}), (32001, {})],
)
def test_cross_entropy_of_a_projection_matches_eager(classes, options):
    # The logits computed in the graph (as the GPT's head): the pick is a where-sum
    # in the statistics kernel; forward and gradients against eager.
    tsr = pytest.importorskip("torchstrata.runtime")  # end to end, where the runtime is installed

    def loss(h, w, t):
        return torch.nn.functional.cross_entropy(h @ w, t, **options)

    generator = torch.Generator().manual_seed(classes)
    h = torch.randn(5, 16, generator=generator, requires_grad=True)
    w = torch.randn(16, classes, generator=generator, requires_grad=True)
    t = torch.randint(0, classes, (5,), generator=generator)
    t[1] = options.get("ignore_index", -100)
    compiled = tsr.compile(loss, options={"codegen": "cpp", "graph_cache": False})
    got = compiled(h, w, t)
    got_grads = torch.autograd.grad(got, (h, w))
    want = loss(h, w, t)
    want_grads = torch.autograd.grad(want, (h, w))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("classes", [8192, 1001])
def test_a_one_hot_gradient_stores_its_target_after_the_loop(ind, classes):
    # cross-entropy's gradient: where(iota == t, g, 0) - exp(x) * s per element; the loop
    # stores the second term everywhere, the target's element is stored after it (t out
    # of range on both sides, -100: no element), NaN and -0.0 as eager.
    rows = 6
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, classes), torch.float32))
    t = b.input("t", TensorMeta((rows,), torch.int64))
    g = b.input("g", TensorMeta((rows,), torch.float32))
    shape, keep = (rows, classes), (0,)
    iota = b.call(prim("iota"), classes, 0, 1, torch.int64, CPU)
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, shape, (1,)),
        b.call(prim("broadcast_in_dim"), t, shape, keep),
    )
    nothing = b.call(prim("full"), shape, 0.0, torch.float32, CPU)
    one_hot = b.call(prim("where"), hit, b.call(prim("broadcast_in_dim"), g, shape, keep), nothing)
    scaled = b.call(prim("mul"), b.call(prim("exp"), x), 0.5)
    graph = b.build([b.call(prim("sub"), one_hot, scaled)])
    x_value = torch.randn(rows, classes)
    x_value[1, 3] = float("nan")
    x_value[2, 7] = float("-inf")  # exp 0: the target's element -0.0 - 0 ... as eager
    t_value = torch.tensor([0, 3, 7, -1, classes, classes - 1])
    g_value = torch.tensor([1.5, 2.0, -0.0, 4.0, 5.0, float("inf")])
    compiled = ind.check(graph, "cpp", inputs=[x_value, t_value, g_value])
    assert "if (static_cast<uint64_t>(" in compiled.kernels[0].source
    got = compiled(x_value, t_value, g_value)[0]
    hot = torch.arange(classes)[None, :] == t_value[:, None]
    want = torch.where(hot, g_value[:, None], 0.0) - x_value.exp() * 0.5
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.signbit(got[2, 7]), torch.signbit(want[2, 7]))
