"""A symbolic entry's calls routed by its guard: the layout key that the entry's size
check looks up (:class:`~torchstrata.core.SizeCheck`) also picks the runner lowered for
the call's sizes, so a known layout goes from the guard function straight to its compiled
graph, with no second lookup by size (decision 0295).

The generated positional check (:meth:`~torchstrata.runtime.guards.GuardSet.fetch_args`)
of a routed entry returns ``((graph_fn,), inputs)``: the runner of a layout routed
before, or, for a layout that passes and is not routed yet, a call of :meth:`SizeRoutes.learn`
that finds (or lowers) the runner by the sizes of the graph's inputs, remembers it for the
layout and runs it. :meth:`SizeRoutes.run` passes them to the capture's direct program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from torchstrata.core import DirectProgram, Guard, size_check_of
from torchstrata.runtime.first_calls import settled

#: layouts routed at most (then the table starts over, as :attr:`SizeCheck.known` does)
MAX_ROUTES = 4096


class SizeRoutes:
    """Layout key of ``guard``'s size check -> the runner lowered for that layout's sizes.

    A layout key holds the shape of every tensor the size check reads; the routes are
    made only when each symbol of the graph is a size of one of those tensors (its graph
    input read from the same source), so one layout always has one runner.

    :param guard: the symbolic entry's size guard (its :class:`SizeCheck` in a cell).
    :param input_sources: the sources of the graph's inputs (the capture's
        ``direct_sources``), in order.
    :param slots: (input position, dim) of each symbol, in the order of the runner's key
        (:attr:`~torchstrata.runtime.dynamic_shapes.SizeSpecialisedRunner.slots`).
    :param runner_for: the runner for a key of sizes (lowered on its first use).
    :param direct: the capture's direct program.
    :raises ValueError: when a symbol is the size of an input the check does not read.
    """

    def __init__(
        self,
        guard: Guard,
        input_sources: Sequence[str],
        slots: Sequence[tuple[int, int]],
        runner_for: Callable[[tuple[int, ...]], Callable[..., Any]],
        direct: DirectProgram,
    ) -> None:
        check = size_check_of(guard)
        if check is None:
            raise ValueError(f"{guard.source} is not a size guard")
        unread = {input_sources[p] for p, _ in slots} - set(check.sources)
        if unread:
            raise ValueError(f"the size check reads no layout of {sorted(unread)}")
        self.guard = guard
        self.check = check
        self.slots = tuple(slots)
        #: layout key -> ``(runner,)``: the graph functions the direct program takes,
        #: made once (a tuple built per call cost the check a tenth of its time)
        self.table: dict[tuple[Any, ...], tuple[Callable[..., Any]]] = {}
        #: ``[(*layout, (runner,))]`` of the layout routed last, compared item by item
        #: before the table is looked up (no key tuple hashed when a size repeats); one
        #: tuple read whole, so a thread sees one layout with its own route
        self.last: list[tuple[Any, ...]] = [(None,) * (2 * len(check.sources) + 1)]
        self._runner_for = runner_for
        self._direct = direct

    def learn(self, layout: tuple[Any, ...], *inputs: Any) -> Any:
        """Run the graph for ``inputs`` (of a passing layout not routed yet): the runner
        for their sizes, remembered for ``layout``."""
        runner = self._runner_for(tuple(inputs[p].shape[d] for p, d in self.slots))
        result = runner(*inputs)
        # routed after the call: a size's first call settles on the runner that serves it
        # (:mod:`.first_calls`), which the route keeps (no wrapper per call)
        runner = settled(runner)
        if len(self.table) >= MAX_ROUTES:
            self.table.clear()
        self.table[layout] = (runner,)
        self.last[0] = (*layout, (runner,))
        return result

    def learner(self) -> Callable[[tuple[Any, ...]], tuple[Callable[..., Any]]]:
        """``learner(layout)``: ``(graph function,)`` for a layout not routed yet (made
        in the generated check, which has the key, not the graph's inputs)."""
        learn = self.learn
        return lambda layout: (functools.partial(learn, layout),)

    def run(self, routed: tuple[tuple[Callable[..., Any]], tuple[Any, ...]]) -> Any:
        """What the frame returns, given what the routed check returned."""
        return self._direct(*routed)
