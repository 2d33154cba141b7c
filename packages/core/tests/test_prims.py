"""Every prim's meta function agrees with its reference implementation."""

import pytest
import torch

from torchstrata.core import PrimError, PrimFamily, TensorMeta, all_prims, get_prim

FLOAT = torch.float32


def _sample_args(prim_name: str, family: PrimFamily) -> tuple:
    x = torch.randn(3, 5)
    if family is PrimFamily.UNARY:
        if prim_name == "bitwise_not":
            return (torch.randint(0, 9, (3, 5)),)
        return (x.abs() * 0.5 if prim_name in ("asin", "acos") else x,)
    if family in (PrimFamily.BINARY, PrimFamily.COMPARISON):
        if prim_name.startswith("bitwise"):
            return (torch.randint(0, 9, (3, 5)), 3)
        return (x, torch.rand(3, 5) + 0.5)
    if family is PrimFamily.TERNARY:
        return (x > 0, x, 2.0)
    if family is PrimFamily.CAST:
        return (x, torch.float16)
    if family is PrimFamily.REDUCTION:
        return (x, [1])
    return {
        "broadcast_in_dim": (torch.randn(5), [3, 5], [1]),
        "reshape": (x, [5, 3]),
        "permute": (x, [1, 0]),
        "slice": (x, [1, 0], [3, 5], [1, 2]),
        "as_strided": (x, [2, 2], [5, 1], 1),
        "full": ([2, 3], 1.5, FLOAT, torch.device("cpu")),
        "iota": (4, 2, 3, torch.int64, torch.device("cpu")),
    }[prim_name]


def _meta_of(value):
    return TensorMeta.from_tensor(value) if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("definition", all_prims(), ids=lambda p: p.name)
def test_meta_matches_reference(definition):
    args = _sample_args(definition.name, definition.family)
    result = definition.impl(*args)
    meta = definition.meta(*[_meta_of(a) for a in args])
    assert meta.shape == tuple(result.shape)
    assert meta.dtype == result.dtype
    if definition.family is PrimFamily.VIEW:
        assert meta.strides == tuple(result.stride())


def test_elementwise_prims_refuse_implicit_broadcast_and_promotion():
    add = get_prim("add")
    with pytest.raises(PrimError, match="broadcast explicitly"):
        add.meta(TensorMeta((3, 5), FLOAT), TensorMeta((5,), FLOAT))
    with pytest.raises(PrimError, match="cast explicitly"):
        add.meta(TensorMeta((3,), FLOAT), TensorMeta((3,), torch.float64))
    with pytest.raises(PrimError, match="floating-point"):
        get_prim("exp").meta(TensorMeta((3,), torch.int64))


def test_scalar_operand_takes_tensor_dtype():
    out = get_prim("mul").impl(torch.tensor([1, 2, 3]), 2.7)
    assert out.dtype == torch.int64
    assert out.tolist() == [2, 4, 6]


def test_integer_div_truncates_and_float_div_is_true():
    assert get_prim("div").impl(torch.tensor([-7, 7]), 2).tolist() == [-3, 3]
    assert get_prim("div").impl(torch.tensor([-7.0]), 2).tolist() == [-3.5]


def test_reductions_drop_dims_and_handle_empty_dims():
    x = torch.randn(2, 3, 4)
    assert get_prim("sum").impl(x, [0, 2]).shape == (3,)
    assert torch.equal(get_prim("amax").impl(x, []), x)
    assert torch.allclose(get_prim("prod").impl(x, [0, 2]), x.prod(2).prod(0))
    with pytest.raises(PrimError, match="dims"):
        get_prim("sum").meta(TensorMeta((2, 3), FLOAT), [-1])


def test_broadcast_in_dim_meta_gives_zero_strides():
    meta = get_prim("broadcast_in_dim").meta(TensorMeta((5,), FLOAT), [3, 5], [1])
    assert meta.strides == (0, 1)
    with pytest.raises(PrimError, match="cannot broadcast"):
        get_prim("broadcast_in_dim").meta(TensorMeta((4,), FLOAT), [3, 5], [1])


def test_where_scalar_takes_value_dtype_not_predicate_dtype():
    out = get_prim("where").impl(torch.tensor([True, False]), float("-inf"), torch.tensor([1.0, 2.0]))
    assert out.tolist() == [float("-inf"), 2.0]
