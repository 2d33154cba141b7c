"""float32 CPU matmuls of a lowering for many sizes (``launch/sized_matmuls.py``, decision
0466): the launcher calls a function that chooses oneDNN or ATen per call, which computes
ATen's values at every size and layout, times once per size bucket, and keeps ATen's call
where oneDNN's layouts do not apply."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    InductorOptions,
    Level,
    SizeGuards,
    TensorMeta,
    aten,
    create_plugin_manager,
    prim,
)
from torchstrata.inductor import compile_graph, plugin
from torchstrata.inductor.launch import cpu_matmuls, sized_matmuls
from torchstrata.inductor.launch.cpu_matmuls import ONEDNN_CALLS, onednn_available
from torchstrata.inductor.launch.sized_matmuls import (
    forget_sized_choices,
    size_bucket,
    sized_addmm,
    sized_mm,
)

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
ONEDNN_MM, ONEDNN_ADDMM = ONEDNN_CALLS["aten.mm.default"][1], ONEDNN_CALLS["aten.addmm.default"][1]


@pytest.fixture
def timings(monkeypatch) -> list[tuple[Any, ...]]:
    """The layouts each timing of the two libraries ran at, from a fresh process's state."""
    monkeypatch.setattr(cpu_matmuls, "_CHOICES", {})
    forget_sized_choices()
    timed: list[tuple[Any, ...]] = []
    faster_at = cpu_matmuls.onednn_faster_at

    def counted(op: str, layouts: tuple[Any, ...], margin: float) -> bool:
        timed.append(layouts)
        return faster_at(op, layouts, margin)

    monkeypatch.setattr(sized_matmuls, "onednn_faster_at", counted)
    yield timed
    forget_sized_choices()


def _memo(call: Any) -> dict[tuple[Any, ...], Any]:
    return call.memo


def _site(*tensors: torch.Tensor) -> tuple[Any, ...]:
    """A site key as the launcher's names its layouts: here the layouts themselves."""
    return tuple((tuple(tensor.shape), tensor.stride()) for tensor in tensors)


def _keyed(call: Any) -> Any:
    """``call`` taking the tensors only, its site key made of their layouts."""

    def keyed(*tensors: torch.Tensor) -> torch.Tensor:
        return call(_site(*tensors), *tensors)

    keyed.memo = call.memo
    return keyed


@needs_onednn
@pytest.mark.parametrize("rows", [0, 1, 2, 7, 33, 255, 1000])
@pytest.mark.parametrize("timed", [True, False])
def test_every_size_and_layout_computes_atens_values(timings, rows: int, timed: bool) -> None:
    """``x @ w^T + b`` (a linear) and ``g^T @ x`` (a weight gradient, ``rows`` inner) at
    odd, one and zero rows, chosen by timing or oneDNN wherever it applies: ATen's values
    and shapes."""
    torch.manual_seed(rows)
    mm, addmm = _keyed(sized_mm(timed)), _keyed(sized_addmm(timed))
    x, g = torch.randn(rows, 24), torch.randn(rows, 40)
    w, bias = torch.randn(40, 24), torch.randn(40)
    got = addmm(bias, x, w.t())
    torch.testing.assert_close(got, torch.addmm(bias, x, w.t()), rtol=1e-5, atol=1e-5)
    assert got.shape == (rows, 40)
    got = mm(g.t(), x)
    assert got.shape == (40, 24)
    torch.testing.assert_close(got, g.t() @ x, rtol=1e-4, atol=1e-4)  # rows summed
    ((addmm_call,), (mm_call,)) = _memo(addmm).values(), _memo(mm).values()
    if rows == 0:  # an empty operand: ATen's call, nothing timed
        assert addmm_call is not ONEDNN_ADDMM and mm_call is not ONEDNN_MM and timings == []
    elif not timed:
        assert addmm_call is ONEDNN_ADDMM and mm_call is ONEDNN_MM and timings == []
    else:
        assert len(timings) == 2  # the two calls' buckets


@needs_onednn
def test_layouts_onednn_does_not_take_keep_atens_call(timings) -> None:
    """An expanded operand, a strided bias and a large transposed left operand: ATen's
    call even where oneDNN is forced, with ATen's values; nothing timed."""
    mm, addmm = _keyed(sized_mm(False)), _keyed(sized_addmm(False))
    wide = torch.randn(1, 16).expand(8, 16)
    w = torch.randn(16, 12)
    torch.testing.assert_close(mm(wide, w), wide @ w)
    strided_bias = torch.randn(24)[::2]
    torch.testing.assert_close(addmm(strided_bias, wide, w), torch.addmm(strided_bias, wide, w))
    rows = cpu_matmuls.COPIED_LEFT_MAX_BYTES // 4 // 16 + 1
    big = torch.randn(16, rows)
    torch.testing.assert_close(mm(big.t(), w), big.t() @ w, rtol=1e-4, atol=1e-4)
    assert all(call is not ONEDNN_MM for call in _memo(mm).values())
    assert all(call is not ONEDNN_ADDMM for call in _memo(addmm).values())
    # the same shapes row-major and contiguous go to oneDNN
    mm(big.t().contiguous(), w)
    addmm(torch.randn(12), wide.contiguous(), w)
    assert ONEDNN_MM in _memo(mm).values() and ONEDNN_ADDMM in _memo(addmm).values()
    assert timings == []


