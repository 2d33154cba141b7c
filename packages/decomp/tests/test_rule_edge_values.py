"""Decomposition rules on inputs that reach every branch: clamp bounds, thresholds, ties.

``random_inputs`` draws standard normal values: ``x + 3 > 6`` (hardsigmoid's upper clamp),
``beta * x > 20`` (softplus) or ``x == 2.5`` (round's tie) almost never happen, so a rule
that drops a branch passes every random test. Here every float input is filled with
:data:`EDGES` (then a wide random spread), integer inputs with small signed values, and the
decomposition is compared with eager element by element (the ``dh`` fixture's check).
These tests are the fast subset that ``nox -s mutants`` runs against each mutant of the
rules (see ``integration_tests/mutation``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

F32, F64, BF16, F16, I64, I32, BOOL = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.bool,
)
FLOATS = (F32, F64, BF16, F16)
#: Values at or beside every threshold the rules test: zeros of both signs, halves (round's
#: ties), the clamps of hardsigmoid/hardswish (-3, 3) and relu6 (6), large values past
#: softplus' threshold, values near 1 (logit), infinities and NaN.
EDGES = (
    -0.0,
    0.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    3.0,
    -3.0,
    3.5,
    -3.5,
    6.0,
    -6.0,
    7.0,
    25.0,
    -25.0,
    1e-3,
    -1e-3,
    0.999,
    0.25,
    -1.0,
    1.0,
    2.0,
    -7.5,
    100.0,
    -100.0,
)
SPECIALS = (float("inf"), float("-inf"), float("nan"))
INTEGERS = (-7, -3, -2, -1, 0, 1, 2, 3, 5, 8, -8, 4)


def _fill(tensor: torch.Tensor, shift: int, specials: bool) -> None:
    """Overwrite ``tensor`` with the edge values (rotated by ``shift``), then a wide spread."""
    n = tensor.numel()
    if not n or tensor.dtype is BOOL:
        return
    generator = torch.Generator().manual_seed(shift)
    if tensor.is_floating_point():
        pool = list(EDGES) + (list(SPECIALS) if specials else [])
        spread = (8 * torch.randn(n, generator=generator, dtype=F64)).tolist()
    else:
        pool = list(INTEGERS)
        spread = torch.randint(-9, 10, (n,), generator=generator).tolist()
    pool = pool[shift % len(pool) :] + pool[: shift % len(pool)]
    values = (pool + spread)[:n]
    tensor.copy_(torch.tensor(values, dtype=F64).reshape(tensor.shape).to(tensor.dtype))


def edges(specials: bool = False, nonzero_from: int | None = None) -> Callable[[list], None]:
    """A ``prepare`` for ``dh.check``: every input filled by :func:`_fill` (inputs from
    ``nonzero_from`` on with zeros replaced by one: integer divisors)."""

    def prepare(inputs: list[torch.Tensor]) -> None:
        for position, tensor in enumerate(inputs):
            _fill(tensor, 3 * position + 1, specials)
            if nonzero_from is not None and position >= nonzero_from:
                tensor.masked_fill_(tensor == 0, 1)

    return prepare


# (name, builder(dh, dtype) -> graph, dtypes, prepare)
Case = tuple[str, Callable[[Any, torch.dtype], Any], tuple[torch.dtype, ...], Callable]
_CASES: list[Case] = []


def case(name: str, dtypes: tuple[torch.dtype, ...] = FLOATS, prepare: Callable | None = None):
    """Register a builder of one ATen graph as a test case for each of ``dtypes``."""

    def register(build: Callable[[Any, torch.dtype], Any]) -> Callable[[Any, torch.dtype], Any]:
        _CASES.append((name, build, dtypes, prepare or edges(specials=True)))
        return build

    return register


def _unary(op: str, *args: Any, **kwargs: Any) -> Callable[[Any, torch.dtype], Any]:
    return lambda dh, dt: dh.one_op(op, dh.transposed(4, 7, dt), *args, **kwargs)


def _binary(op: str, *args: Any, **kwargs: Any) -> Callable[[Any, torch.dtype], Any]:
    return lambda dh, dt: dh.one_op(op, dh.T(4, 7, dtype=dt), dh.T(7, dtype=dt), *args, **kwargs)


for _op, _args in [
    ("hardswish.default", ()),
    ("hardsigmoid.default", ()),
    ("mish.default", ()),
    ("softplus.default", ()),
    ("softplus.default", (2, 1)),
    ("softplus.default", (0.5, 3)),
    ("elu.default", (0.7, 1.3, 0.6)),
    ("elu.default", ()),
    ("leaky_relu.default", (0.2,)),
    ("leaky_relu.default", ()),
    ("hardtanh.default", (-0.5, 2.5)),
    ("hardtanh.default", ()),
    ("threshold.default", (0.5, -2.0)),
    ("logit.default", (1e-3,)),
    ("logit.default", ()),
    ("sigmoid.default", ()),
    ("silu.default", ()),
    ("relu.default", ()),
    ("gelu.default", ()),
    ("abs.default", ()),
    ("neg.default", ()),
    ("sign.default", ()),
    ("square.default", ()),
    ("isnan.default", ()),
    ("isinf.default", ()),
    ("logical_not.default", ()),
    ("clamp.default", (-2.5, 3.0)),
    ("clamp.default", (None, 0.5)),
    ("clamp.default", (-0.5,)),
    ("clamp_min.default", (0.5,)),
    ("clamp_max.default", (-0.5,)),
    ("pow.Tensor_Scalar", (2,)),
    ("pow.Tensor_Scalar", (3,)),
    ("pow.Tensor_Scalar", (0.5,)),
    ("pow.Tensor_Scalar", (-0.5,)),
    ("pow.Tensor_Scalar", (-1,)),
    ("pow.Tensor_Scalar", (0,)),
    ("add.Scalar", (2.5,)),
    ("sub.Scalar", (2.5,)),
    ("rsub.Scalar", (2.5,)),
    ("mul.Scalar", (-1.5,)),
    ("div.Scalar", (-2.5,)),
    ("remainder.Scalar", (-2.5,)),
    ("fmod.Scalar", (-2.5,)),
]:
    case(f"{_op}{_args}")(_unary(_op, *_args))

case("gelu.tanh")(
    lambda dh, dt: dh.one_op("gelu.default", dh.transposed(4, 7, dt), approximate="tanh")
)
case("div_floor")(
    lambda dh, dt: dh.one_op(
        "div.Scalar_mode", dh.transposed(4, 7, dt), -2.5, rounding_mode="floor"
    )
)
case("div_trunc")(
    lambda dh, dt: dh.one_op("div.Scalar_mode", dh.transposed(4, 7, dt), 2.5, rounding_mode="trunc")
)

for _op in (
    "add.Tensor",
    "sub.Tensor",
    "rsub.Tensor",
    "mul.Tensor",
    "div.Tensor",
    "maximum.default",
    "minimum.default",
    "atan2.default",
    "pow.Tensor_Tensor",
    "remainder.Tensor",
    "fmod.Tensor",
    "logaddexp.default",
    "logical_and.default",
    "logical_or.default",
    "logical_xor.default",
    "clamp_min.Tensor",
    "clamp_max.Tensor",
):
    case(_op)(_binary(_op))

case("add.alpha")(_binary("add.Tensor", alpha=2.5))
case("sub.alpha")(_binary("sub.Tensor", alpha=-1.5))
case("rsub.alpha")(_binary("rsub.Tensor", alpha=0.5))
case("div.floor")(_binary("div.Tensor_mode", rounding_mode="floor"))
case("div.trunc")(_binary("div.Tensor_mode", rounding_mode="trunc"))
case("lerp.Scalar")(_binary("lerp.Scalar", 0.3))
case("lerp.Scalar.high")(_binary("lerp.Scalar", 0.75))
case("where")(
    lambda dh, dt: dh.one_op(
        "where.self", dh.T(4, 7, dtype=BOOL), dh.T(4, 7, dtype=dt), dh.T(7, dtype=dt)
    )
)
case("clamp.Tensor")(
    lambda dh, dt: dh.one_op(
        "clamp.Tensor", dh.T(4, 7, dtype=dt), dh.T(7, dtype=dt), dh.T(4, 1, dtype=dt)
    )
)
case("lerp.Tensor")(
    lambda dh, dt: dh.one_op(
        "lerp.Tensor", dh.T(4, 7, dtype=dt), dh.T(7, dtype=dt), dh.T(4, 1, dtype=dt)
    )
)
case("addcmul")(
    lambda dh, dt: dh.one_op(
        "addcmul.default", dh.T(4, 7, dtype=dt), dh.T(7, dtype=dt), dh.T(4, 7, dtype=dt), value=-1.5
    )
)
case("addcdiv")(
    lambda dh, dt: dh.one_op(
        "addcdiv.default", dh.T(4, 7, dtype=dt), dh.T(7, dtype=dt), dh.T(4, 7, dtype=dt), value=0.5
    )
)
case("masked_fill.Tensor")(
    lambda dh, dt: dh.one_op(
        "masked_fill.Tensor", dh.T(4, 7, dtype=dt), dh.T(7, dtype=BOOL), dh.T(dtype=dt)
    )
)
for _op in ("sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward"):
    case(f"{_op}")(
        lambda dh, dt, op=_op: dh.one_op(
            f"{op}.default", dh.T(4, 7, dtype=dt), dh.transposed(4, 7, dt)
        )
    )
case("gelu_backward.tanh")(
    lambda dh, dt: dh.one_op(
        "gelu_backward.default", dh.T(4, 7, dtype=dt), dh.T(4, 7, dtype=dt), approximate="tanh"
    )
)
case("threshold_backward")(
    lambda dh, dt: dh.one_op(
        "threshold_backward.default", dh.T(4, 7, dtype=dt), dh.T(4, 7, dtype=dt), 0.5
    )
)

# Integer and bool operands: exact results, integer division by non-zero divisors.
INTS = (I64, I32)
for _op in ("add.Tensor", "sub.Tensor", "mul.Tensor", "maximum.default", "minimum.default"):
    case(f"int {_op}", INTS)(_binary(_op))
for _op in ("remainder.Tensor", "fmod.Tensor", "div.Tensor"):
    case(f"int {_op}", INTS, edges(nonzero_from=1))(_binary(_op))
case("int div.floor", INTS, edges(nonzero_from=1))(
    _binary("div.Tensor_mode", rounding_mode="floor")
)
case("int div.trunc", INTS, edges(nonzero_from=1))(
    _binary("div.Tensor_mode", rounding_mode="trunc")
)
for _op, _args in [
    ("abs.default", ()),
    ("neg.default", ()),
    ("sign.default", ()),
    ("square.default", ()),
    ("clamp.default", (-2, 3)),
    ("clamp_min.default", (1,)),
    ("clamp_max.default", (-1,)),
    ("remainder.Scalar", (-3,)),
    ("remainder.Scalar", (3,)),
    ("fmod.Scalar", (-3,)),
    ("pow.Tensor_Scalar", (2,)),
    ("pow.Tensor_Scalar", (3,)),
    ("bitwise_not.default", ()),
    ("hardtanh.default", (-2, 3)),
    ("threshold.default", (1, -5)),
    ("relu.default", ()),
    ("isnan.default", ()),
    ("logical_not.default", ()),
]:
    case(f"int {_op}{_args}", INTS)(_unary(_op, *_args))
for _op in ("logical_not.default", "bitwise_not.default", "isinf.default", "sign.default"):
    case(f"bool {_op}", (BOOL,))(_unary(_op))

# Reductions and normalisations over rows holding infinities, NaN and exact ties.
for _op, _args in [
    ("sum.dim_IntList", ([1],)),
    ("sum.dim_IntList", ([0], True)),
    ("sum.default", ()),
    ("prod.dim_int", (1,)),
    ("prod.default", ()),
    ("mean.dim", ([1],)),
    ("mean.dim", ([0, 1], True)),
    ("mean.default", ()),
    ("amax.default", ([1],)),
    ("amax.default", ([0], True)),
    ("amin.default", ([1],)),
    ("cumsum.default", (1,)),
    ("cumsum.default", (0,)),
    ("logsumexp.default", ([1],)),
    ("logsumexp.default", ([0], True)),
    ("nansum.default", ([1],)),
    ("_softmax.default", (1, False)),
    ("_softmax.default", (0, False)),
    ("_log_softmax.default", (1, False)),
    ("_log_softmax.default", (0, False)),
    ("softmax.int", (1,)),
    ("log_softmax.int", (0,)),
    ("_safe_softmax.default", (1,)),
    ("argmax.default", (1,)),
    ("argmin.default", (0, True)),
    ("argmax.default", ()),
    ("max.default", ()),
    ("min.default", ()),
    ("any.dim", (1,)),
    ("all.dim", (0, True)),
    ("any.default", ()),
    ("all.default", ()),
]:
    case(f"specials {_op}{_args}")(_unary(_op, *_args))
    case(f"finite {_op}{_args}", (F32, BF16), edges())(_unary(_op, *_args))

for _op, _args, _kwargs in [
    ("var.correction", ([1],), {}),
    ("var.correction", ([0],), {"correction": 0, "keepdim": True}),
    ("var.correction", (None,), {"correction": 2}),
    ("std.correction", ([1],), {"keepdim": True}),
    ("std.correction", ([0],), {"correction": 0}),
    ("var.dim", ([1], False), {}),
    ("linalg_vector_norm.default", (2, [1]), {}),
    ("linalg_vector_norm.default", (1, [0], True), {}),
    ("linalg_vector_norm.default", (3, [1]), {}),
    ("linalg_vector_norm.default", (float("inf"), [1]), {}),
    ("linalg_vector_norm.default", (float("-inf"), [1]), {}),
    ("linalg_vector_norm.default", (0, [1]), {}),
    ("norm.ScalarOpt_dim", (2, [1]), {}),
    ("norm.ScalarOpt_dim", (1, [0], True), {}),
]:
    case(f"finite {_op}{_args}{_kwargs}", (F32, F64, BF16), edges())(_unary(_op, *_args, **_kwargs))
for _op, _args in [
    ("var_mean.correction", ([1],)),
    ("std_mean.correction", ([0],)),
    ("max.dim", (1,)),
    ("min.dim", (0, True)),
]:
    case(f"finite {_op}{_args}", (F32, BF16), edges())(
        lambda dh, dt, op=_op, args=_args: dh.one_op(op, dh.transposed(4, 7, dt), *args, outputs=2)
    )
for _op, _args in [
    ("sum.dim_IntList", ([1],)),
    ("prod.default", ()),
    ("cumsum.default", (1,)),
    ("amax.default", ([1],)),
    ("argmax.default", (1,)),
    ("max.dim", (1,)),
]:
    outputs = 2 if _op == "max.dim" else None
    case(f"int {_op}{_args}", INTS, edges())(
        lambda dh, dt, op=_op, args=_args, n=outputs: dh.one_op(
            op, dh.transposed(4, 7, dt), *args, outputs=n
        )
    )
case("bool any.dims", (BOOL, F32), edges())(
    lambda dh, dt: dh.one_op("any.dims", dh.T(2, 4, 7, dtype=dt), [0, 2])
)
case("bool all.dims", (BOOL, F32), edges())(
    lambda dh, dt: dh.one_op("all.dims", dh.T(2, 4, 7, dtype=dt), [0, 2])
)


def _layer_norm(dh: Any, dt: torch.dtype) -> Any:
    return dh.one_op(
        "native_layer_norm.default",
        dh.T(4, 7, dtype=dt),
        [7],
        dh.T(7, dtype=dt),
        dh.T(7, dtype=dt),
        1e-5,
        outputs=3,
    )


case("native_layer_norm", (F32, F64, BF16), edges())(_layer_norm)


@pytest.mark.parametrize(
    ("name", "build", "dtype", "prepare"),
    [
        pytest.param(name, build, dtype, prepare, id=f"{name}-{str(dtype).removeprefix('torch.')}")
        for name, build, dtypes, prepare in _CASES
        for dtype in dtypes
    ],
)
def test_rule_on_edge_values(dh, name, build, dtype, prepare) -> None:
    dh.check(build(dh, dtype), seeds=(0,), prepare=prepare)


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("op", ["add.Tensor", "sub.Tensor", "rsub.Scalar"])
def test_scalar_beside_a_16_bit_tensor_is_rounded_like_eager(dh, op, dtype) -> None:
    """``x_f16 + 0.1`` adds float16(0.1) in eager (one ulp off otherwise, at 13% of the
    elements), and ``-inf + 1e30`` is nan (1e30 is inf in float16): bit for bit."""
    from torchstrata.core import interpret, random_inputs
    from torchstrata.decomp import decompose_with_stats

    for scalar in (0.1, 1e30, -0.7):
        graph = dh.one_op(op, dh.T(256, dtype=dtype), scalar)
        prims, _ = decompose_with_stats(graph)
        (x,) = random_inputs(graph)
        x[:3] = torch.tensor([float("-inf"), float("inf"), -0.0])
        (got,) = interpret(prims, x)
        (want,) = interpret(graph, x)
        assert torch.equal(got.isnan(), want.isnan()), (op, scalar)
        assert torch.equal(got.nan_to_num(), want.nan_to_num()), (op, scalar)


@pytest.mark.parametrize(
    ("op", "shape", "padding"),
    [
        ("reflection_pad1d", (2, 3, 5), [2, 3]),
        ("reflection_pad1d", (2, 5), [4, 0]),
        ("reflection_pad2d", (2, 4, 5), [1, 2, 3, 0]),
        ("reflection_pad3d", (1, 3, 4, 5), [1, 2, 0, 3, 2, 1]),
        ("replication_pad1d", (2, 3, 5), [4, 1]),
        ("replication_pad1d", (3, 5), [-2, 3]),
        ("replication_pad2d", (1, 2, 4, 5), [1, 2, 3, 0]),
        ("replication_pad3d", (1, 2, 3, 4, 5), [1, 0, 2, 1, 0, 2]),
    ],
)
def test_padding_on_edge_values(dh, op, shape, padding) -> None:
    dh.check(dh.one_op(f"{op}.default", dh.T(*shape), padding), seeds=(0,), prepare=edges(True))


def _classes(count: int) -> Callable[[list], None]:
    """Edge values everywhere, then valid class indices in the int64 input."""

    def prepare(inputs: list[torch.Tensor]) -> None:
        edges()(inputs)
        for tensor in inputs:
            if tensor.dtype is I64:
                tensor.copy_(torch.arange(tensor.numel()).remainder(count).reshape(tensor.shape))

    return prepare


def test_rules_at_their_bounds(dh) -> None:
    """Cases at the boundaries that random tests skip: float arange, uint8 any/all,
    diagonals past the matrix, slice_scatter from the first element, nll_loss's
    total_weight without reduction."""
    dh.check(dh.one_op("arange.start_step", 0.5, 3.2, 0.3, dtype=F32), seeds=(0,))
    dh.check(dh.one_op("arange.start_step", -2.5, 2.0, 0.5, dtype=F64), seeds=(0,))
    # an integer arange truncates start and step first, as eager: 0, 1, ..., 8 (was 0, 2, 3, 5...)
    dh.check(dh.one_op("arange.start_step", 0.5, 9.0, 1.5, dtype=I64), seeds=(0,))
    dh.check(dh.one_op("arange.start_step", -2.5, 3.0, 1.5, dtype=I32), seeds=(0,))
    for op in ("any.dim", "all.dim"):
        dh.check(dh.one_op(op, dh.T(4, 7, dtype=torch.uint8), 1), seeds=(0,), prepare=edges())
    for offset in (0, 2, -2, 5, -4):
        dh.check(dh.one_op("diagonal.default", dh.T(3, 4), offset), seeds=(0,), prepare=edges())
    for start, end, step in ((0, 4, 1), (0, 7, 2), (1, 6, 3), (2, 7, 1)):
        size = len(range(start, end, step))
        graph = dh.one_op("slice_scatter.default", dh.T(3, 7), dh.T(3, size), 1, start, end, step)
        dh.check(graph, seeds=(0,), prepare=edges())
    x, t = dh.T(4, 7), dh.T(7)
    dh.check(dh.one_op("addcmul.default", x, t, dh.T(4, 7)), seeds=(0,), prepare=edges())
    dh.check(dh.one_op("addcdiv.default", x, t, dh.T(4, 7)), seeds=(0,), prepare=edges())
    for dtype in (F32, BF16, I64, BOOL):
        mask = dh.T(4, 7, dtype=BOOL)
        value = 2.5 if dtype.is_floating_point else 3
        graph = dh.one_op("masked_fill.Scalar", dh.T(4, 7, dtype=dtype), mask, value)
        dh.check(graph, seeds=(0,), prepare=edges())
        graph = dh.one_op("max.dim", dh.T(4, 7, dtype=dtype), 1, outputs=2)
        dh.check(graph, seeds=(0,), prepare=edges())
    for reduction in (0, 1, 2):
        graph = dh.one_op(
            "nll_loss_forward.default", dh.T(6, 5), dh.T(6, dtype=I64), None, reduction, -100,
            outputs=2,
        )  # fmt: skip
        dh.check(graph, seeds=(0,), prepare=_classes(5))
