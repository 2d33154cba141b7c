"""A compiled graph saved as plain data (its package) and loaded back without scheduling."""

from __future__ import annotations

import json

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    create_plugin_manager,
    prim,
)
from torchstrata.inductor import compile_graph, plugin
from torchstrata.inductor.launch.package import FORMAT, UnsaveableError, encode_value


def _graph():
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((5, 6), torch.float32))
    w = b.input("w", TensorMeta((6, 4), torch.float32))
    pair = b.call(aten("max.dim"), b.call(prim("mul"), x, 3.0), 1)
    mm = b.call(aten("mm.default"), b.call(prim("exp"), x), w)
    return b.build([b.call(prim("add"), b.getitem(pair, 0), 1.0), b.getitem(pair, 1), mm])


def test_a_package_is_json_and_loads_the_same_launcher(tmp_path):
    options = CompileOptions(cache_dir=str(tmp_path))
    compiled = compile_graph(_graph(), "cpu", options)
    assert compiled.package is not None and compiled.package["format"] == FORMAT
    text = json.dumps(compiled.package)
    assert str(tmp_path) not in text  # relocatable: no path of the cache inside
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    loaded = manager.hook.torchstrata_codegen_load(
        package=json.loads(text), device=torch.device("cpu"), options=options
    )
    assert loaded.launcher_source == compiled.launcher_source
    assert [k.source for k in loaded.kernels] == [k.source for k in compiled.kernels]
    assert loaded.eager_ops == compiled.eager_ops
    x, w = torch.randn(5, 6), torch.randn(6, 4)
    for got, want in zip(loaded(x, w), compiled(x, w), strict=True):
        torch.testing.assert_close(got, want)


def test_a_package_of_another_format_is_left_to_other_plugins(tmp_path):
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    answer = manager.hook.torchstrata_codegen_load(
        package={"format": "someone-else/1"},
        device=torch.device("cpu"),
        options=CompileOptions(cache_dir=str(tmp_path)),
    )
    assert answer is None


@pytest.mark.parametrize("value", [torch.ones(2), object(), lambda: None])
def test_globals_without_a_plain_record_are_refused(value):
    with pytest.raises(UnsaveableError):
        encode_value(value, {})


