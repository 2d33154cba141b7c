"""Graph passes at each stage, blocking them, and input write-backs from AotResult."""

from __future__ import annotations

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import AotResult, GraphBuilder, Level, TensorMeta, aten, hookimpl


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@pytest.mark.parametrize("stage", ["post_capture", "post_aot", "post_decomp"])
def test_passes_run_at_their_stage_and_can_be_blocked(make_stages, make_pass_plugin, stage):
    plugin, graph_pass = make_pass_plugin(stage)
    stages = make_stages(extra=(("counter", plugin),))
    x = torch.randn(3)
    torch.testing.assert_close(stages.compile(double)(x), x * 2)
    assert graph_pass.runs == 1
    stages.compile(double, options={"blocked_plugins": {"counting"}})(x)
    assert graph_pass.runs == 1


def test_eager_codegen_skips_decomp_passes(make_stages, make_pass_plugin):
    plugin, graph_pass = make_pass_plugin("post_decomp")
    stages = make_stages(extra=(("counter", plugin),))
    stages.compile(double, codegen="eager")(torch.randn(3))
    assert graph_pass.runs == 0 and stages.decomp.calls == 0


class MutatingAot:
    """Forward of ``x.add_(1); return x * 2``: outputs (x1 * 2, x1), x1 written back into x."""

    @hookimpl
    def torchstrata_aot(self, graph, options):
        builder = GraphBuilder(Level.ATEN)
        x = builder.input("x", graph.inputs[0].tensor_meta)
        bumped = builder.call(aten("add.Tensor"), x, 1)
        out = builder.call(aten("mul.Tensor"), bumped, 2)
        return AotResult(builder.build([out, bumped]), num_user_outputs=1, mutated_inputs=(0,))


def bump(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x * 2


def test_mutated_inputs_are_written_back(make_stages):
    stages = make_stages(aot=False, extra=(("mutating-aot", MutatingAot()),))
    x = torch.zeros(3)
    out = stages.compile(bump)(x)
    torch.testing.assert_close(x, torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert TensorMeta.from_tensor(out).shape == (3,)
    assert isinstance(rt.explain(stages.compile(bump), x).aten_graphs[0].outputs, tuple)
