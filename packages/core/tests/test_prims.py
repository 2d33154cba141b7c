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
    if prim_name in ("argmax", "argmin", "cumsum"):
        return (x, 1)
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
        "cat": ([x, torch.randn(2, 5)], 0),
        "gather": (x, 1, torch.randint(0, 5, (3, 2))),
        "scatter": (x, 0, torch.randint(0, 3, (2, 5)), torch.randn(2, 5)),
        "scatter_add": (x, 0, torch.randint(0, 3, (2, 5)), torch.randn(2, 5)),
        "rand": ([3, 4], 7, 5, FLOAT, torch.device("cpu")),
    }[prim_name]


def _meta_of(value):
    if isinstance(value, list):
        return [_meta_of(v) for v in value]
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


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_integer_div_is_eagers_trunc_without_its_trap(dtype):
    # ATen's CPU trunc division of int32/int64 dies of SIGFPE on the smallest value by -1;
    # the reference wraps, as eager's floor division does. A zero divisor raises as eager.
    info = torch.iinfo(dtype)
    values = torch.tensor([info.min, info.min + 1, -7, -6, -1, 0, 1, 5, 7, info.max])
    values = values[(values >= info.min) & (values <= info.max)].to(dtype)
    a, b = (grid.flatten() for grid in torch.meshgrid(values, values, indexing="ij"))
    safe = (b != 0) & ~((a == info.min) & (b == -1) & (info.min < 0))
    expected = torch.div(a[safe], b[safe], rounding_mode="trunc")
    assert torch.equal(get_prim("div").impl(a[safe], b[safe]), expected)
    if info.min < 0:
        smallest = torch.tensor([info.min], dtype=dtype)
        assert get_prim("div").impl(smallest, -1).tolist() == [info.min]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        get_prim("div").impl(a, b)


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
    out = get_prim("where").impl(
        torch.tensor([True, False]), float("-inf"), torch.tensor([1.0, 2.0])
    )
    assert out.tolist() == [float("-inf"), 2.0]


def test_gather_scatter_cat_cumsum_argmax_semantics():
    x = torch.tensor([[1.0, 5.0, 3.0], [4.0, float("nan"), 0.0]])
    index = torch.tensor([[2, 0], [1, 1]])
    assert get_prim("gather").impl(x, 1, index).tolist()[0] == [3.0, 1.0]
    zeros = torch.zeros(2, 3)
    added = get_prim("scatter_add").impl(zeros, 1, index, torch.ones(2, 2))
    assert added.tolist() == [[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]]
    written = get_prim("scatter").impl(zeros, 1, index[:1], torch.full((1, 2), 7.0))
    assert written.tolist()[0] == [7.0, 0.0, 7.0] and zeros.sum() == 0  # functional
    assert get_prim("cat").impl([x, x], 1).shape == (2, 6)
    assert get_prim("cumsum").impl(torch.tensor([1, 2, 3]), 0).tolist() == [1, 3, 6]
    assert get_prim("argmax").impl(x, 1).tolist() == [1, 1]  # NaN is the maximum
    assert get_prim("argmin").impl(torch.tensor([2, 1, 1]), 0).item() == 1  # first one
    with pytest.raises(PrimError, match="int64"):
        get_prim("gather").meta(TensorMeta((2, 3), FLOAT), 1, TensorMeta((2, 2), torch.int32))
    with pytest.raises(PrimError, match="differ outside"):
        get_prim("cat").meta([TensorMeta((2, 3), FLOAT), TensorMeta((2, 4), FLOAT)], 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_rand_is_deterministic_uniform_and_offset_shifts_the_stream(dtype):
    rand = get_prim("rand").impl
    cpu = torch.device("cpu")
    a = rand([64, 64], 3, 0, dtype, cpu)
    assert a.dtype == dtype and torch.equal(a, rand([64, 64], 3, 0, dtype, cpu))
    assert float(a.min()) >= 0.0 and float(a.max()) < 1.0
    assert abs(float(a.double().mean()) - 0.5) < 0.02
    assert not torch.equal(a, rand([64, 64], 4, 0, dtype, cpu))
    shifted = rand([10], torch.tensor(3), 5, dtype, cpu)
    assert torch.equal(shifted, a.flatten()[5:15])


def test_broadcast_in_dim_reference_makes_new_dimensions_as_unsqueeze_does():
    """ATen kernels that get its result (through the reference interpreter) read layouts
    from strides, a size-one dimension's included."""
    from torchstrata.core.prims import get_prim

    x = torch.randn(1, 9, 3).transpose(1, 2)
    out = get_prim("broadcast_in_dim").impl(x, [1, 3, 1, 9], [0, 1, 3])
    assert out.stride() == x.unsqueeze(2).stride()
    assert torch.equal(out, x.unsqueeze(2))
    y = torch.randn(3)
    wide = get_prim("broadcast_in_dim").impl(y, [2, 3, 4], [1])
    assert torch.equal(wide, y[None, :, None].expand(2, 3, 4))


@pytest.mark.parametrize(
    ("shape", "strides", "out_shape", "dims"),
    [
        ((1, 3, 9), (27, 1, 3), (1, 3, 1, 9), (0, 1, 3)),  # column-major, new dim inside
        ((1, 3, 9), (27, 9, 1), (1, 3, 1, 9), (0, 1, 3)),
        ((2,), (1,), (2, 1), (0,)),  # keepdim's new last dimension
        ((4,), (1,), (1, 1, 4), (2,)),
        ((3,), (1,), (3, 1, 0), (0,)),  # a size-0 broadcast dim
        ((3, 1), (1, 1), (3, 5), (0, 1)),  # an expanded dim gets 0
        ((3,), (1,), (2, 3, 4), (1,)),
        ((), (), (1, 1), ()),
    ],
)
def test_broadcast_in_dim_meta_strides_are_the_references(shape, strides, out_shape, dims):
    """The meta gives ``unsqueeze``'s strides to new size-one dimensions, as the reference
    (and eager) do: ATen kernels and users read layouts from strides. CUDA's
    ``avg_pool2d_backward`` returned wrong values on stride-0 size-one dimensions."""
    from torchstrata.core import TensorMeta, broadcast_strides
    from torchstrata.core.prims import get_prim

    x = torch.empty_strided(shape, strides)
    reference = get_prim("broadcast_in_dim").impl(x, list(out_shape), list(dims))
    assert broadcast_strides(shape, strides, out_shape, dims) == reference.stride()
    meta = get_prim("broadcast_in_dim").meta(TensorMeta.from_tensor(x), out_shape, dims)
    assert meta.strides == reference.stride()
