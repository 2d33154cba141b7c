"""The pytest plugin for pass authors: ``check_pass`` over the shipped corpus (pytester)."""

from __future__ import annotations

import pytest

from torchstrata.core import Level
from torchstrata.core.corpus import load_corpus

pytest_plugins = ["pytester"]

PASSES = '''
from torchstrata.core import GraphPass, Transformer, eliminate_common_subexpressions, prim


class CommonSubexpressions(GraphPass):
    name = "cse"

    def __call__(self, graph):
        return eliminate_common_subexpressions(graph)


class AddBecomesSub(GraphPass):
    """Wrong on purpose: every prims.add becomes prims.sub."""

    name = "add-becomes-sub"

    def __call__(self, graph):
        class Rewrite(Transformer):
            def transform_node(self, node, args, kwargs):
                if node.op == prim("add"):
                    return self.builder.call(prim("sub"), *args, **kwargs)
                return super().transform_node(node, args, kwargs)

        return Rewrite(graph).run()
'''


def test_the_shipped_corpus_covers_every_level():
    corpus = load_corpus()
    levels = {entry.graph.level for entry in corpus}
    assert levels == set(Level)
    assert len(load_corpus(levels=["prims"])) >= 10
    assert "aten/layer_norm-backward" in {entry.name for entry in corpus}


INNER_TESTS = """
import pytest
from passes import AddBecomesSub, CommonSubexpressions


def test_cse(check_pass, torchstrata_corpus):
    report = check_pass(CommonSubexpressions(), levels=["prims"])
    prims = [e.name for e in torchstrata_corpus if e.graph.level.value == "prims"]
    assert list(report.checked) == prims and prims[-1].endswith("adds.txt")  # --torchstrata-corpus
    assert set(report.rewritten) <= set(prims)


def test_bad(check_pass):
    check_pass(AddBecomesSub(), levels="prims")


def test_level(check_pass):
    with pytest.raises(ValueError, match="unknown level 'prim'"):
        check_pass(CommonSubexpressions(), levels=["prim"])
"""


def _first_with_add(corpus):
    return next(
        entry.name
        for entry in corpus
        if any(node.op is not None and node.op.name == "prims.add" for node in entry.graph.nodes)
    )


# One subprocess (an in-process run would register torch's operator libraries twice).
def test_check_pass_passes_a_correct_pass_and_names_the_graph_a_wrong_one_changes(pytester):
    pytester.makepyfile(passes=PASSES, test_inner=INNER_TESTS)
    own = pytester.mkdir("own_graphs")
    (own / "adds.txt").write_text(
        "graph prims {\n  %x: f32[4] = input\n  %y: f32[4] = prims.add(%x, 1.0)\n  return %y\n}\n"
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--torchstrata-corpus", str(own)
    )
    result.assert_outcomes(passed=2, failed=1)
    first = _first_with_add(load_corpus(levels="prims"))
    result.stdout.fnmatch_lines(
        [f"*pass 'add-becomes-sub' broke corpus graph {first}: PassValidationError*"]
    )
    result.stdout.fnmatch_lines(["*--- before:*", "*prims.add*", "*--- after:*", "*prims.sub*"])


@pytest.mark.parametrize("level", ["torch", "aten", "prims"])
def test_every_corpus_graph_is_deterministic_in_the_interpreter(level):
    import torch

    from torchstrata.core import interpret, random_inputs

    for entry in load_corpus(levels=level):
        inputs = random_inputs(entry.graph, seed=3)
        first, second = interpret(entry.graph, *inputs), interpret(entry.graph, *inputs)
        for a, b in zip(first, second, strict=True):
            assert torch.equal(a, b), entry.name