@needs_onednn
def test_the_choice_is_timed_once_per_size_bucket(timings) -> None:
    """Rows 17, 20 and 31 share a bucket (one timing, at the first), 32 and 63 another; a
    size seen before is one lookup; another thread count is another bucket."""
    mm = _keyed(sized_mm(True))
    w = torch.randn(64, 48)
    for rows in (17, 20, 31, 17, 32, 63, 20):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(mm(x, w), x @ w, rtol=1e-5, atol=1e-5)
    assert [layouts[0][0] for layouts in timings] == [(17, 64), (32, 64)]
    assert len(_memo(mm)) == 5  # each distinct shape remembered once
    threads = torch.get_num_threads()
    chosen = {rows: _memo(mm)[(_site(torch.empty(rows, 64), w), threads)] for rows in (17, 20)}
    assert chosen[17] is chosen[20]  # one bucket, one choice
    torch.set_num_threads(2 if threads == 1 else 1)
    try:
        mm(torch.randn(17, 64), w)
    finally:
        torch.set_num_threads(threads)
    assert len(timings) == 3


def test_buckets_are_octaves_of_each_size_and_layout_kinds() -> None:
    rows = ((17, 64), (64, 1))
    weight = ((64, 48), (48, 1))
    transposed = ((64, 48), (1, 64))
    at = size_bucket("aten.mm.default", (rows, weight))
    assert at == size_bucket("aten.mm.default", (((31, 64), (64, 1)), weight))
    assert at != size_bucket("aten.mm.default", (((32, 64), (64, 1)), weight))
    assert at != size_bucket("aten.mm.default", (rows, transposed))
    assert (
        at[1:3] == ("rows", "rows")
        and size_bucket("aten.mm.default", (rows, transposed))[2] == "columns"
    )
    bias = ((48,), (1,))
    assert size_bucket("aten.addmm.default", (bias, rows, weight))[1:] == at[1:]


def _symbolic_graph(guards: SizeGuards, dtype: torch.dtype = torch.float32):
    """exp(x @ w^T + bias) and exp(g^T @ x) over ``s0`` rows (``g [s0, s1]``)."""
    s0, s1 = guards.symbol("s0"), guards.symbol("s1")
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((s0, 16), dtype))
    w = b.input("w", TensorMeta((48, 16), dtype))
    bias = b.input("bias", TensorMeta((48,), dtype))
    g = b.input("g", TensorMeta((s0, s1), dtype))
    transposed = b.call(prim("permute"), w, (1, 0))
    linear = b.call(aten("addmm.default"), bias, x, transposed, meta=TensorMeta((s0, 48), dtype))
    grad_t = b.call(prim("permute"), g, (1, 0))
    grad = b.call(aten("mm.default"), grad_t, x, meta=TensorMeta((s1, 16), dtype))
    return b.build([b.call(prim("exp"), linear), b.call(prim("exp"), grad)])


def _compiled(choice: bool | None, dtype: torch.dtype = torch.float32):
    guards = SizeGuards({"s0": 5, "s1": 7})
    options = CompileOptions(codegen="cpp", inductor=InductorOptions(onednn_matmuls=choice))
    with guards.active():
        compiled = compile_graph(_symbolic_graph(guards, dtype), "cpu", options)
    guards.close()
    return compiled, [str(condition) for condition in guards.conditions]


@needs_onednn
@pytest.mark.parametrize("choice", [None, True])
def test_a_symbolic_lowering_chooses_per_call_and_keeps_the_values(timings, choice) -> None:
    """The launcher calls the sized functions (timed, or oneDNN wherever it applies), the
    lowering relies on no condition of its own, and every size (one and zero rows
    included) computes eager's values."""
    compiled, conditions = _compiled(choice)
    source = compiled.launcher_source
    prefix = "_onednn_" if choice else "_"
    linear_site = "('aten.addmm.default 48/1 s0,16/16,1 16,48/1,16', s0)"
    grad_site = "('aten.mm.default s1,s0/1,s1 s0,16/16,1', s0, s1)"  # g^T: its strides
    # the launcher looks the choice up, and asks for it on a miss
    linear, grad = f"{prefix}addmm_by_size", f"{prefix}mm_by_size"
    assert (
        f"= ({linear}.memo.get(_key := ({linear_site}, _threads())) or {linear}.choose(_key, buf_bias, buf_x, "
        in source
    )
    assert (
        f"= ({grad}.memo.get(_key := ({grad_site}, _threads())) or {grad}.choose(_key, buf_permute_1, buf_x))(buf_permute_1, buf_x)"
        in source
    )
    assert conditions == _compiled(False)[1]  # what ATen's call relied on, no more
    # the calls are fixed launcher names: the package (the runtime stores it with its
    # sizes as text, 0450) loads and runs
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    loaded = manager.hook.torchstrata_codegen_load(
        package=compiled.package, device=torch.device("cpu"), options=CompileOptions(codegen="cpp")
    )
    assert loaded.launcher_source == source
    for rows in (5, 17, 1, 0, 300, 33):
        x, w, bias, g = (
            torch.randn(rows, 16),
            torch.randn(48, 16),
            torch.randn(48),
            torch.randn(rows, 9),
        )
        linear, grad = (compiled if rows % 2 else loaded)(x, w, bias, g)
        torch.testing.assert_close(
            linear, torch.exp(torch.addmm(bias, x, w.t())), rtol=1e-4, atol=1e-4
        )
        torch.testing.assert_close(grad, torch.exp(g.t() @ x), rtol=1e-4, atol=1e-4)
    assert (timings == []) == bool(choice)


@pytest.mark.parametrize(("choice", "dtype"), [(False, torch.float32), (None, torch.float64)])
def test_switched_off_or_other_dtypes_keep_atens_call(choice, dtype) -> None:
    compiled, _ = _compiled(choice, dtype)
    assert "_by_size" not in compiled.launcher_source and "_onednn" not in compiled.launcher_source
