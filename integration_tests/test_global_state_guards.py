"""The global torch state is guarded as torch.compile guards it (issue 30, item 1).

Each test changes one item between two calls of the same compiled function and compares
with eager: values, dtype, device, ``requires_grad``. A state the compiler reproduces
recompiles, and the recompile reason names the item and its two values; a state it
cannot reproduce (autocast, a user mode, a non-CPU default device) runs eagerly with a
warning naming it. Here, not in the runtime package: it needs every stage.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import torchstrata.runtime as rt


def affine(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A matmul (autocast runs it in low precision), an activation, and a tensor made in
    the graph (the default dtype and device decide its dtype and device; a 0-d CPU
    tensor adds to one on any device)."""
    return F.linear(x, w).relu().sum() + torch.ones(w.shape[0])


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, generator=generator), torch.randn(4, 5, generator=generator)


def _same(result: Any, expected: Any) -> None:
    assert type(result) is type(expected)
    assert result.dtype == expected.dtype
    assert result.device == expected.device
    assert result.requires_grad == expected.requires_grad
    if result.device.type != "meta":
        torch.testing.assert_close(result, expected)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextlib.contextmanager
def _default_device(device: str) -> Iterator[None]:
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextlib.contextmanager
def _deterministic(warn_only: bool) -> Iterator[None]:
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _ScaledAdds(TorchFunctionMode):
    """A user mode that changes results: every ``add`` comes out doubled."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        return out * 2 if name in ("add", "__add__") else out


class _NegatedRelu(TorchDispatchMode):
    """A user dispatch mode that changes results: ``relu`` comes out negated."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        return -out if func is torch.ops.aten.relu.default else out


#: (id, the change, the item a recompile names, or the text of the eager fallback warning)
RECOMPILED: list[tuple[str, Callable[[], Any], str]] = [
    ("grad-mode", torch.no_grad, "grad mode changed from True to False"),
    ("inference-mode", torch.inference_mode, "inference mode changed from False to True"),
    (
        "default-dtype",
        lambda: _default_dtype(torch.float64),
        "default dtype changed from torch.float32 to torch.float64",
    ),
    (
        "deterministic",
        lambda: _deterministic(False),
        "deterministic algorithms changed from False to True",
    ),
    (
        "deterministic-warn-only",
        lambda: _deterministic(True),
        "deterministic algorithms warn_only changed from False to True",
    ),
    (
        "default-device-cpu",
        lambda: torch.device("cpu"),
        "torch function modes changed from [] to [default device cpu]",
    ),
    ("num-threads", lambda: _threads(1), "number of threads changed from"),
    (
        "autocast",
        lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        "autocast changed from off to cpu torch.bfloat16",
    ),
    (
        "autocast-fp16-cache-off",
        lambda: torch.autocast("cpu", dtype=torch.float16, cache_enabled=False),
        "autocast changed from off to cpu torch.float16 (cache off)",
    ),
]


@contextlib.contextmanager
def _autocast_on_two_device_types() -> Iterator[None]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.set_autocast_enabled("xpu", True)  # (a flag: no XPU needed)
        try:
            yield
        finally:
            torch.set_autocast_enabled("xpu", False)


EAGER: list[tuple[str, Callable[[], Any], str]] = [
    (
        "autocast-two-device-types",
        _autocast_on_two_device_types,
        "autocast is enabled for several device types",
    ),
    ("default-device-meta", lambda: _default_device("meta"), "the default device is meta"),
    ("torch-function-mode", _ScaledAdds, r"TorchFunctionMode \(_ScaledAdds\)"),
    ("torch-dispatch-mode", _NegatedRelu, r"TorchDispatchMode \(_NegatedRelu\)"),
]


def _changes_between_calls(change: Callable[[], Any]) -> rt.CompiledFunction:
    """Call a compiled ``affine`` outside, inside and again outside ``change()``,
    comparing every result with eager's under the same state."""
    compiled = rt.compile(affine)
    x, w = _inputs()
    w.requires_grad_()
    _same(compiled(x, w), affine(x, w))
    with change():
        for _ in range(2):  # the compile under the new state, then a cache hit
            _same(compiled(x, w), affine(x, w))
    _same(compiled(x, w), affine(x, w))  # the first entry still serves
    return compiled