def _softmax_graph(device="cpu"):
    """A row softmax (a persistent reduction kernel), a pointwise kernel and an extern mm."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((6, 40), torch.float32, torch.device(device)))
    w = b.input("w", TensorMeta((40, 3), torch.float32, torch.device(device)))
    shape = (6, 40)
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, (1,)), shape, (0,))
    e = b.call(prim("exp"), b.call(prim("sub"), x, peak))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), e, (1,)), shape, (0,))
    soft = b.call(prim("div"), e, total)
    mm = b.call(aten("mm.default"), b.call(prim("tanh"), x), w)
    return b.build([soft, b.call(prim("mul"), mm, 2.0)])


#: The interpreter on CPU tensors, compiled kernels on a GPU.
TRITON_DEVICES = [
    pytest.param("cpu", marks=pytest.mark.triton),
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_a_triton_package_loads_its_kernels_without_generating_code(tmp_path, monkeypatch, device):
    """Loaded in a fresh process's state (no kernel module imported), a package's kernels
    come from the store: nothing is generated and, on a GPU, Triton writes no binary
    (each is read from the verified store)."""
    from torchstrata.inductor.codegen.triton import backend as triton_backend
    from torchstrata.inductor.codegen.triton.verified_cache import VerifiedTritonCache

    options = CompileOptions(cache_dir=str(tmp_path), codegen="triton")
    compiled = compile_graph(_softmax_graph(device), device, options)
    x = torch.randn(6, 40, device=device)
    w = torch.randn(40, 3, device=device)
    expected = compiled(x, w)  # the first call: tuned, compiled, stored
    assert compiled.package is not None and compiled.package["backend"] == "triton"
    assert len(compiled.package["kernels"]) == len(compiled.kernels) >= 2
    text = json.dumps(compiled.package)
    assert str(tmp_path) not in text

    # a fresh process's state: no module imported, and code generation would fail
    monkeypatch.setattr(triton_backend, "_MODULES", {})
    generated = []

    def no_generation(self, kernel, clusters):
        generated.append(kernel.name)
        raise AssertionError("Triton code generated while loading a package")

    monkeypatch.setattr(triton_backend.TritonBackend, "generate", no_generation)
    binaries = []
    put = VerifiedTritonCache.put

    def counting_put(self, data, filename, binary=True):
        binaries.append(filename)
        return put(self, data, filename, binary)

    monkeypatch.setattr(VerifiedTritonCache, "put", counting_put)
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    loaded = manager.hook.torchstrata_codegen_load(
        package=json.loads(text), device=torch.device(device), options=options
    )
    assert generated == []
    assert triton_backend._MODULES  # its modules imported again, from the store
    assert loaded.launcher_source == compiled.launcher_source
    assert [k.source for k in loaded.kernels] == [k.source for k in compiled.kernels]
    assert [k.path for k in loaded.kernels] == [k.path for k in compiled.kernels]
    for got, want in zip(loaded(x, w), expected, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(loaded(x, w)[0], torch.softmax(x, 1))
    assert binaries == []


@pytest.mark.triton
def test_a_triton_record_with_a_missing_module_or_scratch_is_refused(tmp_path):
    from torchstrata.inductor.launch.triton_records import from_json

    options = CompileOptions(cache_dir=str(tmp_path), codegen="triton")
    compiled = compile_graph(_softmax_graph(), "cpu", options)
    record = compiled.package["kernels"][0]
    assert from_json(record).configs  # the record as written reads back
    with pytest.raises(ValueError, match="no module for the launch configuration"):
        from_json({**record, "variants": []})
    split = {**record["configs"][0], "split": 4}
    variant = [split["persistent"], split["group"], 4, split["cluster"]]
    variants = [*record["variants"], [variant, record["variants"][0][1]]]
    with pytest.raises(ValueError, match="no scratch sizes"):
        from_json({**record, "variants": variants, "configs": [split]})
    with pytest.raises(ValueError, match="not a Triton kernel record"):
        from_json({key: value for key, value in record.items() if key != "rows"})
    with pytest.raises(ValueError, match="launch configuration of ints"):
        from_json({**record, "configs": [{**record["configs"][0], "xblock": "8"}]})


@pytest.mark.triton
def test_a_triton_package_whose_modules_were_evicted_writes_them_again(tmp_path, monkeypatch):
    import shutil

    from torchstrata.core.artifacts import LAYOUT
    from torchstrata.inductor.codegen.triton import backend as triton_backend

    options = CompileOptions(cache_dir=str(tmp_path), codegen="triton")
    compiled = compile_graph(_softmax_graph(), "cpu", options)
    modules = tmp_path / LAYOUT / triton_backend.CACHE_NAMESPACE
    count = len(list(modules.rglob("*.py")))
    assert count >= 2
    shutil.rmtree(modules)
    monkeypatch.setattr(triton_backend, "_MODULES", {})
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    loaded = manager.hook.torchstrata_codegen_load(
        package=compiled.package, device=torch.device("cpu"), options=options
    )
    assert len(list(modules.rglob("*.py"))) == count
    x, w = torch.randn(6, 40), torch.randn(40, 3)
    for got, want in zip(loaded(x, w), compiled(x, w), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.triton
def test_a_symbolic_triton_record_reads_back_and_checks_its_size_expressions(tmp_path):
    """A kernel of a symbolic lowering is recorded with its sizes as expressions over
    its symbols (decision 0450): read back, it loads as a sized kernel; an expression
    that does not evaluate to a size at its hints is refused."""
    from torchstrata.inductor.codegen.triton.sized_launch import SizedKernel
    from torchstrata.inductor.launch.triton_records import from_json

    options = CompileOptions(cache_dir=str(tmp_path), codegen="triton")
    record = compile_graph(_softmax_graph(), "cpu", options).package["kernels"][0]
    symbolic = {**record, "symbols": ["s0"], "hints": [6], "rows": "s0"}
    read = from_json(symbolic)
    assert (read.rows, read.symbols, read.hints) == ("s0", ("s0",), (6,))
    from torchstrata.inductor.codegen.registry import registered_backends

    manager = create_plugin_manager(load_entrypoints=False, plugins=[("inductor", plugin)])
    backend = registered_backends(manager)["triton"].create(torch.device("cpu"), options)
    (handle,), _ = backend.load_kernels([symbolic], options)
    assert isinstance(handle, SizedKernel) and handle.hints == (6,)
    for bad in (
        {"rows": "s0 +"},
        {"rows": "s1"},
        {"rows": "s0 - 7"},
        {"hints": [6, 7]},
        {"symbols": ["s0; x"]},
    ):
        with pytest.raises(ValueError):
            from_json({**symbolic, **bad})
