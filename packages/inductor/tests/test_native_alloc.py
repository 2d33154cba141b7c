"""The launcher's native ``empty_strided`` (decision 0510) makes the tensors that
``torch.empty_strided`` makes, takes torch's own path (with the same arguments) for
everything unusual, and is what compiled launchers call unless turned off."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    InductorOptions,
    Level,
    TensorMeta,
    aten,
    create_plugin_manager,
    prim,
)
from torchstrata.inductor import compile_graph, plugin
from torchstrata.inductor.launch import native_alloc
from torchstrata.inductor.launch.native_alloc import interned_device, properties

CPU = interned_device(torch.device("cpu"))
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
]
LAYOUTS = [
    ((8,), (1,)),
    ((3, 4), (4, 1)),
    ((3, 4), (1, 3)),  # transposed
    ((0,), (1,)),
    ((2, 0, 3), (0, 3, 1)),
    ((), ()),
    ((5, 2), (4, 1)),  # a gap after each row: a larger storage
    ((6,), (0,)),  # a broadcast stride
    ((2, 3, 4, 5, 6, 7, 8, 9, 2), (1,) * 9),  # more dims than the inline buffer holds
]


@pytest.fixture(scope="module")
def module() -> Any:
    found = native_alloc.native_module()
    if found is None:  # only a machine without a C++ compiler may lack it
        assert not (shutil.which("g++") or shutil.which("c++")), native_alloc.unavailable_reason()
        pytest.skip("no C++ compiler: launchers call torch.empty_strided")
    found.empty_strided((1,), (1,), dtype=torch.float32, device=CPU)  # CPU remembered
    return found


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Any] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


class _Functions(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls.append((func, args, dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("inference", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_its_tensors_are_torchs(module, dtype, inference):
    before = module.torch_calls()
    with torch.inference_mode(inference):
        for sizes, strides in LAYOUTS:
            ours = module.empty_strided(sizes, strides, dtype=dtype, device=CPU)
            theirs = torch.empty_strided(sizes, strides, dtype=dtype, device=CPU)
            assert properties(ours) == properties(theirs), (sizes, strides)
            assert ours.is_inference() is inference
            ours.fill_(1)  # a tensor of its own, writable
    assert module.torch_calls() == before  # every one allocated natively


def test_the_dtypes_it_allocates(module):
    dtypes = native_alloc.registered_dtypes(module)
    assert dtypes[: len(native_alloc.COMMON_DTYPES)] == native_alloc.COMMON_DTYPES
    assert set(DTYPES) <= set(dtypes) and torch.complex32 not in dtypes
    assert len(set(dtypes)) == len(dtypes)


def test_keywords_in_either_order_and_no_grad(module):
    before = module.torch_calls()
    with torch.no_grad():
        ours = module.empty_strided((2, 3), (3, 1), device=CPU, dtype=torch.float16)
    assert properties(ours) == properties(torch.empty_strided((2, 3), (3, 1), dtype=torch.float16))
    assert module.torch_calls() == before


def _torchs_path(module: Any, *args: Any, **kwargs: Any) -> torch.Tensor | None:
    """``module.empty_strided(*args, **kwargs)``, asserted to take torch's path and give
    torch's tensor, or raise torch's error (then None)."""
    try:
        theirs = torch.empty_strided(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the same error is expected of ours
        before = module.torch_calls()
        with pytest.raises(type(error)) as ours:
            module.empty_strided(*args, **kwargs)
        # the first line: a c10 error goes on with the addresses of its C++ frames
        assert str(ours.value).splitlines()[0] == str(error).splitlines()[0]
        assert module.torch_calls() == before + 1
        return None
    before = module.torch_calls()
    result = module.empty_strided(*args, **kwargs)
    assert module.torch_calls() == before + 1
    assert properties(result) == properties(theirs)
    return result


class _Size(int):
    pass


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (([2, 3], (3, 1)), {}),  # a list of sizes
        ((torch.Size([2, 3]), (3, 1)), {}),
        (((2, 3), [3, 1]), {}),
        (((True, 3), (3, 1)), {"dtype": torch.float32, "device": CPU}),  # torch refuses
        (((_Size(2), 3), (3, 1)), {"dtype": torch.float32, "device": CPU}),
        (((2, 3), (3, 1)), {"dtype": torch.float32}),  # no device
        (((2, 3), (3, 1), torch.float32), {"device": CPU}),
        (((2, 3), (3, 1)), {"dtype": None, "device": CPU}),
        (((2, 3), (3, 1)), {"dtype": torch.complex32, "device": CPU}),  # never registered
        (((2, 3), (3, 1)), {"dtype": torch.float32, "device": "cpu"}),  # a str
        (((2, 3), (3, 1)), {"dtype": torch.float32, "device": torch.device("meta")}),
        (((2, 3), (3, 1)), {"dtype": torch.float32, "device": CPU, "requires_grad": True}),
        (((2, 3), (3, 1)), {"dtype": torch.float32, "layout": torch.strided}),
    ],
)
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_other_calls_take_torchs_path(module, args, kwargs):
    _torchs_path(module, *args, **kwargs)


def test_a_new_device_object_takes_torchs_path_once(module):
    device = torch.device("cpu")  # another object than CPU's
    _torchs_path(module, (4,), (1,), dtype=torch.float32, device=device)
    before = module.torch_calls()
    module.empty_strided((4,), (1,), dtype=torch.float32, device=device)
    assert module.torch_calls() == before
    meta = torch.device("meta")
    for _ in range(2):  # remembered as a device it never allocates on
        tensor = _torchs_path(module, (4,), (1,), dtype=torch.int8, device=meta)
        assert tensor is not None and tensor.is_meta


def test_a_dispatch_mode_sees_the_allocation(module):
    with _Seen() as seen:
        _torchs_path(module, (4, 2), (2, 1), dtype=torch.float32, device=CPU)
    assert seen.ops.count(torch.ops.aten.empty_strided.default) == 2  # ours and torch's


def test_a_function_mode_sees_torch_empty_strided_with_the_same_arguments(module):
    with _Functions() as mode:
        module.empty_strided((4, 2), (1, 4), dtype=torch.bfloat16, device=CPU)
    ((func, args, kwargs),) = mode.calls
    assert func is torch.empty_strided
    assert args == ((4, 2), (1, 4))
    assert kwargs == {"dtype": torch.bfloat16, "device": CPU}


def test_under_vmap_an_included_dispatch_key_takes_torchs_path(module):
    def add_fresh(x: torch.Tensor) -> torch.Tensor:
        return module.empty_strided((2,), (1,), dtype=torch.float32, device=CPU).fill_(1) + x

    before = module.torch_calls()
    assert torch.equal(torch.vmap(add_fresh)(torch.zeros(3, 2)), torch.ones(3, 2))
    assert module.torch_calls() == before + 1


def test_deterministic_algorithms_fill_as_eager_does(module):
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    try:
        torch.utils.deterministic.fill_uninitialized_memory = True
        floats = _torchs_path(module, (3, 2), (1, 3), dtype=torch.float32, device=CPU)
        assert floats is not None and floats.isnan().all()
        ints = _torchs_path(module, (5,), (1,), dtype=torch.int64, device=CPU)
        assert ints is not None and (ints == torch.iinfo(torch.int64).max).all()
        torch.utils.deterministic.fill_uninitialized_memory = False
        before = module.torch_calls()
        module.empty_strided((3,), (1,), dtype=torch.float32, device=CPU)
        assert module.torch_calls() == before  # nothing to fill: the native path
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = fill


@pytest.mark.parametrize(
    ("sizes", "strides"),
    [((-1, 2), (2, 1)), ((2, 3), (1,)), ((2**70,), (1,)), ((2, -3), (1, 2))],
)
def test_errors_read_as_torchs(module, sizes, strides):
    assert _torchs_path(module, sizes, strides, dtype=torch.float32, device=CPU) is None


def _graph():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((8,), torch.float32))
    y = b.input("y", TensorMeta((6, 4), torch.float32))
    tiny = b.call(prim("mul"), b.call(prim("add"), x, 1.0), 2.0)
    negated_t = b.call(prim("permute"), b.call(prim("neg"), y), (1, 0))
    mm = b.call(aten("mm.default"), b.call(prim("exp"), y), negated_t)
    return b.build([tiny, b.call(prim("lt"), x, 0.0), mm])


def _expected(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return ((x + 1) * 2, x < 0, torch.exp(y) @ (-y).t())


@pytest.mark.parametrize("native", [True, False])
def test_compiled_launchers_allocate_natively_unless_turned_off(module, tmp_path, native):
    options = CompileOptions(cache_dir=str(tmp_path), inductor=InductorOptions(native_alloc=native))
    compiled = compile_graph(_graph(), "cpu", options)
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    loaded = manager.hook.torchstrata_codegen_load(
        package=compiled.package, device=torch.device("cpu"), options=options
    )
    wanted = module.empty_strided if native else torch.empty_strided
    x, y = torch.randn(8), torch.randn(6, 4)
    for graph in (compiled, loaded):
        assert graph.fn.__globals__["empty_strided"] is wanted
        assert "empty_strided(" in graph.launcher_source
        graph(x, y)  # a device object's first call may take torch's path
        before = module.torch_calls()
        with torch.inference_mode(False):
            results = graph(x, y)
        for got, want in zip(results, _expected(x, y), strict=True):
            assert properties(got) == properties(want)
            torch.testing.assert_close(got, want)
        assert module.torch_calls() == before  # never torch's path, on or off
        with torch.inference_mode():
            assert all(t.is_inference() for t in graph(x, y))


def test_without_a_compiler_launchers_call_torch(monkeypatch, tmp_path):
    monkeypatch.setattr(native_alloc, "LOADED", native_alloc.LOADED.fresh())
    monkeypatch.setenv("CXX", "no-such-compiler-torchstrata")
    options = CompileOptions(cache_dir=str(tmp_path))
    assert native_alloc.launcher_allocator(options) is torch.empty_strided
    assert "no-such-compiler" in (native_alloc.unavailable_reason() or "")
    monkeypatch.delenv("CXX")  # tried once a process: not again, though it would build now
    assert native_alloc.launcher_allocator(options) is torch.empty_strided


def test_a_failed_self_test_keeps_torch(monkeypatch, tmp_path):
    monkeypatch.setattr(native_alloc, "LOADED", native_alloc.LOADED.fresh())
    monkeypatch.setattr(native_alloc, "SELF_TEST_LAYOUTS", (((2,), (1,)),))
    monkeypatch.setattr(
        native_alloc, "properties", lambda tensor: (tensor.dtype, tensor.data_ptr())
    )  # two tensors never share an address: the comparison fails
    assert native_alloc.native_module(str(tmp_path)) is None
    assert "self-test" in (native_alloc.unavailable_reason() or "")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_are_torchs(module):
    assert module.has_cuda()
    zero = interned_device(torch.device("cuda", 0))
    native_alloc.verify(module, zero)  # every dtype and layout, in and out of inference
    before = module.torch_calls()
    ours = module.empty_strided((64, 3), (1, 64), dtype=torch.bfloat16, device=zero)
    assert module.torch_calls() == before and ours.device == zero
    # no index: the current device, through torch
    current = _torchs_path(module, (4,), (1,), dtype=torch.float32, device=torch.device("cuda"))
    assert current is not None and current.device.index == torch.cuda.current_device()
    # the caching allocator's blocks belong to the stream current at allocation
    side = torch.cuda.Stream()
    for empty in (module.empty_strided, torch.empty_strided):
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            block = empty((1 << 20,), (1,), dtype=torch.float32, device=zero)
        address = block.data_ptr()
        del block
        other = empty((1 << 20,), (1,), dtype=torch.float32, device=zero)
        with torch.cuda.stream(side):
            again = empty((1 << 20,), (1,), dtype=torch.float32, device=zero)
        assert other.data_ptr() != address and again.data_ptr() == address, empty
        del other, again
    if torch.cuda.device_count() > 1:
        one = interned_device(torch.device("cuda", 1))
        module.empty_strided((2,), (1,), dtype=torch.float32, device=one)  # remembered
        with torch.cuda.device(0):
            tensor = module.empty_strided((2,), (1,), dtype=torch.float32, device=one)
            assert tensor.device == one and torch.cuda.current_device() == 0
