"""Every prim the C++ and Triton printers spell, on values where a wrong spelling shows.

One kernel per dtype computes each unary and binary prim, comparisons, ``where``, casts to
every dtype and constants of every kind from inputs that hold ties (``round(2.5)`` is 2,
``round(-0.5)`` is -0.0: ``std::round`` gives 3 and -1), zeros of both signs, infinities,
NaN, values past ``exp``'s range and bfloat16/float16 rounding ties. Results are compared
with the reference interpreter element by element: exactly where the prim is exact, within
a few ulps for transcendental functions. These tests are the fast subset that ``nox -s
mutants`` runs against each mutant of the printers (see ``integration_tests/mutation``).
"""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, Node, TensorMeta, interpret, prim

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
INTEGERS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
CPU = torch.device("cpu")

FLOAT_VALUES = (
    *(-0.0, 0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, -3.5, 0.25, -0.75, 1.0, -1.0, 2.0, 3.0),
    # bfloat16 ties (1 + 2**-8 rounds to even 1.0; 1 + 3 * 2**-8 to 1 + 2**-6), float16 ties
    *(1.00390625, 1.01171875, -1.00390625, 1.00048828125, 1.00146484375),
    # exp's range: float32 exp overflows past 88.7, is subnormal below -87.3, 0 below -103.9
    *(88.0, 89.0, -88.0, -95.0, -104.5, 104.0, 120.0, -120.0, 700.0, -750.0),
    *(1e-3, -1e-3, 0.999, -0.999, 7.0, -7.0, 100.0, -100.0, 1e-8, 65504.0, 70000.0, 1e30),
    *(float("inf"), float("-inf"), float("nan")),
)
INT_VALUES = (0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, 127, -128, 5, -5, 8, 64, -64, 13, 9)

#: Unary prims exact in every correct backend (rounding to integers, sign, predicates).
EXACT_UNARY = ("floor", "ceil", "trunc", "round", "neg", "abs", "sign", "isnan", "isinf")
#: Unary prims computed to within a few ulps.
MATH_UNARY = (
    *("exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal"),
    *("sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh", "erf"),
)
EXACT_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "remainder", "fmod")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
MATH_BINARY = ("atan2", "pow")
INT_BINARY = ("add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or")
INT_BINARY += ("bitwise_xor",)
#: Scalar operands: literals of every kind each backend spells differently.
FLOAT_SCALARS = (0.1, -0.0, float("inf"), float("-inf"), float("nan"), 3, 1e30)
INT_SCALARS = (3, -7, 0, 100)

BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.triton)]


def _values(meta: TensorMeta, shift: int) -> torch.Tensor:
    pool = FLOAT_VALUES if meta.dtype.is_floating_point else INT_VALUES
    n = meta.numel
    rolled = [pool[(i * 7 + shift) % len(pool)] for i in range(n)] if shift else list(pool)[:n]
    rolled += [pool[i % len(pool)] for i in range(len(rolled), n)]
    wide = torch.tensor(rolled, dtype=torch.float64)
    if meta.dtype is torch.bool:
        return (wide.remainder(3) == 0).reshape(meta.shape)
    if not meta.dtype.is_floating_point:
        info = torch.iinfo(meta.dtype)
        wide = wide.clamp(info.min, info.max)
    return wide.to(meta.dtype).reshape(meta.shape)


