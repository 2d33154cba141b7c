"""Max pooling decomposed: values and indices equal to eager's, exactly, on a grid of
window geometries, layouts and dtypes, with ties, NaN and -inf in the windows."""

from __future__ import annotations

import itertools

import pytest
import torch

from torchstrata.core import Graph, OpKind, TensorMeta, interpret, same_layout, verify
from torchstrata.decomp import decompose_with_stats

CHANNELS_LAST = (False, True)


def _input(shape: tuple[int, ...], dtype: torch.dtype, channels_last: bool, seed: int):
    """Small integers (many ties) with NaN and -inf sprinkled in (floats only)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=generator).to(dtype)
    if dtype.is_floating_point:
        pick = torch.rand(shape, generator=generator)
        x[pick < 0.05] = float("nan")
        x[(pick > 0.05) & (pick < 0.15)] = float("-inf")
    if channels_last and len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    elif channels_last and len(shape) == 5:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    return x


def _decomposed(dh, op: str, x: torch.Tensor, *args, outputs: int | None) -> tuple[Graph, Graph]:
    graph = dh.one_op(
        op, TensorMeta(tuple(x.shape), x.dtype, strides=x.stride()), *args, outputs=outputs
    )
    prims, stats = decompose_with_stats(graph)
    verify(prims)
    assert not stats.extern, f"kept extern: {dict(stats.extern)}\n{prims}"
    assert all(o.kind in (OpKind.PRIMS, OpKind.BUILTIN) for o in prims.ops()), str(prims)
    return graph, prims


def _same(dh, op: str, x: torch.Tensor, *args, outputs: int | None = 2) -> Graph:
    """Decompose one ``op`` call and compare values (NaN where NaN), indices and strides."""
    graph, prims = _decomposed(dh, op, x, *args, outputs=outputs)
    expected, actual = interpret(graph, x), interpret(prims, x)
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, str(prims)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    for ours, eagers in zip(prims.outputs, graph.outputs, strict=True):
        meta, want_meta = ours.tensor_meta, eagers.tensor_meta
        assert same_layout(meta.shape, meta.strides, want_meta.strides), str(prims)
    return prims


GEOMETRIES_2D = [
    # kernel, stride, padding, dilation
    (k, s, p, d)
    for k, s, p, d in itertools.product(
        ([1, 1], [2, 2], [3, 3], [2, 3]),
        ([], [1, 1], [2, 2], [1, 2]),
        ([0, 0], [1, 1], [1, 0]),
        ([1, 1], [2, 1]),
    )
    if all(2 * pi <= ki for pi, ki in zip(p, k, strict=True))
]


@pytest.mark.parametrize(("kernel", "stride", "padding", "dilation"), GEOMETRIES_2D)
@pytest.mark.parametrize("ceil_mode", (False, True))
def test_max_pool2d_geometries(dh, kernel, stride, padding, dilation, ceil_mode) -> None:
    for seed, channels_last in enumerate(CHANNELS_LAST):
        x = _input((2, 3, 7, 8), torch.float32, channels_last, seed)
        args = (kernel, stride, padding, dilation, ceil_mode)
        _same(dh, "max_pool2d_with_indices.default", x, *args)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16, torch.float64))
@pytest.mark.parametrize("channels_last", CHANNELS_LAST)
def test_max_pool2d_dtypes_and_layouts(dh, dtype, channels_last) -> None:
    x = _input((2, 5, 9, 11), dtype, channels_last, seed=3)
    _same(dh, "max_pool2d_with_indices.default", x, [3, 3], [2, 2], [1, 1], [1, 1], True)
    _same(dh, "max_pool2d.default", x, [3, 3], [2, 2], [1, 1], [1, 1], False, outputs=None)


def test_nan_and_minus_inf_windows(dh) -> None:
    """Two NaNs in a window: the last one's index (ATen replaces on every NaN); a window
    all ``-inf``: its first position inside the input, padding never chosen."""
    x = torch.full((1, 1, 4, 4), float("-inf"))
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = float("nan")
    x[0, 0, 3, 3] = 5.0
    prims = _same(dh, "max_pool2d_with_indices.default", x, [3, 3], [2, 2], [1, 1])
    values, indices = interpret(prims, x)
    assert indices[0, 0, 0, 0].item() == 4 and values[0, 0, 0, 0].isnan()
    assert indices[0, 0, 1, 1].item() == 15
    assert indices[0, 0, 0, 1].item() == 1  # NaN at (0, 1); (1, 0) is outside


def test_integer_dtypes(dh) -> None:
    """Integer pooling pads with the dtype's lowest value, which never wins over a value."""
    x = _input((1, 2, 5, 6), torch.int64, False, seed=1)
    x[0, 0] = torch.iinfo(torch.int64).min
    graph = dh.one_op(
        "max_pool2d_with_indices.default",
        TensorMeta(tuple(x.shape), x.dtype),
        [3, 3],
        [2, 2],
        [1, 1],
        outputs=2,
    )
    prims, _ = decompose_with_stats(graph)
    try:
        expected = interpret(graph, x)
    except Exception:  # noqa: BLE001 - eager CPU has no integer max pooling in some versions
        expected = None
    actual = interpret(prims, x)
    if expected is not None:
        for got, want in zip(actual, expected, strict=True):
            assert torch.equal(got, want)
    # a window of only the lowest value points at its first position inside the input
    assert actual[1][0, 0, 0, 0].item() == 0 and actual[1][0, 0, 1, 1].item() == 7


