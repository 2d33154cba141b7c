"""The native tensor check answers exactly what the Python condition of a static tensor
guard answers (decision 0460), on every pair of expected metadata and value below; it
is used by the generated checks unless turned off, and a machine without a compiler
keeps the Python conditions."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import (
    GUARD_NAMESPACE,
    CompileOptions,
    Guard,
    GuardKind,
    TensorMeta,
    TensorTraits,
    guard_condition,
    native_build,
)
from torchstrata.core.artifacts import CacheSettings
from torchstrata.core.native_build import NativeBuildError
from torchstrata.runtime import native_guards
from torchstrata.runtime.native_guards import TensorChecks, tensor_checks


@pytest.fixture(scope="module")
def checks() -> TensorChecks:
    found = tensor_checks(True)
    if found is None:  # only a machine without a C++ compiler may lack them
        assert not (shutil.which("g++") or shutil.which("c++")), native_guards.unavailable_reason()
        pytest.skip("no C++ compiler: the guards stay Python conditions")
    return found


def _python_check(meta: TensorMeta | TensorTraits) -> Any:
    names: dict[str, Any] = {}

    def constant(value: Any) -> str:
        names[f"_c{len(names)}"] = value
        return f"_c{len(names) - 1}"

    guard = Guard(GuardKind.TENSOR_MATCH, "L['x']", meta)
    source = f"lambda v: bool({guard_condition(guard, 'v', constant)})"
    condition = eval(source, {**GUARD_NAMESPACE, **names})

    def check(value: Any) -> bool:
        try:
            return condition(value)
        except RuntimeError:  # a sparse tensor has no strides: the check fails
            return False

    return check


class Subclass(torch.Tensor):
    pass


def _values() -> dict[str, Any]:
    base = torch.randn(2, 3, 4, 5)
    complex_base = torch.randn(2, 3, dtype=torch.complex64)
    return {
        "contiguous": base,
        "channels_last": base.to(memory_format=torch.channels_last),
        "transposed": base.transpose(1, 2),
        "other shape": torch.randn(2, 3, 4, 6),
        "sliced": torch.randn(2, 3, 4, 10)[..., ::2],
        "float64": base.double(),
        "bfloat16": base.bfloat16(),
        "int64": torch.zeros(2, 3, 4, 5, dtype=torch.int64),
        "requires_grad": base.clone().requires_grad_(),
        "parameter": torch.nn.Parameter(base.clone()),
        "frozen parameter": torch.nn.Parameter(base.clone(), requires_grad=False),
        "negative view": torch._neg_view(base),
        "subclass": base.as_subclass(Subclass),
        "meta device": torch.empty(2, 3, 4, 5, device="meta"),
        "scalar": torch.tensor(1.0),
        "vector": torch.randn(5),
        "complex": complex_base,
        "conjugate": complex_base.conj(),
        "complex negative": torch._neg_view(complex_base),
        "sparse": torch.randn(2, 3).to_sparse(),
        "matrix": torch.randn(2, 3),
        "not a tensor": (2, 3, 4, 5),
        "none": None,
    }


def _metas() -> dict[str, TensorMeta]:
    values = _values()
    metas = {}
    for name in ("contiguous", "channels_last", "transposed", "sliced", "bfloat16", "int64"):
        metas[name] = TensorMeta.from_tensor(values[name])
    metas["requires_grad"] = TensorMeta.from_tensor(values["requires_grad"])
    metas["scalar"] = TensorMeta.from_tensor(values["scalar"])
    metas["complex"] = TensorMeta.from_tensor(values["complex"])
    metas["matrix"] = TensorMeta.from_tensor(values["matrix"])  # the sparse one's sizes
    metas["meta device"] = TensorMeta.from_tensor(values["meta device"])
    return metas


@pytest.mark.parametrize("traits", [False, True], ids=["static", "traits"])
@pytest.mark.parametrize("expected", list(_metas()))
def test_the_native_check_answers_as_the_python_condition(checks, expected, traits):
    meta: TensorMeta | TensorTraits = _metas()[expected]
    if traits:  # a symbolic entry's tensor guard: no sizes, no strides
        meta = TensorTraits.of(meta)
    native, python = checks.check(meta), _python_check(meta)
    assert native is not None
    answers = {name: (native(value), python(value)) for name, value in _values().items()}
    assert all(type(n) is bool for n, _ in answers.values())
    differ = {name: pair for name, pair in answers.items() if pair[0] != pair[1]}
    assert not differ, f"native, python: {differ}"
    assert answers[expected] == (True, True)  # the value it was made from passes


def test_each_condition_is_refused_on_its_own(checks):
    base = torch.randn(4, 6)
    check = checks.check(TensorMeta.from_tensor(base))
    assert check(base) and check(base.clone()) and check(torch.nn.Parameter(base, False))
    refused = {
        "shape": torch.randn(4, 7),
        "rank": torch.randn(4, 6, 1),
        "strides": torch.randn(6, 4).t(),
        "dtype": base.double(),
        "device": torch.empty(4, 6, device="meta"),
        "requires_grad": base.clone().requires_grad_(),
        "negative bit": torch._neg_view(base),
        "type": base.as_subclass(Subclass),
    }
    assert not {name for name, value in refused.items() if check(value)}


def test_traits_leave_sizes_and_strides_to_the_size_check(checks):
    base = torch.randn(4, 6)
    check = checks.check(TensorTraits.of(TensorMeta.from_tensor(base)))
    assert check(torch.randn(3, 5)) and check(torch.randn(6, 4).t()) and check(torch.randn(2))
    assert not check(base.double()) and not check(base.clone().requires_grad_())
    assert not check(torch._neg_view(base)) and not check(base.as_subclass(Subclass))


def test_a_resized_tensor_is_refused(checks):
    buffer = torch.zeros(8)
    check = checks.check(TensorMeta.from_tensor(buffer))
    assert check(buffer)
    buffer.resize_(4)
    assert not check(buffer)
    buffer.resize_(8)
    assert check(buffer)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_tensor_is_checked_by_device_and_index(checks):
    base = torch.randn(4, 6, device="cuda").to(torch.bfloat16)
    meta = TensorMeta.from_tensor(base)
    native, python = checks.check(meta), _python_check(meta)
    assert native is not None
    values = {
        "same": base.clone(),
        "cpu": base.cpu(),
        "meta": torch.empty(4, 6, dtype=torch.bfloat16, device="meta"),
        "float32": base.float(),
        "strides": base.t().contiguous().t(),
        "requires_grad": base.clone().requires_grad_(),
    }
    if torch.cuda.device_count() > 1:
        values["cuda:1"] = base.to("cuda:1")
    answers = {name: (native(value), python(value)) for name, value in values.items()}
    assert all(n == p for n, p in answers.values()), answers
    assert [name for name, (n, _) in answers.items() if n] == ["same"]


def test_metadata_it_does_not_cover_keeps_the_python_condition(checks):
    meta = TensorMeta((2,), torch.float32, device=torch.device("cuda"), strides=(1,))
    assert checks.check(meta) is None  # no index: a device ``==`` never matches


def _scaled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w + 1


def _entry_guards(compiled: Any) -> rt.GuardSet:
    (entry,) = compiled.cache.entries
    return entry.guards


def test_compiled_entries_check_tensors_natively_unless_turned_off(checks):
    x, w = torch.randn(4, 8), torch.randn(8)
    native = rt.compile(_scaled, codegen="eager")
    python = rt.compile(_scaled, codegen="eager", options=CompileOptions(native_guards=False))
    for compiled in (native, python):
        torch.testing.assert_close(compiled(x, w), _scaled(x, w))
    assert _entry_guards(native).native_count == 3  # two tensors and the global state
    assert _entry_guards(python).native_count == 0
    assert "_c2(_v1)" in (_entry_guards(native).fetch_args.__doc__ or "")
    for compiled in (native, python):  # a changed layout recompiles, either way
        y = torch.randn(8, 4).t()
        torch.testing.assert_close(compiled(y, w), _scaled(y, w))
        assert len(compiled.cache.entries) == 2


def test_without_a_compiler_the_guards_stay_python(monkeypatch, tmp_path):
    monkeypatch.setattr(native_guards, "LOADED", native_guards.LOADED.fresh())
    monkeypatch.setenv("CXX", "no-such-compiler-torchstrata")
    assert tensor_checks(True, str(tmp_path)) is None
    assert "no-such-compiler" in (native_guards.unavailable_reason() or "")
    assert tensor_checks(False) is None


def test_a_failed_build_is_not_tried_again(monkeypatch, tmp_path):
    builds = []

    def fail(extension, command, paths):
        builds.append(command)
        raise NativeBuildError("compiling failed: no Python.h")

    monkeypatch.setattr(native_build, "compile_extension", fail)
    settings = CacheSettings.resolve(str(tmp_path))
    for _ in range(2):
        with pytest.raises(native_guards.NativeGuardsUnavailable, match=r"no Python\.h"):
            native_guards.load_module(settings)
    assert len(builds) == 1  # the second process (call) read the recorded failure


class _SeeNothing(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _SeeNothingDispatch(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _states() -> dict[str, Any]:
    """A context manager factory per global state a snapshot tells apart."""
    import contextlib

    @contextlib.contextmanager
    def setting(set_value: Any, get_value: Any, value: Any) -> Any:
        before = get_value()
        set_value(value)
        try:
            yield
        finally:
            set_value(before)

    return {
        "common": contextlib.nullcontext,
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
        "autocast cpu": lambda: torch.autocast("cpu"),
        "autocast cpu fp16": lambda: torch.autocast("cpu", dtype=torch.float16),
        "default float64": lambda: setting(
            torch.set_default_dtype, torch.get_default_dtype, torch.float64
        ),
        "deterministic": lambda: setting(
            torch.use_deterministic_algorithms, torch.are_deterministic_algorithms_enabled, True
        ),
        "deterministic warn": lambda: setting(
            lambda on: torch.use_deterministic_algorithms(on, warn_only=on),
            torch.are_deterministic_algorithms_enabled,
            True,
        ),
        "no fill": lambda: setting(
            lambda on: setattr(torch.utils.deterministic, "fill_uninitialized_memory", on),
            lambda: torch.utils.deterministic.fill_uninitialized_memory,
            False,
        ),
        "threads + 1": lambda: setting(
            torch.set_num_threads, torch.get_num_threads, torch.get_num_threads() + 1
        ),
        "function mode": _SeeNothing,
        "dispatch mode": _SeeNothingDispatch,
    }


def test_the_global_state_number_tells_states_apart_as_the_snapshot_does(checks):
    """For every pair (compiled under one state, called under another) the native global
    state check answers what comparing the Python snapshots answers; it is made only for
    the common states, and a guard compiled under another keeps the tuple."""
    from torchstrata.core import global_state

    assert checks.state_checked
    states = _states()
    for expected_name, expected_state in states.items():
        with expected_state():
            snapshot = global_state()
            native = checks.state_check(snapshot)
        uncommon = expected_name.startswith(("autocast", "function", "dispatch"))
        assert (native is None) == uncommon, expected_name
        assert checks.state_check(snapshot if uncommon else (*snapshot[:-1], -5)) is None
        if native is None:
            continue
        same_state, key = native
        for actual_name, actual_state in states.items():
            with actual_state():
                assert same_state(key) == (global_state() == snapshot), (expected_name, actual_name)


def test_compiled_entries_check_the_global_state_natively(checks):
    def f(x):
        return x * 2 + 1

    compiled = rt.compile(f)
    x = torch.randn(4)
    compiled(x)
    guards = _entry_guards(compiled)
    assert guards.native_count == 2  # the tensor and the state
    assert "global_torch_state()" not in guards.args_source
    with torch.no_grad():
        assert torch.equal(compiled(x), f(x))
    assert "grad mode" in compiled.recompile_reasons[-1]
    assert len(compiled.cache) == 2
    compiled(x)
    with torch.no_grad():
        compiled(x)
    assert len(compiled.cache) == 2
    off = rt.compile(f, options=CompileOptions(native_guards=False))
    off(x)
    assert "global_torch_state()" in _entry_guards(off).args_source


def test_the_last_layout_checks_its_tensors_traits_in_the_same_call(checks):
    """Folded tensor guards (decision 0515): the remembered route comes back only where
    each tensor's layout is the last one and its traits check holds."""
    traits = (checks.check(TensorTraits.of(TensorMeta((2, 3), torch.float32))), None)
    last = checks.last_layout(2, traits)
    x, other = torch.zeros(2, 3), torch.zeros(3, dtype=torch.int64)
    last.remember(("route",), x, other)
    assert last(torch.ones(2, 3), torch.ones(3, dtype=torch.int64)) == ("route",)
    assert last(torch.zeros(2, 3, dtype=torch.float64), other) is None  # x's dtype
    assert last(torch.zeros(2, 3, requires_grad=True), other) is None
    assert last(torch.nn.Parameter(torch.zeros(2, 3)), other) is None
    assert last(x, torch.zeros(3)) == ("route",)  # no traits for the second: layout only
    with pytest.raises(ValueError):
        checks.last_layout(2, traits[:1])
    with pytest.raises(TypeError):
        checks.last_layout(1, ("not a check",))


