"""Fake in-process stage plugins, so the runtime is tested without the real stages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

import torchstrata.runtime as rt
from torchstrata.core import (
    AotResult,
    CaptureResult,
    CompiledGraph,
    GraphBreak,
    GraphBuilder,
    GraphContract,
    GraphPass,
    Guard,
    GuardKind,
    KernelInfo,
    Level,
    TensorMeta,
    create_plugin_manager,
    from_fx,
    hookimpl,
    interpret,
    random_inputs,
    to_fx,
    torch_op,
)


def _bind_constants(fn: Callable[..., Any], names: list[str], constants: dict[str, Any]) -> Any:
    """A function of the tensor parameters only (constants baked in), for torch.fx."""
    source = (
        f"def traced({', '.join(names)}):\n"
        f"    return fn({', '.join(f'{n}={n}' for n in names)}, **constants)\n"
    )
    namespace: dict[str, Any] = {"fn": fn, "constants": constants}
    exec(source, namespace)
    return namespace["traced"]


class FakeCapture:
    """Captures functions of tensors (and constants) with torch.fx."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None
        self.graph_break: GraphBreak | None = None
        self.break_with_graph = False

    @hookimpl
    def torchstrata_capture(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], options: Any
    ) -> CaptureResult:
        self.calls += 1
        if self.error is not None:
            raise self.error
        if self.graph_break is not None and not self.break_with_graph:
            return CaptureResult((), (), (self.graph_break,))
        breaks = (self.graph_break,) if self.graph_break is not None else ()
        frame = rt.bind_frame(fn, args, kwargs)
        guards = tuple(
            Guard(GuardKind.TENSOR_MATCH, f"L[{name!r}]", TensorMeta.from_tensor(value))
            if isinstance(value, torch.Tensor)
            else Guard(GuardKind.CONSTANT_MATCH, f"L[{name!r}]", value)
            for name, value in frame.items()
        )
        names = [name for name, value in frame.items() if isinstance(value, torch.Tensor)]
        constants = {name: value for name, value in frame.items() if name not in names}
        gm = torch.fx.symbolic_trace(_bind_constants(fn, names, constants))
        graph = from_fx(gm, [frame[name] for name in names])

        def program(compiled: Any, call_args: tuple[Any, ...], call_kwargs: dict[str, Any]) -> Any:
            bound = rt.bind_frame(fn, call_args, call_kwargs)
            return compiled[0](*(bound[name] for name in names))[0]

        return CaptureResult((graph,), guards, breaks, program)


class FakeLinearCapture:
    """Captures ``nn.Linear.forward``: weight and bias are lifted graph inputs read
    through ``L['self']`` at every call."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def torchstrata_capture(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], options: Any
    ) -> CaptureResult:
        self.calls += 1
        module = fn.__self__
        (x,) = args
        builder = GraphBuilder(Level.TORCH)
        x_node = builder.input("x", TensorMeta.from_tensor(x))
        w_node = builder.input("weight", TensorMeta.from_tensor(module.weight))
        b_node = builder.input("bias", TensorMeta.from_tensor(module.bias))
        out = builder.call(torch_op(torch.nn.functional.linear), x_node, w_node, b_node)
        graph = builder.build([out])
        guards = (
            Guard(GuardKind.TENSOR_MATCH, "L['input']", TensorMeta.from_tensor(x)),
            Guard(GuardKind.TYPE_MATCH, "L['self']", type(module)),
            Guard(
                GuardKind.TENSOR_MATCH, "L['self'].weight", TensorMeta.from_tensor(module.weight)
            ),
            Guard(GuardKind.TENSOR_MATCH, "L['self'].bias", TensorMeta.from_tensor(module.bias)),
        )

        def program(compiled: Any, call_args: tuple[Any, ...], call_kwargs: dict[str, Any]) -> Any:
            return compiled[0](call_args[0], module.weight, module.bias)[0]

        return CaptureResult((graph,), guards, (), program)


class FakeAot:
    """torch-level graph -> ATen forward with make_fx."""

    def __init__(self) -> None:
        self.calls = 0
        self.graphs: list[Any] = []
        self.error: Exception | None = None

    @hookimpl
    def torchstrata_aot(self, graph: Any, options: Any) -> AotResult:
        self.calls += 1
        self.graphs.append(graph)
        if self.error is not None:
            raise self.error
        inputs = random_inputs(graph)
        with torch.no_grad():
            traced = make_fx(to_fx(graph))(*inputs)
        aten_graph = from_fx(traced, inputs)
        return AotResult(forward=aten_graph, num_user_outputs=len(aten_graph.outputs))


class FakeDecomp:
    """Keeps the ATen graph (a real decomposer would lower it to prims), its inputs laid
    out as the contract says."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def torchstrata_decompose(self, graph: Any, options: Any, contract: GraphContract) -> Any:
        self.calls += 1
        return contract.laid_out(graph)


