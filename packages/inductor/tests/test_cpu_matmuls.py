"""float32 CPU matmuls through oneDNN (``launch/cpu_matmuls.py``, decision 0375): the calls
compute ATen's values on every layout a launcher passes, the launcher calls them only for
the matmuls they apply to, and the timed choice is made once per shape and layout."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, InductorOptions, Level, TensorMeta, aten, prim
from torchstrata.inductor.launch import cpu_matmuls
from torchstrata.inductor.launch.cpu_matmuls import (
    onednn_addmm,
    onednn_applies,
    onednn_available,
    onednn_faster,
    onednn_matmuls,
    onednn_mm,
)

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
ALWAYS = InductorOptions(onednn_matmuls=True)
NEVER = InductorOptions(onednn_matmuls=False)


@needs_onednn
@pytest.mark.parametrize("a_t", [False, True])
@pytest.mark.parametrize("b_t", [False, True])
def test_the_calls_compute_atens_values_on_every_layout(a_t: bool, b_t: bool) -> None:
    """``a @ b`` and ``bias + a @ b`` with either operand a transposed view (a linear's
    weight, a weight gradient's left operand) or a column slice: ATen's values, fresh
    row-major results, no autograd history even from operands that require grad."""
    torch.manual_seed(0)
    a = torch.randn(40, 24).t() if a_t else torch.randn(24, 40)
    b = torch.randn(56, 40).t() if b_t else torch.randn(40, 70)[:, 7:63]
    bias = torch.randn(56, requires_grad=True)
    got = onednn_mm(a, b)
    torch.testing.assert_close(got, torch.mm(a, b), rtol=1e-5, atol=1e-5)
    assert got.stride() == (56, 1) and got.data_ptr() not in (a.data_ptr(), b.data_ptr())
    got = onednn_addmm(bias, a, b)
    torch.testing.assert_close(got, torch.addmm(bias, a, b).detach(), rtol=1e-5, atol=1e-5)
    assert got.grad_fn is None and not got.requires_grad


def _matmul_graph(
    dtype: torch.dtype = torch.float32,
    bias_shape: tuple[int, ...] = (48,),
    bias_strides: tuple[int, ...] | None = None,
):
    """exp(x @ w^T + bias) and exp(g^T @ x): a linear and a weight gradient's layouts."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((32, 16), dtype))
    w = b.input("w", TensorMeta((48, 16), dtype))
    bias = b.input("bias", TensorMeta(bias_shape, dtype, strides=bias_strides))
    g = b.input("g", TensorMeta((32, 8), dtype))
    linear = b.call(aten("addmm.default"), bias, x, b.call(prim("permute"), w, (1, 0)))
    grad = b.call(aten("mm.default"), b.call(prim("permute"), g, (1, 0)), x)
    return b.build([b.call(prim("exp"), linear), b.call(prim("exp"), grad)])


@needs_onednn
def test_the_launcher_calls_onednn_where_told_and_keeps_the_values(ind) -> None:
    compiled = ind.check(_matmul_graph(), "cpp", inductor=ALWAYS, rtol=1e-5, atol=1e-5)
    boxed, _, launch = compiled.launcher_source.partition("def launch(")
    source = compiled.launcher_source
    assert boxed.count("by oneDNN") == 2 and launch.count("by oneDNN") == 2
    assert "_onednn_addmm(buf_bias, " in source and "_onednn_mm(" in source
    assert compiled.package is not None  # the calls are no globals of the launcher's own
    source = ind.check(_matmul_graph(), "cpp", inductor=NEVER, rtol=1e-5, atol=1e-5)
    assert "_onednn" not in source.launcher_source


@pytest.mark.parametrize(
    ("dtype", "bias_shape", "bias_strides"),
    [
        (torch.float64, (48,), None),
        (torch.float32, (32, 48), None),
        (torch.float32, (1, 48), None),
        (torch.float32, (48,), (2,)),
    ],
)
def test_other_matmuls_stay_atens(
    ind, dtype: torch.dtype, bias_shape: tuple[int, ...], bias_strides: tuple[int, ...] | None
) -> None:
    """float64, a bias that is not 1-D over the columns, and a strided bias (oneDNN would
    read it densely) keep ATen's call even where oneDNN is asked for."""
    graph = _matmul_graph(dtype, bias_shape, bias_strides)
    compiled = ind.check(graph, "cpp", inductor=ALWAYS, rtol=1e-5, atol=1e-5)
    assert "_onednn_addmm" not in compiled.launcher_source


def test_addmm_with_beta_or_a_full_bias_and_prims_do_not_apply() -> None:
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4, 4), torch.float32))
    scaled = b.call(aten("addmm.default"), x, x, x, beta=2.0)
    plain = b.call(aten("addmm.default"), x, x, x)
    exp = b.call(prim("exp"), x)
    b.build([scaled, plain, exp])
    assert not onednn_applies(scaled) and not onednn_applies(exp)
    assert not onednn_applies(plain)  # a [4, 4] bias: not 1-D


