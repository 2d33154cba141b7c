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
