"""The minifier names the stage or pass that went wrong and shrinks the graph to it.

Bugs are injected on purpose (as torch's minifier tests do): a ``post_decomp`` pass that
turns ``minimum`` into ``maximum``, and a code generator that returns a wrong value for
any graph with an ``exp``; each must be found at its own stage and shrunk to one node.
"""

from __future__ import annotations

import torch

from torchstrata.core import (
    CompileOptions,
    GraphPass,
    Transformer,
    create_plugin_manager,
    first_failure,
    hookimpl,
    minify,
    prim,
    register,
    walk_function,
)


def program(x, y):
    a = torch.relu(x) + y
    b = torch.clamp(a, max=0.5) * torch.exp(y)
    return torch.softmax(b, -1), a.sum(0)


ARGS = (torch.randn(4, 6, generator=torch.Generator().manual_seed(0)), torch.randn(6))


class _MaxForMin(Transformer):
    def transform_node(self, node, args, kwargs):
        op = prim("maximum") if node.op == prim("minimum") else node.op
        return self.builder.call(op, *args, name=node.name, **kwargs)


class _BrokenPass(GraphPass):
    name = "swap-min-for-max"

    def __call__(self, graph):
        return _MaxForMin(graph).run()


class _BrokenPassPlugin:
    @hookimpl
    def torchstrata_graph_passes(self, stage, options):
        return [_BrokenPass()] if stage == "post_decomp" else None


class _WrongExpCodegen:
    """Answers before the real code generator: its result for graphs with an exp is off."""

    def __init__(self, manager):
        self.manager = manager

    @hookimpl(tryfirst=True)
    def torchstrata_codegen(self, graph, device, options, contract):
        if prim("exp") not in graph.ops():
            return None
        real = next(
            impl.function(graph=graph, device=device, options=options, contract=contract)
            for impl in self.manager.hook.torchstrata_codegen.get_hookimpls()
            if impl.plugin is not self
        )
        wrong = real.fn

        def fn(*args):
            return tuple(out + 1 if out.is_floating_point() else out for out in wrong(*args))

        return type(real)(fn, real.kernels, real.eager_ops)


def test_every_stage_agrees_on_a_correct_pipeline():
    checks, graph, _ = walk_function(program, ARGS, CompileOptions(codegen="cpp"))
    assert graph is not None and first_failure(checks) is None
    stages = [check.stage for check in checks]
    assert stages[:3] == ["capture", "aot", "decomp"] and stages[-1] == "codegen"


def test_a_wrong_pass_is_named_and_shrunk_to_its_node():
    manager = create_plugin_manager()
    register(manager, "broken-pass", _BrokenPassPlugin())
    options = CompileOptions(codegen="cpp")
    checks, graph, inputs = walk_function(program, ARGS, options, plugin_manager=manager)
    assert first_failure(checks).stage == "post_decomp:swap-min-for-max"
    found = minify(graph, inputs, options, plugin_manager=manager)
    assert found is not None and found.stage == "post_decomp:swap-min-for-max"
    assert [op.short_name for op in found.graph.ops()] == ["clamp"]
    assert "swap-min-for-max" in str(found)


def test_wrong_code_is_named_and_shrunk_to_its_node():
    manager = create_plugin_manager()
    register(manager, "wrong-exp-codegen", _WrongExpCodegen(manager))
    options = CompileOptions(codegen="cpp")
    checks, graph, inputs = walk_function(program, ARGS, options, plugin_manager=manager)
    assert first_failure(checks).stage == "codegen"
    found = minify(graph, inputs, options, plugin_manager=manager)
    assert found is not None and found.stage == "codegen"
    # one node whose prims hold an exp (softmax's do): the output reduced first is kept
    assert [op.short_name for op in found.graph.ops()] in (["exp"], ["softmax"])
    assert len(found.inputs) == 1