@pytest.mark.parametrize("ceil_mode", (False, True))
def test_max_pool1d_and_3d(dh, ceil_mode) -> None:
    x1 = _input((2, 3, 10), torch.float32, False, seed=4)
    _same(dh, "max_pool1d_with_indices.default", x1, [3], [2], [1], [2], ceil_mode)
    _same(dh, "max_pool1d.default", x1, [3], [2], [1], [1], ceil_mode, outputs=None)
    for channels_last in CHANNELS_LAST:
        x3 = _input((1, 2, 5, 6, 7), torch.float32, channels_last, seed=5)
        _same(
            dh,
            "max_pool3d_with_indices.default",
            x3,
            [3, 2, 3],
            [2, 1, 2],
            [1, 1, 0],
            [1, 1, 2],
            ceil_mode,
        )


def test_unbatched_input(dh) -> None:
    x = _input((3, 7, 9), torch.float32, False, seed=6)
    _same(dh, "max_pool2d_with_indices.default", x, [2, 2], [], [1, 1], [1, 1], True)


def test_unused_indices_leave_no_index_arithmetic(dh) -> None:
    """Only the values read: the index chain (``iota``, ``mul``, ``add``) is dead code."""
    x = _input((1, 2, 6, 6), torch.float32, False, seed=0)
    _, prims = _decomposed(
        dh, "max_pool2d_with_indices.default", x, [3, 3], [2, 2], [1, 1], outputs=1
    )
    names = {node.op.name for node in prims.nodes if node.op is not None}
    assert "prims.iota" not in names and "prims.add" not in names, str(prims)
    _, both = _decomposed(
        dh, "max_pool2d_with_indices.default", x, [3, 3], [2, 2], [1, 1], outputs=2
    )
    assert "prims.iota" in {node.op.name for node in both.nodes if node.op is not None}


BACKWARD_GEOMETRIES = [
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([2, 3], [1, 2], [1, 0], [2, 1], True),
    ([3, 3], [1, 1], [1, 1], [1, 1], False),
]


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "ceil_mode"), BACKWARD_GEOMETRIES
)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("channels_last", CHANNELS_LAST)
def test_max_pool2d_backward(
    dh, kernel, stride, padding, dilation, ceil_mode, dtype, channels_last
) -> None:
    """The gradient equals eager's with indices from eager's forward (ties, NaN, -inf and
    overlapping windows: one input collects several outputs' gradients)."""
    x = _input((2, 3, 7, 9), dtype, channels_last, seed=7)
    args = (kernel, stride, padding, dilation, ceil_mode)
    values, indices = torch.ops.aten.max_pool2d_with_indices(x, *args)
    grad = torch.randn(values.shape, dtype=dtype).contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format
    )
    metas = [TensorMeta(tuple(t.shape), t.dtype, strides=t.stride()) for t in (grad, x, indices)]
    graph = dh.one_op(
        "max_pool2d_with_indices_backward.default", metas[0], metas[1], *args, metas[2]
    )
    prims, stats = decompose_with_stats(graph)
    verify(prims)
    assert not stats.extern, str(prims)
    (want,) = interpret(graph, grad, x, indices)
    (got,) = interpret(prims, grad, x, indices)
    # bfloat16: eager rounds after every add, ours once (float32 sums): at most as far
    # from the float64 sum as eager's
    reference = dh.float64_reference(graph, [grad, x, indices])
    dh.assert_close(got, want, reference[0] if reference else None, str(prims))
    meta = prims.outputs[0].tensor_meta
    assert same_layout(meta.shape, meta.strides, graph.outputs[0].tensor_meta.strides)


def test_max_pool3d_backward(dh) -> None:
    x = _input((1, 2, 5, 6, 5), torch.float32, True, seed=8)
    args = ([3, 2, 3], [2, 1, 2], [1, 1, 0], [1, 1, 1], True)
    values, indices = torch.ops.aten.max_pool3d_with_indices(x, *args)
    grad = torch.randn(values.shape)
    metas = [TensorMeta(tuple(t.shape), t.dtype, strides=t.stride()) for t in (grad, x, indices)]
    graph = dh.one_op(
        "max_pool3d_with_indices_backward.default", metas[0], metas[1], *args, metas[2]
    )
    prims, stats = decompose_with_stats(graph)
    assert not stats.extern, str(prims)
    torch.testing.assert_close(
        interpret(prims, grad, x, indices)[0], interpret(graph, grad, x, indices)[0]
    )


def test_large_windows_stay_aten(dh) -> None:
    """A window of more than ``MAX_WINDOW`` elements is left to ATen's loop."""
    graph = dh.one_op(
        "max_pool2d_with_indices.default", TensorMeta((1, 2, 12, 12), torch.float32), [9, 9]
    )
    _, stats = decompose_with_stats(graph)
    assert stats.extern
