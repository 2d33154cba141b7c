"""Integer divisions in C++ kernels: a zero divisor raises eager's error, the smallest
value by -1 wraps without a trap (``cpp_division.py``)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, interpret, prim

INTEGERS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
SIGNED = [torch.int8, torch.int16, torch.int32, torch.int64]
DIVISIONS = ["div", "remainder", "fmod"]  # prims.div of integers truncates


def _division(name, dtype, shape=(6, 7), divisor_shape=None):
    """``name(a, b)``; a ``divisor_shape`` of fewer dims is broadcast along the last."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("a", TensorMeta(shape, dtype))
    y = b.input("b", TensorMeta(divisor_shape or shape, dtype))
    if divisor_shape is not None:
        y = b.call(prim("broadcast_in_dim"), y, shape, tuple(range(len(divisor_shape))))
    return b.build([b.call(prim(name), x, y)])


def _dividends(dtype, shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, shape, generator=generator).to(dtype)


def _divisors(dtype, shape, seed=1):
    """Nonzero divisors of both signs (positive for uint8), -1 among them."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(1, 8, shape, generator=generator)
    if dtype != torch.uint8:
        signs = torch.randint(0, 2, shape, generator=generator) * 2 - 1
        values = values * signs
    return values.to(dtype)


def _raises_like_eager(compiled, graph, inputs):
    """The compiled graph raises eager's error, as the reference interpreter (ATen) does."""
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        interpret(graph, *inputs)
    with pytest.raises(RuntimeError) as raised:
        compiled(*inputs)
    assert type(raised.value) is RuntimeError and str(raised.value) == "ZeroDivisionError"


def _same(compiled, graph, inputs):
    for got, want in zip(compiled(*inputs), interpret(graph, *inputs), strict=True):
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("name", DIVISIONS)
def test_a_zero_divisor_raises_and_others_give_eagers_numbers(ind, name, dtype):
    graph = _division(name, dtype)
    compiled = ind.compile(graph, "cpp")
    assert compiled.eager_ops == ()
    (kernel,) = compiled.kernels
    assert "reduction(|:zero_divisor)" in kernel.source
    a, b = _dividends(dtype, (6, 7)), _divisors(dtype, (6, 7))
    _same(compiled, graph, (a, b))
    b[4, 2] = 0
    _raises_like_eager(compiled, graph, (a, b))
    b[4, 2] = 3  # the same kernel, every divisor nonzero again
    _same(compiled, graph, (a, b))


@pytest.mark.parametrize("name", DIVISIONS)
def test_floor_and_trunc_differ_on_negative_operands(ind, name):
    # -7 / 2, 7 / -2, -7 / -2: C++'s / and % truncate; remainder takes the divisor's sign.
    graph = _division(name, torch.int32, (6,))
    compiled = ind.compile(graph, "cpp")
    a = torch.tensor([-7, 7, -7, 7, 6, -6], dtype=torch.int32)
    b = torch.tensor([2, -2, -2, 2, -3, 4], dtype=torch.int32)
    eager = {
        "div": torch.div(a, b, rounding_mode="trunc"),
        "remainder": torch.remainder(a, b),
        "fmod": torch.fmod(a, b),
    }
    assert torch.equal(compiled(a, b)[0], eager[name])


@pytest.mark.parametrize("name", DIVISIONS)
def test_a_broadcast_divisor_is_checked_once_per_row(ind, name):
    graph = _division(name, torch.int64, (6, 7), divisor_shape=(6, 1))
    compiled = ind.compile(graph, "cpp")
    a, b = _dividends(torch.int64, (6, 7)), _divisors(torch.int64, (6, 1))
    _same(compiled, graph, (a, b))
    b[5, 0] = 0
    _raises_like_eager(compiled, graph, (a, b))