class FakeCodegen:
    """'Generates' one kernel that interprets the graph."""

    def __init__(self) -> None:
        self.calls = 0
        self.devices: list[torch.device] = []
        self.crash_at_run = False

    @hookimpl
    def torchstrata_codegen(self, graph: Any, device: torch.device, options: Any) -> CompiledGraph:
        self.calls += 1
        self.devices.append(device)
        ops = tuple(op.name for op in graph.ops())
        kernel = KernelInfo("kernel_0", "cpp", "// fake kernel\n" + "\n".join(ops), ops=ops)
        crash = self.crash_at_run

        def run(*args: Any) -> Any:
            if crash:
                raise RuntimeError("kernel crashed")
            return interpret(graph, *args)

        return CompiledGraph(
            run,
            kernels=(kernel,),
            eager_ops=("aten.mm.default",) if "aten.mm.default" in ops else (),
        )


class CountingPass(GraphPass):
    """Counts its runs; returns the graph unchanged."""

    name = "counting"

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, graph: Any) -> Any:
        self.runs += 1
        return graph


class PassPlugin:
    """Contributes one pass at one stage."""

    def __init__(self, stage: str, graph_pass: GraphPass) -> None:
        self.stage = stage
        self.graph_pass = graph_pass

    @hookimpl
    def torchstrata_graph_passes(self, stage: str, options: Any) -> list[GraphPass]:
        return [self.graph_pass] if stage == self.stage else []


class Stages:
    """The fake stages of one test and a pipeline over them."""

    def __init__(
        self,
        *,
        capture: bool = True,
        linear: bool = False,
        aot: bool = True,
        decomp: bool = True,
        codegen: bool = True,
        extra: tuple[tuple[str, Any], ...] = (),
    ) -> None:
        self.capture: Any = FakeLinearCapture() if linear else FakeCapture()
        self.aot = FakeAot()
        self.decomp = FakeDecomp()
        self.codegen = FakeCodegen()
        plugins = [
            (name, plugin)
            for name, plugin, wanted in (
                ("fake-capture", self.capture, capture),
                ("fake-aot", self.aot, aot),
                ("fake-decomp", self.decomp, decomp),
                ("fake-codegen", self.codegen, codegen),
            )
            if wanted
        ]
        self.manager = create_plugin_manager(load_entrypoints=False, plugins=[*plugins, *extra])
        self.pipeline = rt.Pipeline(self.manager)

    def compile(self, fn: Any, **kwargs: Any) -> Any:
        return rt.compile(fn, pipeline=self.pipeline, **kwargs)


@pytest.fixture(autouse=True)
def _fresh_runtime() -> Any:
    rt.reset()
    # Tests count stage calls: entries of earlier tests (or runs) must not stand in for them.
    with rt.graph_cache_suspended():
        yield
    rt.reset()


@pytest.fixture
def stages() -> Stages:
    return Stages()


@pytest.fixture
def make_stages() -> type[Stages]:
    return Stages


@pytest.fixture
def make_pass_plugin() -> Callable[[str], tuple[PassPlugin, CountingPass]]:
    """``make_pass_plugin(stage)`` -> (a plugin contributing a counting pass, the pass)."""

    def make(stage: str) -> tuple[PassPlugin, CountingPass]:
        graph_pass = CountingPass()
        return PassPlugin(stage, graph_pass), graph_pass

    return make