def test_a_symbolic_entry_refuses_same_layout_tensors_of_other_traits(checks):
    def f(x, w):
        return x * w + 1

    compiled = rt.compile(f, dynamic=True)
    w = torch.randn(8)
    for rows in (4, 5, 4):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x, w), f(x, w))
    (entry,) = compiled.cache.entries
    source = entry.guards.fetch_args.__doc__ or ""
    assert entry.guards.routed and source.count("(_v0)") == 1  # only on the slow path
    # the last layout again, other traits: each fails the entry and compiles another
    for x in (torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, requires_grad=True)):
        weight = w.to(x.dtype)
        torch.testing.assert_close(compiled(x, weight), f(x, weight))
        torch.testing.assert_close(compiled(x, weight), f(x, weight))
    assert len(compiled.cache.entries) == 3
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(x, w), f(x, w))
    assert len(compiled.cache.entries) == 3


@pytest.mark.parametrize("state", ["no_grad", "inference_mode"])
def test_checks_loaded_under_no_grad_still_compare_states_natively(checks, tmp_path, state):
    """A process whose first compile runs under ``torch.no_grad()`` (or inference mode)
    loads the extension there: its self-test of the state number runs from the common
    state all the same, and passes."""
    context = torch.no_grad() if state == "no_grad" else torch.inference_mode()
    with context:
        module = native_guards.load_module(CacheSettings.resolve(str(tmp_path)))
    assert getattr(module, "state_checked", False)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