def test_an_expanded_operand_stays_atens(ind) -> None:
    """A broadcast operand (stride 0, a detached ``expand``) is no oneDNN view: ATen's call,
    the interpreter's values."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((1, 3), torch.float32))
    w = b.input("w", TensorMeta((3, 5), torch.float32))
    wide = b.call(prim("broadcast_in_dim"), x, (4, 3), (0, 1))
    out = b.call(aten("mm.default"), wide, w)
    graph = b.build([b.call(prim("exp"), out)])
    assert not onednn_applies(out)
    compiled = ind.check(graph, "cpp", inductor=ALWAYS, rtol=1e-5, atol=1e-5)
    assert "_onednn" not in compiled.launcher_source


@needs_onednn
def test_the_timed_choice_is_made_once_per_layout(monkeypatch) -> None:
    """``None`` times each shape and layout once; ``False`` never chooses oneDNN."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 64), torch.float32))
    first = b.call(aten("mm.default"), x, x)
    second = b.call(aten("mm.default"), x, x)
    b.build([first, second])
    monkeypatch.setattr(cpu_matmuls, "_CHOICES", {})
    timed: list[int] = []
    best_times = cpu_matmuls._best_times
    monkeypatch.setattr(
        cpu_matmuls, "_best_times", lambda calls: timed.append(len(calls)) or best_times(calls)
    )
    chosen = onednn_matmuls([first, second], None)
    assert timed == [2]  # ATen and oneDNN, once for both nodes
    assert chosen in (frozenset(), frozenset({first, second}))
    assert (first in chosen) == onednn_faster(first) and timed == [2]
    assert onednn_matmuls([first, second], False) == frozenset()
    assert onednn_matmuls([first, second], True) == frozenset({first, second})


def test_the_libraries_are_timed_in_turns(monkeypatch) -> None:
    """Each round times both calls, in reversed order every other round, so a burst of
    load falls on both; each gets its fastest run."""
    order: list[str] = []
    clock = iter(range(1000))
    monkeypatch.setattr(cpu_matmuls.time, "perf_counter", lambda: next(clock))
    best = cpu_matmuls._best_times([lambda: order.append("a"), lambda: order.append("b")])
    assert order[:2] == ["a", "b"]  # the warm-up runs
    timed = order[2:]
    assert len(timed) == 2 * cpu_matmuls.REPEATS
    assert timed[:4] == ["a", "b", "b", "a"]
    assert best == [1, 1]  # one tick a run on the fake clock


@needs_onednn
def test_onednn_switched_off_keeps_atens_calls(ind, monkeypatch) -> None:
    """``torch.backends.mkldnn.enabled = False`` while compiling: no oneDNN call."""
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    assert not onednn_available()
    compiled = ind.compile(_matmul_graph(), "cpp", ALWAYS)
    assert "_onednn" not in compiled.launcher_source


@needs_onednn
def test_a_large_transposed_left_operand_stays_atens(ind) -> None:
    """oneDNN copies a left operand that is not row-major: above
    ``COPIED_LEFT_MAX_BYTES`` (a tied head's weight gradient) the call stays ATen's; a
    row-major one of the same size, or a small transposed one, goes to oneDNN."""
    rows = cpu_matmuls.COPIED_LEFT_MAX_BYTES // 4 // 64 + 1
    b = GraphBuilder(Level.PRIMS)
    g = b.input("g", TensorMeta((64, rows), torch.float32))
    h = b.input("h", TensorMeta((rows, 64), torch.float32))
    x = b.input("x", TensorMeta((64, 8), torch.float32))
    small = b.input("small", TensorMeta((64, 16), torch.float32))
    transposed = b.call(aten("mm.default"), b.call(prim("permute"), g, (1, 0)), x)
    row_major = b.call(aten("mm.default"), h, x)
    little = b.call(aten("mm.default"), b.call(prim("permute"), small, (1, 0)), x)
    graph = b.build([b.call(prim("exp"), v) for v in (transposed, row_major, little)])
    source = ind.check(graph, "cpp", inductor=ALWAYS, rtol=1e-4, atol=1e-4).launcher_source
    assert "buf_mm = _onednn" not in source
    assert "buf_mm_1 = _onednn_mm(" in source and "buf_mm_2 = _onednn_mm(" in source
