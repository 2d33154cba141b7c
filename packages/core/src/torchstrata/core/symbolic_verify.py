"""The verifier's rules for symbolic sizes (decision 0211): every symbol a graph uses is
declared by an input dimension (where a call's value of it is read), all of them belong
to one ShapeEnv, and sizes are compared without recording guards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from torchstrata.core.graph import Graph
from torchstrata.core.symbolic import (
    SYMBOLIC_TYPES,
    SymbolicSizes,
    active_symbolic_sizes,
    symbolic_scope,
)
from torchstrata.core.symbolic_graphs import input_symbol_slots
from torchstrata.core.symbolic_text import symbols_of


def symbol_problems(graph: Graph) -> list[str]:
    """Each use of a symbol no input dimension declares, and symbols of more than one
    ShapeEnv, as the verifier reports them."""
    declared = set(input_symbol_slots(graph))
    problems = []
    environments: set[int] = set()
    for node in graph.all_nodes():
        used = symbols_of([(node.meta, node.args, dict(node.kwargs))])
        environments.update(id(env) for env in used.values())
        undeclared = sorted(str(symbol) for symbol in used if str(symbol) not in declared)
        if undeclared:
            problems.append(
                f"%{node.name} uses symbol {', '.join(undeclared)}, which no input "
                "dimension declares"
            )
    if len(environments) > 1:
        problems.append(f"the graph's symbols belong to {len(environments)} ShapeEnvs, not one")
    return problems


def same_sizes(expected: Sequence[Any], actual: Sequence[Any]) -> bool:
    """Whether two shapes (or stride tuples) are equal for every value of the symbols:
    provably, so no guard is recorded (``==`` on symbols would record one)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if len(expected) != len(actual):
        return False
    for a, b in zip(expected, actual, strict=True):
        if isinstance(a, SYMBOLIC_TYPES) or isinstance(b, SYMBOLIC_TYPES):
            if not statically_known_true(a == b):
                return False
        elif a != b:
            return False
    return True


@contextlib.contextmanager
def symbols_in_scope(graph: Graph) -> Iterator[None]:
    """Meta inference over ``graph``'s symbols: under the active symbolic scope, or one
    over the ShapeEnv of its symbols (a parsed graph's)."""
    if active_symbolic_sizes() is not None:
        yield
        return
    found = symbols_of((node.meta,) for node in graph.inputs)
    if not found:
        yield
        return
    with symbolic_scope(SymbolicSizes({}, shape_env=next(iter(found.values())))):
        yield