def _float_graph(dtype: torch.dtype) -> tuple[object, dict[str, bool]]:
    """The float kernel: ``exact[name]`` says whether output ``name`` must match exactly."""
    n = len(FLOAT_VALUES)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((n,), dtype))
    y = b.input("y", TensorMeta((n,), dtype))
    outputs: list[Node] = []
    exact: list[bool] = []

    def out(node: Node, is_exact: bool) -> None:
        outputs.append(node)
        exact.append(is_exact)

    for name in EXACT_UNARY:
        out(b.call(prim(name), x), True)
    for name in MATH_UNARY:
        out(b.call(prim(name), x), False)
    for name in (*EXACT_BINARY, *COMPARISONS):
        # div and remainder are correctly rounded everywhere; fmod exact by definition
        out(b.call(prim(name), x, y), True)
    for name in MATH_BINARY:
        out(b.call(prim(name), x, y), False)
    for name in ("le", "ge", "eq", "ne"):  # against values the inputs hold: ties
        out(b.call(prim(name), x, 2.5), True)
    for scalar in FLOAT_SCALARS:
        # a scalar added to a 16-bit value is rounded to its dtype first, as eager's add
        out(b.call(prim("add"), x, scalar), True)
        out(b.call(prim("sub"), x, scalar), True)
        # eager's own mul by a scalar rounds it to a 16-bit dtype or not, by tensor size:
        # within one ulp (1e30, infinite in float16, is left out)
        if scalar != 1e30 or dtype is not F16:
            out(b.call(prim("mul"), x, scalar), dtype not in (BF16, F16))
        out(b.call(prim("maximum"), x, scalar), True)
        out(b.call(prim("lt"), x, scalar), True)
    out(b.call(prim("where"), b.call(prim("lt"), x, y), x, y), True)
    out(b.call(prim("where"), b.call(prim("isnan"), x), 0.5, x), True)
    for target in (F32, F64, BF16, F16, torch.int32, torch.int64, torch.bool, torch.int8):
        if target == dtype:
            continue
        source = x
        if not target.is_floating_point and target is not torch.bool:
            # float -> int casts of finite, in-range values only (others are undefined)
            source = b.call(prim("where"), b.call(prim("isnan"), x), 0.0, x)
            source = b.call(prim("minimum"), b.call(prim("maximum"), source, -100.0), 100.0)
        out(b.call(prim("convert_element_type"), source, target), True)
    return b.build(outputs), exact


def _int_graph(dtype: torch.dtype) -> tuple[object, list[bool]]:
    n = len(INT_VALUES)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((n,), dtype))
    y = b.input("y", TensorMeta((n,), dtype))
    outputs: list[Node] = [b.call(prim(name), x, y) for name in (*INT_BINARY, *COMPARISONS)]
    outputs += [b.call(prim(name), x) for name in ("neg", "abs", "sign", "bitwise_not")]
    nonzero = b.call(prim("where"), b.call(prim("eq"), y, 0), 3, y)
    outputs += [b.call(prim(name), x, nonzero) for name in ("div", "remainder", "fmod")]
    for scalar in INT_SCALARS:
        outputs.append(b.call(prim("add"), x, scalar))
        outputs.append(b.call(prim("maximum"), x, scalar))
        outputs.append(b.call(prim("ge"), x, scalar))
    outputs.append(b.call(prim("where"), b.call(prim("lt"), x, y), x, y))
    for target in (F32, F64, BF16, F16, torch.int64, torch.int32, torch.bool):
        if target != dtype:
            outputs.append(b.call(prim("convert_element_type"), x, target))
    return b.build(outputs), [True] * len(outputs)


def _bool_graph() -> tuple[object, list[bool]]:
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8,), torch.bool))
    y = b.input("y", TensorMeta((8,), torch.bool))
    outputs = [b.call(prim(name), x, y) for name in ("bitwise_and", "bitwise_or", "bitwise_xor")]
    outputs += [b.call(prim(name), x, y) for name in ("eq", "ne", "lt", "ge")]
    outputs.append(b.call(prim("bitwise_not"), x))
    outputs.append(b.call(prim("where"), x, y, True))
    for target in (F32, BF16, torch.int64, torch.int8):
        outputs.append(b.call(prim("convert_element_type"), x, target))
    return b.build(outputs), [True] * len(outputs)


def _ulps(dtype: torch.dtype) -> float:
    return {F32: 16, F64: 16, BF16: 1, F16: 1}[dtype] * torch.finfo(dtype).eps


