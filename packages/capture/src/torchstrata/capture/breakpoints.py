"""``graph_break()``: a graph break where the user (or a test) asks for one.

Called eagerly it does nothing. Under capture the call is a graph break with its own
reason, as Dynamo's own ``graph_break()`` is: the graph so far runs,
the call runs for real (doing nothing), and the next segment is captured. Tests that
need a break at a given line use it instead of an unrelated unsupported call such as
``print``, which capture may learn to trace.
"""

from __future__ import annotations

#: The reason a ``graph_break()`` call gives.
GRAPH_BREAK_REASON = "graph_break() called"


def graph_break() -> None:
    """Split the captured function here (a no-op when run eagerly)."""
