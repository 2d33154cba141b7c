"""Backends registered through the inductor's hookspec, selected by name."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    NO_CONTRACT,
    CompileOptions,
    create_plugin_manager,
    hookimpl,
    interpret,
)
from torchstrata.inductor import BackendSpec, CodegenError, plugin
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.registry import backend_table, registered_backends


class _Renamed(CppBackend):
    name = "renamed-cpp"


class _RenamedPlugin:
    @hookimpl
    def torchstrata_inductor_backends(self):
        return [BackendSpec("renamed-cpp", lambda device, options: _Renamed())]


def _manager(*extra):
    plugins = [("inductor", plugin), *((f"extra{i}", p) for i, p in enumerate(extra))]
    return create_plugin_manager(load_entrypoints=False, plugins=plugins)


def test_the_builtins_are_registered_through_the_hook():
    assert sorted(registered_backends(_manager())) == ["cpp", "eager", "triton"]


def test_a_plugin_backend_is_selected_by_name(ind):
    manager = _manager(_RenamedPlugin())
    assert "renamed-cpp" in registered_backends(manager)
    graph = ind.demo_graph(4, 8)
    compiled = manager.hook.torchstrata_codegen(
        graph=graph,
        device=torch.device("cpu"),
        options=CompileOptions(codegen="renamed-cpp"),
        contract=NO_CONTRACT,
    )
    assert {kernel.backend for kernel in compiled.kernels} == {"renamed-cpp"}
    x, b = torch.randn(4, 8), torch.randn(8)
    torch.testing.assert_close(compiled(x, b)[0], interpret(graph, x, b)[0])


def test_a_plugin_registered_later_still_gets_the_hookspecs():
    manager = _manager()
    manager.register(_RenamedPlugin(), name="late")
    assert "renamed-cpp" in registered_backends(manager)


def test_two_backends_of_one_name_are_an_error():
    spec = BackendSpec("cpp", lambda device, options: None)
    with pytest.raises(CodegenError, match="two inductor backends are named 'cpp'"):
        registered_backends(_manager(_Spec(spec)))


def test_two_defaults_for_one_device_are_an_error():
    first = BackendSpec("a", lambda device, options: None, default_for=("cpu",))
    second = BackendSpec("b", lambda device, options: None, default_for=("cpu",))
    with pytest.raises(CodegenError, match="'a' and 'b' both claim"):
        backend_table([first, second])


class _Spec:
    def __init__(self, spec: BackendSpec) -> None:
        self.spec = spec

    @hookimpl
    def torchstrata_inductor_backends(self):
        return [self.spec]


class _OwnCodegen:
    """A third-party codegen stage (no ``tryfirst``)."""

    @hookimpl
    def torchstrata_codegen(self, graph, device, options, contract):
        return "own"


def test_a_third_party_codegen_stage_still_answers_before_the_builtin_one(ind):
    manager = _manager(_OwnCodegen())
    options = CompileOptions()
    graph = ind.demo_graph(4, 8)
    answer = manager.hook.torchstrata_codegen(
        graph=graph, device="cpu", options=options, contract=NO_CONTRACT
    )
    assert answer == "own"
