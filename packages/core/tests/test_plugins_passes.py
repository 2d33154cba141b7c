"""Plugin manager (discovery, duplicates, blocking), pass ordering and validation, options."""

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    DuplicatePluginError,
    GraphPass,
    PassManager,
    PassOrderError,
    PassValidationError,
    Transformer,
    create_plugin_manager,
    current_options,
    hookimpl,
    override_options,
    parse,
    prim,
)

GRAPH = parse("graph prims {\n  %x: f32[3] = input\n  %y: f32[3] = prims.exp(%x)\n  return %y\n}")


class _Named(GraphPass):
    def __init__(self, name, log, before=(), after=()):
        self.name, self.log, self.before, self.after = name, log, before, after  # type: ignore[misc]

    def __call__(self, graph):
        self.log.append(self.name)
        return graph


class _PassPlugin:
    def __init__(self, *passes):
        self.passes = passes

    @hookimpl
    def torchstrata_graph_passes(self, stage, options):
        return list(self.passes) if stage == "post_decomp" else None


def test_plugins_register_and_block_by_name():
    log: list[str] = []
    plugin = _PassPlugin(_Named("a", log))
    manager = create_plugin_manager(load_entrypoints=False, plugins=[("mine", plugin)])
    results = manager.hook.torchstrata_graph_passes(stage="post_decomp", options=CompileOptions())
    assert [p.name for group in results for p in group] == ["a"]
    blocked = create_plugin_manager(
        load_entrypoints=False, blocked=["mine"], plugins=[("mine", plugin)]
    )
    assert (
        blocked.hook.torchstrata_graph_passes(stage="post_decomp", options=CompileOptions()) == []
    )


def test_duplicate_plugin_names_are_refused():
    with pytest.raises(DuplicatePluginError, match="'twice'"):
        create_plugin_manager(
            load_entrypoints=False, plugins=[("twice", _PassPlugin()), ("twice", _PassPlugin())]
        )


def test_passes_follow_declared_order_and_blocking():
    log: list[str] = []
    passes = [
        _Named("late", log, after=("early",)),
        _Named("early", log),
        _Named("first", log, before=("early",)),
    ]
    PassManager(passes).run(GRAPH)
    assert log == ["first", "early", "late"]
    log.clear()
    PassManager(passes, blocked=["early"]).run(GRAPH)
    assert log == ["late", "first"]
    with pytest.raises(PassOrderError, match="cyclic"):
        PassManager([_Named("p", log, after=("q",)), _Named("q", log, after=("p",))])
    with pytest.raises(PassOrderError, match="two passes"):
        PassManager([_Named("p", log), _Named("p", log)])


def test_translation_validation_names_the_pass_that_changes_results():
    class ExpToNeg(GraphPass):
        name = "wrong-rewrite"

        def __call__(self, graph):
            class Rewrite(Transformer):
                def transform_node(self, node, args, kwargs):
                    return self.builder.call(prim("neg"), *args)

            return Rewrite(graph).run()

    manager = PassManager([ExpToNeg()], validate=True)
    with pytest.raises(PassValidationError, match="wrong-rewrite"):
        manager.run(GRAPH)
    assert PassManager([ExpToNeg()]).run(GRAPH).nodes[0].op == prim("neg")


def test_options_validate_and_override():
    with pytest.raises(ValueError, match="codegen=''"):
        CompileOptions(codegen="")
    with pytest.raises(ValueError, match="codegen=3"):
        CompileOptions(codegen=3)  # type: ignore[arg-type]
    assert CompileOptions(codegen="numpy").codegen == "numpy"  # checked when compiling
    with override_options(codegen="cpp", debug=True) as options:
        assert current_options() is options and options.codegen == "cpp"
    assert current_options().codegen is None
    assert CompileOptions(stage_options={"x": {"k": 1}}).stage("x") == {"k": 1}
    assert torch.float32  # keep import used