def _loop_shape_graph(case):
    """A graph whose C++ kernel divides in the loop shape ``case``; its inputs' shapes."""
    b = GraphBuilder(Level.PRIMS)
    if case == "long_1d":  # one `parallel for simd`
        shapes = [(70000,), (70000,)]
        x, y = (b.input(n, TensorMeta(s, torch.int32)) for n, s in zip("ab", shapes))
        outputs = [b.call(prim("div"), x, y)]
    elif case == "row_sums":  # a reduction's SIMD loop over each row
        shapes = [(8, 300), (8, 300)]
        x, y = (b.input(n, TensorMeta(s, torch.int64)) for n, s in zip("ab", shapes))
        outputs = [b.call(prim("sum"), b.call(prim("remainder"), x, y), (1,))]
    elif case == "parallel_rows":  # `parallel for` over rows, each row's sum
        shapes = [(64, 1024), (64, 1024)]
        x, y = (b.input(n, TensorMeta(s, torch.int32)) for n, s in zip("ab", shapes))
        outputs = [b.call(prim("sum"), b.call(prim("fmod"), x, y), (1,))]
    elif case == "columns":  # a column reduction's SIMD loop over columns
        shapes = [(64, 40), (64, 40)]
        x, y = (b.input(n, TensorMeta(s, torch.int32)) for n, s in zip("ab", shapes))
        outputs = [b.call(prim("sum"), b.call(prim("div"), x, y), (0,))]
    else:  # the divisor is a reduction of the same kernel, used after its loop
        shapes = [(6, 10), (6, 10)]
        x, y = (b.input(n, TensorMeta(s, torch.int32)) for n, s in zip("ab", shapes))
        peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), y, (1,)), (6, 10), (0,))
        outputs = [b.call(prim("div"), x, peak)]
    return b.build(outputs), shapes


@pytest.mark.parametrize("case", ["long_1d", "row_sums", "parallel_rows", "columns", "amax"])
def test_checks_in_every_loop_shape(ind, case):
    # The flag's reduction clause goes on whichever omp loops divide: results match in
    # every shape, and one zero anywhere raises.
    graph, shapes = _loop_shape_graph(case)
    compiled = ind.compile(graph, "cpp")
    assert compiled.eager_ops == ()
    dtype = graph.inputs[0].tensor_meta.dtype
    a = _dividends(dtype, shapes[0])
    b = _divisors(dtype, shapes[1]).abs() if case == "amax" else _divisors(dtype, shapes[1])
    _same(compiled, graph, (a, b))
    if case == "amax":
        b[3] = -b[3].abs()  # that row's largest divisor is nonpositive ...
        b[3, 7] = 0  # ... and then zero
    else:
        b.view(-1)[b.numel() - 5] = 0
    _raises_like_eager(compiled, graph, (a, b))


@pytest.mark.parametrize("dtype", SIGNED)
@pytest.mark.parametrize("name", DIVISIONS)
def test_the_smallest_value_by_minus_one_wraps_without_a_trap(ind, name, dtype):
    # x86's idiv traps on INT_MIN / -1 (SIGFPE). Eager's floor division wraps to
    # INT_MIN, its remainders are 0 (its trunc division of int32/int64 crashes).
    smallest = torch.iinfo(dtype).min
    graph = _division(name, dtype, (4,))
    compiled = ind.compile(graph, "cpp")
    a = torch.tensor([smallest, smallest, 7, -7], dtype=dtype)
    b = torch.tensor([-1, -1, -1, -1], dtype=dtype)
    expected = {
        "div": torch.div(a, b, rounding_mode="floor"),  # exact quotients: floor is trunc
        "remainder": torch.remainder(a, b),
        "fmod": torch.fmod(a, b),
    }[name]
    (got,) = compiled(a, b)
    assert torch.equal(got, expected)
    assert torch.equal(got, interpret(graph, a, b)[0])


@pytest.mark.parametrize("divisor", [3, -1])
def test_constant_divisors(ind, divisor):
    # A nonzero constant divisor needs no check: a `void` kernel without a flag. Only -1
    # needs the wrapping helper (the prelude's ts_div_int would trap on INT_MIN).
    b = GraphBuilder(Level.PRIMS)
    x = b.input("a", TensorMeta((6, 7), torch.int32))
    graph = b.build([b.call(prim("div"), x, divisor), b.call(prim("remainder"), x, divisor)])
    compiled = ind.compile(graph, "cpp")
    (kernel,) = compiled.kernels
    assert 'extern "C" void ' in kernel.source and "zero_divisor" not in kernel.source
    assert ("ts_div_checked" in kernel.source) == (divisor == -1)
    a = _dividends(torch.int32, (6, 7))
    a[0, 0] = torch.iinfo(torch.int32).min
    _same(compiled, graph, (a,))


def test_kernels_without_integer_divisions_have_no_division_checks(ind):
    # A kernel that divides floats only is generated as before: a void function, no flag,
    # no helpers.
    compiled = ind.check(ind.demo_graph(8, 300), "cpp", atol=1e-6, rtol=1e-5)
    graph = _division("div", torch.float32)
    compiled_float = ind.check(graph, "cpp")
    for kernel in (*compiled.kernels, *compiled_float.kernels):
        assert 'extern "C" void ' in kernel.source
        assert "zero_divisor" not in kernel.source and "ts_safe_divisor" not in kernel.source
        assert "division check" not in kernel.source