def _compare(graph, exact: list[bool], compiled, inputs: list[torch.Tensor]) -> None:
    expected = interpret(graph, *inputs)
    actual = compiled(*inputs)
    for position, (got, want, is_exact) in enumerate(zip(actual, expected, exact, strict=True)):
        node = graph.outputs[position]
        what = f"output {position} %{node.name} = {node.op.name}"
        assert got.dtype == want.dtype and got.shape == want.shape, what
        if is_exact or not want.is_floating_point():
            same = (got == want) | (got.isnan() & want.isnan())
            signs = got.signbit() == want.signbit() if want.is_floating_point() else same
            if node.op in (prim("maximum"), prim("minimum")):
                # max(-0.0, 0.0) has no one answer, eager's own varies (test_fuzz_kernels)
                signs = signs | (want == 0)
            bad = ~(same & (signs | got.isnan()))
        else:
            precision = max((n.tensor_meta.dtype for n in graph.inputs), key=_ulps)
            tolerance = _ulps(precision) * want.double().abs() + 1e-30
            close = (got.double() - want.double()).abs() <= tolerance
            bad = ~(close | (got == want) | (got.isnan() & want.isnan()))
            bad &= ~(want.double().abs() < 1e-6)  # sin(pi) and friends: absolute
            bad |= (want.double().abs() < 1e-6) & ((got.double() - want.double()).abs() > 1e-6)
        if bad.any():
            at = int(torch.nonzero(bad)[0])
            raise AssertionError(
                f"{what}: {int(bad.sum())} elements differ; at {at} (inputs "
                f"{[t[at].item() for t in inputs]}): compiled {got[at].item()!r}, "
                f"interpreter {want[at].item()!r}"
            )


def _check(ind, codegen: str, graph, exact: list[bool]) -> None:
    compiled = ind.compile(graph, codegen)
    for shift in (0, 3):
        inputs = [_values(meta, shift + k) for k, meta in enumerate(graph.input_metas)]
        _compare(graph, exact, compiled, inputs)


def _reduction_graph(dtype: torch.dtype) -> tuple[object, list[bool]]:
    """Row reductions (9 wide: a masked tile in Triton) of edge values, NaN rows included,
    and ``prims.rand`` (its hash must match bit for bit)."""
    pool = FLOAT_VALUES if dtype.is_floating_point else INT_VALUES
    rows = len(pool) // 9
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, 9), dtype))
    outputs = [b.call(prim(name), x, (1,)) for name in ("amax", "amin")]
    exact = [True, True]
    if dtype.is_floating_point:
        outputs += [b.call(prim(name), x, (1,)) for name in ("sum", "prod")]
        exact += [False, False]
    noise = b.call(prim("rand"), [rows, 9], 12345, 7, F32, CPU)
    outputs.append(noise)
    exact.append(True)
    return b.build(outputs), exact


@pytest.mark.parametrize("dtype", [F32, BF16, torch.int32])
@pytest.mark.parametrize("codegen", BACKENDS)
def test_reductions_and_rand_on_edge_values(ind, codegen, dtype):
    _check(ind, codegen, *_reduction_graph(dtype))


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16])
@pytest.mark.parametrize("codegen", BACKENDS)
def test_float_prims_on_edge_values(ind, codegen, dtype):
    _check(ind, codegen, *_float_graph(dtype))


def _interpreter_inverts_unsigned() -> bool:
    """Triton's interpreter before 3.9 builds ``~x``'s all-ones value of an unsigned type
    as ``np.full(1, -1, uint8)``, which NumPy 2 refuses (OverflowError): torch 2.14.1
    pins Triton 3.8. Compiled GPU code is not affected."""
    try:
        import triton
    except ImportError:
        return True
    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    return (major, minor) >= (3, 9)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
@pytest.mark.parametrize("codegen", BACKENDS)
def test_integer_prims_on_edge_values(ind, codegen, dtype, request):
    if codegen == "triton" and dtype == torch.uint8 and not _interpreter_inverts_unsigned():
        from triton.runtime.errors import InterpreterError  # it wraps the OverflowError

        request.applymarker(
            pytest.mark.xfail(
                raises=(OverflowError, InterpreterError),
                strict=True,
                reason="Triton < 3.9 interpreter",
            )
        )
    _check(ind, codegen, *_int_graph(dtype))


@pytest.mark.parametrize("codegen", BACKENDS)
def test_bool_prims(ind, codegen):
    _check(ind, codegen, *_bool_graph())


@pytest.mark.parametrize("codegen", BACKENDS)
def test_round_half_to_even(ind, codegen):
    """``round([0.5, 2.5, -0.5])`` is ``[0, 2, -0]`` in eager; ``std::round`` gives 1, 3, -1."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4,), F32))
    compiled = ind.compile(b.build([b.call(prim("round"), x)]), codegen)
    (got,) = compiled(torch.tensor([0.5, 2.5, -0.5, 1.5]))
    want = torch.round(torch.tensor([0.5, 2.5, -0.5, 1.5]))
    assert got.tolist() == want.tolist() == [0.0, 2.0, -0.0, 2.0]
    assert got.signbit().tolist() == want.signbit().tolist()