@pytest.mark.parametrize(
    ("change", "named"), [c[1:] for c in RECOMPILED], ids=[c[0] for c in RECOMPILED]
)
def test_a_changed_global_recompiles_and_the_reason_names_it(change, named):
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        compiled = _changes_between_calls(change)
    assert len(compiled.cache) == 2
    (reason,) = compiled.recompile_reasons
    assert reason.startswith("global torch state: ") and named in reason


@pytest.mark.parametrize(("change", "warning"), [c[1:] for c in EAGER], ids=[c[0] for c in EAGER])
def test_a_global_the_compiler_cannot_reproduce_runs_eagerly_with_a_warning(change, warning):
    rt.reset()
    with pytest.warns(rt.TorchstrataFallbackWarning, match=warning):
        compiled = _changes_between_calls(change)
    assert [entry.run is None for entry in compiled.cache.entries] == [False, True]


def test_autocast_results_keep_eager_dtypes():
    """Issue 30's report: first called outside autocast, then inside it, the compiled
    function returned float32 where eager returns bfloat16. Under autocast the graph is
    compiled (not run eagerly) with autocast's casts in it."""

    def linear_relu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w).relu() + 1

    compiled = rt.compile(linear_relu)
    x, w = _inputs()
    assert compiled(x, w).dtype == torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            result, expected = compiled(x, w), linear_relu(x, w)
    assert expected.dtype == torch.bfloat16
    _same(result, expected)
    assert all(entry.run is not None for entry in compiled.cache.entries)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = (
            torch.nn.Linear(8, 16),
            torch.nn.LayerNorm(16),
            torch.nn.Linear(16, 4),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(F.gelu(self.fc1(x))))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_training_step_under_autocast_matches_eager(dtype):
    """The forward under autocast, the loss (a float32 op of autocast's) too, the
    backward outside it: dtypes exact, gradients within the low precision's rounding."""
    torch.manual_seed(0)
    model, reference = _Block(), _Block()
    reference.load_state_dict(model.state_dict())
    compiled = rt.compile(model)
    x, target = torch.randn(5, 8), torch.randn(5, 4)
    for _ in range(2):
        with torch.autocast("cpu", dtype=dtype):
            out, expected = compiled(x), reference(x)
            loss, expected_loss = F.mse_loss(out, target), F.mse_loss(expected, target)
        assert out.dtype == expected.dtype == dtype
        torch.testing.assert_close(out, expected)
        loss.backward()
        expected_loss.backward()
        for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
            assert mine.grad is not None and theirs.grad is not None
            assert mine.grad.dtype == theirs.grad.dtype
            torch.testing.assert_close(mine.grad, theirs.grad, rtol=2e-2, atol=4e-3)
            mine.grad, theirs.grad = None, None
    assert [entry.run is not None for entry in compiled.compiled_forward.cache.entries] == [True]


def _autocast_region(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w)
        return (
            F.mse_loss(y, torch.zeros_like(y)),  # a float32 op: its bfloat16 input is cast up
            y.exp(),
            torch.cat([y, x[:, :4]]),  # promoted to float32
            F.linear(x.double(), w.double()),  # float64 is never cast
            y.argmax(-1),
        )


def _cuda_region_on_cpu_tensors(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.float16):
        return F.linear(x, w)  # CPU tensors: a CUDA region does not cast them


def _opaque() -> None:
    torch.set_num_threads(torch.get_num_threads())  # a graph break, changing nothing


def _region_with_a_break(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w)
        _opaque()  # the region is entered for real; the next segment is traced in it
        loss = F.mse_loss(F.linear(y, w[:, :4].t()), y)
    return loss, y.exp()


@pytest.mark.parametrize("fn", [_autocast_region, _cuda_region_on_cpu_tensors])
def test_an_autocast_region_inside_the_function_casts_as_eager(fn):
    """The capture's region casted the inputs of a fixed list of ops to the region's
    dtype whatever their device and dtype, and nothing else: ``mse_loss`` came back
    bfloat16 where eager gives float32. Now each op's casts are checked against
    autocast itself."""
    compiled = rt.compile(fn)
    x, w = _inputs()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "CUDA is not available", UserWarning)
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        result = compiled(x, w)
        expected = fn(x, w)
    for mine, theirs in zip(
        result if isinstance(result, tuple) else (result,),
        expected if isinstance(expected, tuple) else (expected,),
        strict=True,
    ):
        _same(mine, theirs)
    assert rt.explain(compiled, x, w).graph_break_count == 0


