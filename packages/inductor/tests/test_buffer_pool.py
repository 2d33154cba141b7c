"""Large CPU scratch buffers kept between launcher calls (``launch.buffer_pool``, 0315):
taken where they are allocated, put back where their last name is released; results
stay eager's across calls, threads and packages, and the switch turns it off."""

from __future__ import annotations

import json
import threading

import torch

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
from torchstrata.inductor.launch.buffer_pool import POOL_MIN_BYTES, pool_buffers, poolable

BIG = ((512, 1024), (1024, 1), torch.float32, "cpu")  # 2 MB
SMALL = ((4, 8), (8, 1), torch.float32, "cpu")


def _alloc(name: str, shape=(512, 1024), strides=(1024, 1)) -> str:
    return f"    {name} = empty_strided({shape!r}, {strides!r}, dtype=dtype1, device=device2)"


def test_a_large_scratch_buffer_is_taken_from_its_pool_and_put_back_at_its_last_release():
    lines = [
        "def launch(buf_x, buf_w):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    buf_t = buf_a.as_strided((1024, 512), (1, 1024))  # a view, no copy",
        "    buf_m = extern3(buf_t, buf_w)  # aten.mm.default",
        "    del buf_t",
        "    buf_n = extern3(buf_a, buf_w)  # aten.mm.default",
        "    del buf_a",
        "    return (buf_m, buf_n, )",
    ]
    out = pool_buffers(lines, {"buf_a": BIG}, {"buf_t": "buf_a"})
    assert out == [
        "def launch(buf_x, buf_w):",
        "    buf_a = _take(_pool0)",
        "    if buf_a is None:",
        "    " + _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    buf_t = buf_a.as_strided((1024, 512), (1, 1024))  # a view, no copy",
        "    buf_m = extern3(buf_t, buf_w)  # aten.mm.default",
        "    del buf_t",
        "    buf_n = extern3(buf_a, buf_w)  # aten.mm.default",
        "    _pool0.append(buf_a)",
        "    del buf_a",
        "    return (buf_m, buf_n, )",
    ]


def test_a_buffer_handed_on_goes_back_under_its_last_name():
    lines = [
        "def launch(buf_x):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    buf_c = buf_a  # reused",
        "    del buf_a",
        "    kernel2(buf_c.data_ptr())",
        "    del buf_c",
    ]
    out = pool_buffers(lines, {"buf_a": BIG, "buf_c": BIG})
    assert out[-3:] == ["    kernel2(buf_c.data_ptr())", "    _pool0.append(buf_c)", "    del buf_c"]
    assert out.count("    buf_a = _take(_pool0)") == 1


def test_a_buffer_outlived_by_its_view_goes_back_with_the_view():
    lines = [
        "def launch(buf_x, buf_w):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    buf_t = buf_a.as_strided((1024, 512), (1, 1024))  # a view, no copy",
        "    del buf_a, buf_x",
        "    buf_m = extern3(buf_t, buf_w)  # aten.mm.default",
        "    del buf_t",
    ]
    out = pool_buffers(lines, {"buf_a": BIG}, {"buf_t": "buf_a"})
    assert out[5:] == [
        "    buf_t = buf_a.as_strided((1024, 512), (1, 1024))  # a view, no copy",
        "    del buf_x",
        "    buf_m = extern3(buf_t, buf_w)  # aten.mm.default",
        "    _pool0.append(buf_a)",
        "    del buf_t, buf_a",
    ]


def test_small_or_not_reusable_buffers_are_left_alone():
    lines = [
        "def launch(buf_x):",
        _alloc("buf_a"),
        "    kernel0(buf_x.data_ptr(), buf_a.data_ptr())",
        "    del buf_a",
    ]
    assert pool_buffers(lines, {}) == lines
    small = [line.replace("(512, 1024), (1024, 1)", "(4, 8), (8, 1)") for line in lines]
    assert pool_buffers(small, {"buf_a": SMALL}) == small


def test_only_static_cpu_buffers_of_a_megabyte_are_pooled():
    assert poolable(BIG)
    assert not poolable(SMALL)
    assert not poolable(((512, 1024), (1024, 1), torch.float32, "cuda:0"))
    assert not poolable(((512, object()), (1024, 1), torch.float32, "cpu"))
    assert not poolable(((0, 1 << 20), (1 << 20, 1), torch.float32, "cpu"))
    rows = POOL_MIN_BYTES // 4 // 1024
    assert poolable(((rows, 1024), (1024, 1), torch.float32, "cpu"))
    assert not poolable(((rows - 1, 1024), (1024, 1), torch.float32, "cpu"))


def _graph():
    """``t = tanh(x) * 2`` (a 2 MB kernel store), read by two matmuls and released."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((512, 1024), torch.float32))
    w = b.input("w", TensorMeta((1024, 8), torch.float32))
    v = b.input("v", TensorMeta((512, 8), torch.float32))
    t = b.call(prim("mul"), b.call(prim("tanh"), x), 2.0)
    m = b.call(aten("mm.default"), t, w)
    n = b.call(aten("mm.default"), b.call(prim("permute"), t, (1, 0)), v)
    return b.build([b.call(prim("add"), m, 1.0), b.call(prim("mul"), n, 3.0)])


def _eager(x, w, v):
    t = torch.tanh(x) * 2.0
    return t @ w + 1.0, (t.t() @ v) * 3.0


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(512, 1024, generator=g), torch.randn(1024, 8, generator=g), torch.randn(
        512, 8, generator=g
    )


def test_a_compiled_launcher_reuses_its_scratch_buffer_across_calls(ind):
    compiled = compile_graph(_graph(), "cpu", CompileOptions(cache_dir=ind.cache_dir))
    assert "= _take(_pool0)" in compiled.launcher_source
    pool = compiled.fn.__globals__["_pool0"]
    addresses = set()
    for seed in range(3):
        args = _inputs(seed)
        for got, want in zip(compiled(*args), _eager(*args), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert len(pool) == 1
        addresses.add(pool[0].data_ptr())
    assert len(addresses) == 1  # the same buffer every call


def test_concurrent_calls_each_get_a_buffer_and_eager_results(ind):
    compiled = compile_graph(_graph(), "cpu", CompileOptions(cache_dir=ind.cache_dir))
    failures: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for step in range(10):
                args = _inputs(seed * 100 + step)
                for got, want in zip(compiled(*args), _eager(*args), strict=True):
                    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert 1 <= len(compiled.fn.__globals__["_pool0"]) <= 3


def test_the_switch_off_allocates_every_call(ind):
    options = CompileOptions(
        cache_dir=ind.cache_dir, inductor=InductorOptions(buffer_pool=False)
    )
    compiled = compile_graph(_graph(), "cpu", options)
    assert "_take(" not in compiled.launcher_source
    args = _inputs(0)
    for got, want in zip(compiled(*args), _eager(*args), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_loaded_package_has_pools_of_its_own(ind):
    options = CompileOptions(cache_dir=ind.cache_dir)
    compiled = compile_graph(_graph(), "cpu", options)
    assert compiled.package is not None
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    loaded = manager.hook.torchstrata_codegen_load(
        package=json.loads(json.dumps(compiled.package)),
        device=torch.device("cpu"),
        options=options,
    )
    assert loaded.launcher_source == compiled.launcher_source
    for seed in range(2):
        args = _inputs(seed)
        for got, want in zip(loaded(*args), _eager(*args), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert loaded.fn.__globals__["_pool0"] is not compiled.fn.__globals__["_pool0"]
