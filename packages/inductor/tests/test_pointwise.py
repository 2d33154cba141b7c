"""Pointwise kernels and views against the reference interpreter."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim

SHAPES = [(7, 13), (0, 5), (1, 1), (4, 1, 3), (), (5,)]


def _chain(shape, dtype=torch.float32, strides=None):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, dtype, strides=strides))
    y = b.input("y", TensorMeta(shape, dtype))
    t = b.call(prim("mul"), b.call(prim("add"), x, y), 2.0)
    u = b.call(prim("maximum"), b.call(prim("exp"), b.call(prim("neg"), t)), y)
    return b.build([b.call(prim("sqrt"), b.call(prim("abs"), u)), t])


@pytest.mark.parametrize("shape", SHAPES)
def test_pointwise_chain_is_one_kernel(ind, codegen, shape):
    compiled = ind.check(_chain(shape), codegen, seeds=(0, 1))
    assert len(compiled.kernels) == (1 if 0 not in shape else 0)


def test_stride0_and_transposed_inputs(ind, codegen):
    ind.check(_chain((4, 6), strides=(0, 1)), codegen)
    ind.check(_chain((4, 6), strides=(1, 4)), codegen)


def test_views_are_index_arithmetic(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 4), torch.float32))
    p = b.call(prim("permute"), x, (1, 0))  # [4, 6]
    s = b.call(prim("slice"), p, (1, 0), (4, 6), (2, 3))  # [2, 2]
    r = b.call(prim("reshape"), b.call(prim("exp"), x), (3, 8))
    r2 = b.call(prim("reshape"), r, (24,))
    a = b.call(prim("as_strided"), b.call(prim("add"), x, 1.0), (3, 3), (4, 1), 2)
    bi = b.call(
        prim("broadcast_in_dim"), b.call(prim("slice"), r2, (0,), (24,), (8,)), (2, 3), (1,)
    )
    graph = b.build([b.call(prim("add"), s, 1.0), r2, a, b.call(prim("mul"), bi, 3.0), p])
    compiled = ind.check(graph, codegen)
    assert compiled.eager_ops == ()
    assert "copy" not in compiled.launcher_source


def test_as_strided_of_an_input_is_a_torch_view(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 4), torch.float32))
    a = b.call(prim("as_strided"), x, (2, 2), (1, 4), 1)
    ind.check(b.build([b.call(prim("neg"), a)]), codegen)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_integer_ops(ind, codegen, dtype):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 7), dtype))
    y = b.input("y", TensorMeta((5, 7), dtype))
    q = b.call(
        prim("div"), x, b.call(prim("add"), b.call(prim("mul"), y, y), 1)
    )  # no division by zero
    m = b.call(prim("bitwise_xor"), b.call(prim("mul"), x, 3), y)
    c = b.call(prim("where"), b.call(prim("lt"), x, y), x, m)
    f = b.call(prim("convert_element_type"), c, torch.float32)
    ind.check(b.build([q, c, f, b.call(prim("maximum"), x, y)]), codegen)


def test_bool_ops(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3, 9), torch.bool))
    y = b.input("y", TensorMeta((3, 9), torch.float32))
    both = b.call(prim("bitwise_and"), x, b.call(prim("gt"), y, 0.0))
    inv = b.call(prim("bitwise_not"), both)
    as_int = b.call(prim("convert_element_type"), inv, torch.int32)
    # (a Python scalar in where's value slot is mis-typed by core's reference impl: use a tensor)
    ind.check(
        b.build([both, inv, as_int, b.call(prim("where"), x, y, b.call(prim("neg"), y))]), codegen
    )


def test_creation_ops(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 5), torch.float32))
    full = b.call(prim("full"), (4, 5), 2.5, torch.float32, torch.device("cpu"))
    iota = b.call(prim("iota"), 5, 3, 2, torch.int64, torch.device("cpu"))
    iota_f = b.call(
        prim("convert_element_type"),
        b.call(prim("broadcast_in_dim"), iota, (4, 5), (1,)),
        torch.float32,
    )
    ind.check(
        b.build([b.call(prim("add"), b.call(prim("mul"), x, full), iota_f), iota, full]), codegen
    )


def test_scalar_inputs(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    s = b.input("s", TensorMeta((), torch.float32))
    x = b.input("x", TensorMeta((3, 4), torch.float32))
    out = b.call(prim("mul"), x, b.call(prim("broadcast_in_dim"), s, (3, 4), ()))
    ind.check(b.build([out, b.call(prim("exp"), s)]), codegen)


def test_output_that_is_an_input(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((3,), torch.float32))
    compiled = ind.check(b.build([x, b.call(prim("neg"), x)]), codegen)
    (arg,) = [torch.ones(3)]
    if codegen != "cuda":  # the CUDA wrapper copies to and from the device
        assert compiled(arg)[0] is arg


@pytest.mark.parametrize("sizes", [(3, 5), (0, 4), (1, 1)])
def test_cat_is_index_arithmetic(ind, codegen, sizes):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((2, sizes[0]), torch.float32))
    y = b.input("y", TensorMeta((2, sizes[1]), torch.float32))
    joined = b.call(prim("cat"), [b.call(prim("neg"), y), x], 1)
    compiled = ind.check(b.build([b.call(prim("mul"), joined, 2.0)]), codegen)
    assert compiled.eager_ops == () and len(compiled.kernels) == 1


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 2.0])
def test_small_constant_powers_are_products(ind, codegen, exponent):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 7), torch.float32))
    base = b.call(prim("add"), b.call(prim("abs"), x), 0.5)
    compiled = ind.check(b.build([b.call(prim("pow"), base, exponent)]), codegen)
    assert compiled.eager_ops == ()


def test_zero_constants_of_either_sign_stay_apart(ind, codegen):
    """``x * 0.0`` and ``x * -0.0`` are different values (their reciprocals are infinities
    of opposite signs); equal-comparing constants must not merge them in a kernel."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5,), torch.float32))
    outputs = [
        b.call(prim("reciprocal"), b.call(prim("mul"), x, zero)) for zero in (0.0, -0.0, 0.0)
    ]
    x_values = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0])
    compiled = ind.check(b.build(outputs), codegen, inputs=[x_values])
    positive, negative, again = compiled(x_values)
    torch.testing.assert_close(negative, -positive)
    torch.testing.assert_close(again, positive)


def test_the_negation_of_zero_is_negative_zero(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4,), torch.float32))
    graph = b.build([b.call(prim("reciprocal"), b.call(prim("neg"), b.call(prim("mul"), x, 0.0)))])
    (got,) = ind.check(graph, codegen, inputs=[torch.ones(4)])(torch.ones(4))
    torch.testing.assert_close(got, torch.full((4,), -torch.inf))