def test_a_graph_break_inside_an_autocast_region():
    compiled = rt.compile(_region_with_a_break)
    x, w = _inputs()
    for _ in range(2):
        result, expected = compiled(x, w), _region_with_a_break(x, w)
        for mine, theirs in zip(result, expected, strict=True):
            _same(mine, theirs)
    assert result[0].dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")
    assert rt.explain(compiled, x, w).graph_break_count == 1


def test_a_float32_op_of_autocast_is_cast_up_under_the_callers_autocast():
    def loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(F.linear(x, w), torch.zeros(3, 4))

    compiled = rt.compile(loss)
    x, w = _inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result, expected = compiled(x, w), loss(x, w)
    assert expected.dtype == torch.float32
    _same(result, expected)


def test_the_default_dtype_makes_graph_tensors_and_is_guarded():
    """Issue 30's report: ``x.sum() + torch.ones(3)`` stayed float32 after
    ``set_default_dtype(float64)``."""

    def sum_plus_ones(x: torch.Tensor) -> torch.Tensor:
        return x.sum() + torch.ones(3)

    compiled = rt.compile(sum_plus_ones)
    x = torch.randn(4)
    _same(compiled(x), sum_plus_ones(x))
    with _default_dtype(torch.float64):
        result = compiled(x)
        _same(result, sum_plus_ones(x))
        assert result.dtype == torch.float64
        explained = rt.explain(compiled, x)
    assert any("default dtype changed" in reason for reason in explained.recompile_reasons)


def test_the_deterministic_fill_of_empty_tensors_is_honoured():
    """Under ``use_deterministic_algorithms(True)`` eager fills ``torch.empty`` with NaN
    (floats) and the dtype's largest value (integers); the compiled graph does too."""

    def from_empty(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty(3) + x.sum(), torch.empty(2, dtype=torch.int32)

    compiled = rt.compile(from_empty)
    x = torch.randn(4)
    compiled(x)  # uninitialised: any values
    with _deterministic(False):
        result, expected = compiled(x), from_empty(x)
    assert expected[0].isnan().all()
    torch.testing.assert_close(result, expected, equal_nan=True)


def test_matmul_precision_is_read_by_the_aten_matmul_at_every_call():
    """Matmuls run as ATen calls, which read the float32 matmul precision on every call
    as eager does: a change needs no recompile (it is not in the snapshot), and the
    result is eager's to the bit."""

    def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.t()

    compiled = rt.compile(matmul)
    x, w = _inputs()
    _same(compiled(x, w), matmul(x, w))
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        result, expected = compiled(x, w), matmul(x, w)
    finally:
        torch.set_float32_matmul_precision(before)
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    assert len(compiled.cache) == 1


def test_fullgraph_raises_naming_the_state():
    compiled = rt.compile(affine, fullgraph=True)
    with _default_device("meta"), pytest.raises(rt.CompilationError, match="default device"):
        compiled(*_inputs())


def test_explain_names_the_state_it_runs_eagerly_under():
    with _ScaledAdds():
        report = rt.explain(affine, *_inputs())
    assert "TorchFunctionMode (_ScaledAdds)" in report.fallback and not report.graphs


_SWITCH = {"dtype": torch.float32}


def _switch_default_dtype() -> None:
    torch.set_default_dtype(_SWITCH["dtype"])  # a graph break: it runs for real


def _break_then_ones(x: torch.Tensor) -> torch.Tensor:
    doubled = x * 2
    _switch_default_dtype()
    return doubled.sum() + torch.ones(3)


def test_the_segments_after_a_graph_break_are_guarded_too():
    """The state changes at the graph break, inside the call: the entry's guards (checked
    at the call) hold, the segment traced after the break under float32 must not run
    under float64."""
    compiled = rt.compile(_break_then_ones)
    x = torch.randn(4)
    try:
        _SWITCH["dtype"] = torch.float32
        first = compiled(x)
        assert first.dtype == torch.float32
        _SWITCH["dtype"] = torch.float64
        torch.set_default_dtype(torch.float32)
        result = compiled(x)
        torch.set_default_dtype(torch.float32)
        expected = _break_then_ones(x)
    finally:
        torch.set_default_dtype(torch.float32)
    assert len(compiled.cache) == 1  # one entry: the state at the call did not change
    assert rt.explain(compiled, x).graph_break_count == 1
    _same(result, expected)
    assert result.dtype == torch.float64
