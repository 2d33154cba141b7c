"""A pytest plugin for authors of graph passes (entry point ``pytest11``: ``torchstrata``).

Installed with torchstrata-core, it gives every test session two fixtures::

    def test_my_pass_keeps_results(check_pass):
        report = check_pass(MyPass(), levels=["prims"])
        assert "prims/softmax_rows" in report.rewritten   # it did something somewhere

* ``check_pass(graph_pass, levels=None, trials=2)`` runs the pass on every graph of the
  corpus (:mod:`torchstrata.core.corpus`) at those levels, each output verified and
  checked against its input in the reference interpreter on random inputs (translation
  validation). The first graph it breaks fails the test, with the graph before and after.
  It returns a :class:`~torchstrata.core.corpus.CorpusReport` (``checked``, ``rewritten``).
* ``torchstrata_corpus``: the corpus itself, a list of
  :class:`~torchstrata.core.corpus.CorpusGraph` (``name``, ``graph``).

``--torchstrata-corpus DIR`` (repeatable) adds every ``*.txt`` graph under ``DIR`` (save
one with ``open(path, "w").write(str(graph))``). ``-p no:torchstrata`` turns the plugin off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from torchstrata.core.corpus import (
    CorpusGraph,
    CorpusReport,
    PassBrokeGraph,
    as_levels,
    check_pass_on_corpus,
    load_corpus,
)
from torchstrata.core.ops import Level
from torchstrata.core.passes import GraphPass

CORPUS_OPTION = "--torchstrata-corpus"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--torchstrata-corpus DIR``: more graphs for ``check_pass``."""
    group = parser.getgroup("torchstrata", "torchstrata graph passes")
    group.addoption(
        CORPUS_OPTION,
        action="append",
        default=[],
        metavar="DIR",
        help="also check passes on every *.txt graph (core's text form) under DIR",
    )


@pytest.fixture
def torchstrata_corpus(request: pytest.FixtureRequest) -> list[CorpusGraph]:
    """Every corpus graph (the shipped ones and those of ``--torchstrata-corpus``)."""
    return load_corpus(extra_dirs=request.config.getoption(CORPUS_OPTION))


@pytest.fixture
def check_pass(
    torchstrata_corpus: list[CorpusGraph],
) -> Callable[..., CorpusReport]:
    """``check_pass(graph_pass, levels=None, trials=2)``: run the pass on the corpus under
    translation validation; fail the test at the first graph it changes."""

    def check(
        graph_pass: GraphPass, levels: Iterable[Level | str] | None = None, trials: int = 2
    ) -> CorpusReport:
        if not isinstance(graph_pass, GraphPass) or not graph_pass.name:
            raise TypeError(f"check_pass expects a named GraphPass, got {graph_pass!r}")
        wanted = as_levels(levels)
        corpus = [entry for entry in torchstrata_corpus if entry.graph.level in wanted]
        if not corpus:
            raise ValueError(f"no corpus graph at levels {sorted(lv.value for lv in wanted)}")
        try:
            return check_pass_on_corpus(graph_pass, corpus, trials=trials)
        except PassBrokeGraph as error:
            pytest.fail(str(error), pytrace=False)

    return check