def test_a_gather_and_a_division_in_one_kernel_raise_their_own_errors(ind):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 37), torch.float32))
    t = b.input("t", TensorMeta((5, 9), torch.int64))
    n = b.input("n", TensorMeta((5, 9), torch.int64))
    d = b.input("d", TensorMeta((5, 9), torch.int64))
    picked = b.call(prim("gather"), x, 1, t)
    quotient = b.call(prim("convert_element_type"), b.call(prim("div"), n, d), torch.float32)
    graph = b.build([b.call(prim("add"), picked, quotient)])
    compiled = ind.compile(graph, "cpp")
    (kernel,) = compiled.kernels
    assert "reduction(|:zero_divisor, oob_buf_x_37)" in kernel.source
    inputs = [
        torch.randn(5, 37),
        torch.randint(0, 37, (5, 9)),
        _dividends(torch.int64, (5, 9)),
        _divisors(torch.int64, (5, 9)),
    ]
    torch.testing.assert_close(compiled(*inputs)[0], interpret(graph, *inputs)[0])
    inputs[3][1, 1] = 0
    _raises_like_eager(compiled, graph, inputs)
    # Both fail: the kernel reports the division (see the next test); eager reports the
    # op it runs first, in this graph the gather.
    inputs[1][2, 2] = 37
    with pytest.raises(RuntimeError, match=r"^ZeroDivisionError$"):
        compiled(*inputs)
    inputs[3][1, 1] = 1
    with pytest.raises(IndexError, match=r"^index 37 is out of bounds"):
        compiled(*inputs)


def test_an_index_computed_by_a_division_by_zero_reports_the_division(ind):
    # Eager divides first and raises there; the kernel's index, computed from a quotient
    # by a replaced divisor, may be out of range too, and the division check comes first.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 37), torch.float32))
    n = b.input("n", TensorMeta((5, 9), torch.int64))
    d = b.input("d", TensorMeta((5, 9), torch.int64))
    graph = b.build([b.call(prim("gather"), x, 1, b.call(prim("div"), n, d))])
    compiled = ind.compile(graph, "cpp")
    assert compiled.eager_ops == ()
    x_values = torch.randn(5, 37)
    numerators = torch.randint(0, 37, (5, 9)) * 3
    denominators = torch.full((5, 9), 3)
    torch.testing.assert_close(
        compiled(x_values, numerators, denominators)[0],
        x_values.gather(1, numerators // denominators),
    )
    numerators[0, 0], denominators[0, 0] = 100, 0  # the quotient of the replaced divisor, 100
    _raises_like_eager(compiled, graph, (x_values, numerators, denominators))


def _eager(name, a, b):
    """Eager's ``name`` of integers (``div`` truncates)."""
    if name == "div":
        return torch.div(a, b, rounding_mode="trunc")
    return torch.remainder(a, b) if name == "remainder" else torch.fmod(a, b)


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("name", DIVISIONS)
def test_every_pair_of_extreme_and_small_values(ind, name, dtype):
    # The helpers' masks and wrapping negation against eager: every pair of int8 and
    # uint8 values; for wider types every pair of the extremes and values around 0.
    info = torch.iinfo(dtype)
    if dtype in (torch.int8, torch.uint8):
        values = torch.arange(info.min, info.max + 1)
    else:
        edges = [info.min, info.min + 1, info.min + 2, info.max - 1, info.max]
        values = torch.tensor([*edges, *range(-9, 10), 2**7, -(2**7), 255, -256])
        values = values[(values >= info.min) & (values <= info.max)]
    a, b = (grid.flatten().to(dtype) for grid in torch.meshgrid(values, values, indexing="ij"))
    a, b = a[b != 0], b[b != 0]
    graph = _division(name, dtype, tuple(a.shape))
    (got,) = ind.compile(graph, "cpp")(a, b)
    # eager's trunc division of int32/int64 dies of SIGFPE there (its remainders are 0)
    trap = (a == info.min) & (b == -1) & (info.bits >= 32) & (name == "div")
    assert torch.equal(got[~trap], _eager(name, a[~trap], b[~trap]))
    assert torch.equal(got[trap], torch.div(a[trap], b[trap], rounding_mode="floor"))
