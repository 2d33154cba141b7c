"""A corpus of small graphs at every level, for checking graph passes, and the check.

The graphs ship with core (``corpus_graphs/<level>/<name>.txt``, in core's text form):
pointwise chains, softmax, layer and RMS norms, linear + GELU, reductions, views,
concatenation and ``where``, integer arithmetic, half-precision casts, broadcasting and
cross-entropy; at torch level, as ATen forwards and backwards, and as prims. Every one
runs in the reference interpreter on random inputs, deterministically (no random numbers,
no data-dependent indices), which translation validation needs.
:func:`check_pass_on_corpus` runs a pass on each and compares the interpreter's results
before and after; the pytest plugin (:mod:`torchstrata.core.pytest_plugin`) wraps it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from torchstrata.core.graph import Graph
from torchstrata.core.ops import Level
from torchstrata.core.passes import GraphPass, validate_pass
from torchstrata.core.text import parse
from torchstrata.core.verify import verify

CORPUS_PACKAGE_DIR = "corpus_graphs"


@attrs.frozen
class CorpusGraph:
    """One graph of the corpus: ``name`` is ``<level>/<file stem>``."""

    name: str
    graph: Graph


def as_levels(levels: Iterable[Level | str] | Level | str | None) -> set[Level]:
    """``levels`` (a level, its name, or several) as a set; every level when None.

    :raises ValueError: an unknown level.
    """
    if levels is None:
        return set(Level)
    return {_level(level) for level in ([levels] if isinstance(levels, str | Level) else levels)}


def _level(value: Level | str) -> Level:
    try:
        return value if isinstance(value, Level) else Level(value)
    except ValueError:
        raise ValueError(
            f"unknown level {value!r}; one of {[level.value for level in Level]}"
        ) from None


def load_corpus(
    levels: Iterable[Level | str] | Level | str | None = None,
    extra_dirs: Sequence[str | Path] = (),
) -> list[CorpusGraph]:
    """The shipped corpus, sorted by name, then every ``*.txt`` graph under ``extra_dirs``
    (named by path), keeping the graphs at ``levels`` (all levels when None).

    :raises ValueError: an unknown level.
    :raises ParseError: a file of ``extra_dirs`` that is not a graph (the message names it).
    """
    wanted = as_levels(levels)
    root = importlib.resources.files("torchstrata.core") / CORPUS_PACKAGE_DIR
    texts = [
        (f"{level_dir.name}/{entry.name.removesuffix('.txt')}", entry.read_text())
        for level_dir in root.iterdir()
        if level_dir.is_dir()
        for entry in level_dir.iterdir()
        if entry.name.endswith(".txt")
    ]
    texts.sort()
    for directory in extra_dirs:  # after the shipped graphs, in the order given
        for path in sorted(Path(directory).rglob("*.txt")):
            texts.append((str(path), path.read_text()))
    corpus = []
    for name, text in texts:
        try:
            graph = parse(text)
        except ValueError as error:
            raise type(error)(f"corpus graph {name}: {error}") from None
        if graph.level in wanted:
            corpus.append(CorpusGraph(name, graph))
    return corpus


@attrs.frozen
class CorpusReport:
    """What a pass did to the corpus: the graphs it ran on, and those it rewrote (its
    output prints differently from its input) with the same results."""

    checked: tuple[str, ...]
    rewritten: tuple[str, ...]


class PassBrokeGraph(AssertionError):
    """A pass changed the results of (or broke) a corpus graph; the message names the
    graph and shows it before and after."""


def check_pass_on_corpus(
    graph_pass: GraphPass,
    corpus: Sequence[CorpusGraph],
    *,
    trials: int = 2,
) -> CorpusReport:
    """Run ``graph_pass`` on every graph of ``corpus``; each output must verify and give
    the interpreter's results of its input on ``trials`` sets of random inputs.

    :raises PassBrokeGraph: for the first graph that the pass breaks, raises on, or whose
        results it changes.
    """
    checked, rewritten = [], []
    for entry in corpus:
        before = entry.graph
        after: Graph | None = None
        try:
            after = graph_pass(before)
            if not isinstance(after, Graph):
                raise TypeError(f"returned {type(after).__name__}, not a Graph")
            verify(after)
            validate_pass(graph_pass.name, before, after, trials=trials)
        except Exception as error:
            shown = f"\n--- after:\n{after}" if isinstance(after, Graph) else ""
            raise PassBrokeGraph(
                f"pass {graph_pass.name!r} broke corpus graph {entry.name}: "
                f"{type(error).__name__}: {error}\n--- before:\n{before}{shown}"
            ) from error
        checked.append(entry.name)
        if str(after) != str(before):
            rewritten.append(entry.name)
    return CorpusReport(tuple(checked), tuple(rewritten))
