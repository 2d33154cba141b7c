"""``count-ops``: a graph pass that records how often it ran and leaves graphs unchanged."""

from __future__ import annotations

from pathlib import Path

from torchstrata.core import Graph, GraphPass

#: One ``(stage, number of ops)`` per run of the pass in this process.
RUNS: list[tuple[str, int]] = []


class CountOps(GraphPass):
    """Counts the ops of every graph it sees; returns the graph itself.

    :param stage: the pass stage it was contributed for (recorded with each run).
    :param counter_file: if given, one line ``stage ops`` is appended per run.
    """

    name = "count-ops"

    def __init__(self, stage: str, counter_file: str | None = None) -> None:
        self.stage = stage
        self.counter_file = counter_file

    def __call__(self, graph: Graph) -> Graph:
        ops = len(graph.nodes)
        RUNS.append((self.stage, ops))
        if self.counter_file is not None:
            with Path(self.counter_file).open("a", encoding="utf-8") as handle:
                handle.write(f"{self.stage} {ops}\n")
        return graph
