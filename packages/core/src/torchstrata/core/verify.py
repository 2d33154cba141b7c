"""``verify(graph)``: SSA form, metadata and level rules, checked before a graph is trusted."""

from __future__ import annotations

import re
from typing import Any

import torch

from torchstrata.core.builder import MetaInferenceError, infer_meta
from torchstrata.core.graph import Graph, Node
from torchstrata.core.meta import TensorMeta, is_dense
from torchstrata.core.ops import Level, OpKind
from torchstrata.core.prims import get_prim
from torchstrata.core.symbolic_verify import same_sizes, symbol_problems, symbols_in_scope

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Which op kinds each level admits. A prims graph may keep ATen nodes the
#: decomposition chose not to lower (extern calls such as matmul).
ALLOWED_KINDS = {
    Level.TORCH: {OpKind.TORCH, OpKind.BUILTIN},
    Level.ATEN: {OpKind.ATEN, OpKind.BUILTIN},
    Level.PRIMS: {OpKind.PRIMS, OpKind.ATEN, OpKind.BUILTIN},
}


class VerificationError(ValueError):
    """A graph broke an IR rule; ``problems`` lists every rule broken."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("graph failed verification:\n  " + "\n  ".join(problems))
        self.problems = problems


def _same_meta(expected: object, actual: object, check_strides: bool) -> bool:
    if isinstance(expected, TensorMeta) and isinstance(actual, TensorMeta):
        same = (expected.dtype, expected.device) == (actual.dtype, actual.device)
        same = same and same_sizes(expected.shape, actual.shape)
        return same and (not check_strides or same_sizes(expected.strides, actual.strides))
    if isinstance(expected, tuple) and isinstance(actual, tuple) and len(expected) == len(actual):
        return all(_same_meta(e, a, check_strides) for e, a in zip(expected, actual, strict=True))
    return expected == actual


def verify(graph: Graph, *, check_meta: bool = True) -> None:
    """Raise :class:`VerificationError` unless ``graph`` is well formed.

    Checks: unique valid names; inputs are tensor placeholders; every argument is
    defined before use; outputs are defined; each op is allowed at the graph's level
    and resolves to a callable; with ``check_meta``, prim nodes' metadata equals what
    their meta function computes (ATen and torch nodes are re-inferred on meta tensors
    when that is possible); a ``slice`` argument's bounds are ints, None or sizes.
    Symbolic sizes (decision 0211): every symbol is declared by an input dimension (a
    slice bound's too), and re-inferred metadata equals the node's for every value of
    the symbols.
    """
    problems: list[str] = []
    defined: set[int] = set()
    names: set[str] = set()
    for node in graph.inputs:
        if node.op is not None:
            problems.append(f"input %{node.name} has an op")
        if not isinstance(node.meta, TensorMeta):
            problems.append(f"input %{node.name} has no tensor metadata")
    symbols = symbol_problems(graph)
    problems += symbols
    with symbols_in_scope(graph):
        for node in graph.all_nodes():
            if not _NAME.fullmatch(node.name):
                problems.append(f"%{node.name} is not a valid name")
            if node.name in names:
                problems.append(f"%{node.name} is defined twice")
            names.add(node.name)
            if node.op is not None:
                problems += _check_node(graph, node, defined, check_meta and not symbols)
            defined.add(id(node))
    for output in graph.outputs:
        if not isinstance(output, Node) or id(output) not in defined:
            problems.append(f"output {output!r} is not a node of this graph")
    if problems:
        raise VerificationError(problems)


def _check_node(graph: Graph, node: Node, defined: set[int], check_meta: bool) -> list[str]:
    assert node.op is not None
    problems = []
    for arg in node.input_nodes():
        if id(arg) not in defined:
            problems.append(
                f"%{node.name} reads %{arg.name} before it is defined (or from another graph)"
            )
    problems += _slice_problems(node)
    if node.op.kind not in ALLOWED_KINDS[graph.level]:
        problems.append(
            f"%{node.name}: {node.op.kind.value} op {node.op.name} in a {graph.level.value} graph"
        )
    try:
        node.op.resolve()
    except (LookupError, AttributeError) as error:
        problems.append(f"%{node.name}: {error}")
        return problems
    if not check_meta or problems:
        return problems
    try:
        expected = infer_meta(node.op, node.args, node.kwargs)
    except MetaInferenceError:
        if node.op.kind is OpKind.PRIMS:
            problems.append(f"%{node.name}: {node.op.name} rejects its arguments")
        return problems
    except (TypeError, ValueError) as error:
        return [*problems, f"%{node.name}: {node.op.name}: {error}"]
    check_strides = node.op.kind is OpKind.PRIMS and not _relaid(node, expected)
    if not _same_meta(expected, node.meta, check_strides):
        problems.append(f"%{node.name}: metadata {node.meta} differs from the inferred {expected}")
    return problems


def _slice_problems(node: Node) -> list[str]:
    """A ``slice`` argument whose bound is not an int, None or a symbolic size (decision
    0493): a node there is read unseen (``input_nodes`` does not look inside slices) and
    the text form has no syntax for it."""
    problems = []
    pending: list[Any] = [*node.args, *node.kwargs.values()]
    while pending:
        value = pending.pop()
        if isinstance(value, list | tuple):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, slice):
            for bound in (value.start, value.stop, value.step):
                if (
                    bound is not None
                    and type(bound) is not int
                    and not isinstance(bound, torch.SymInt)
                ):
                    problems.append(
                        f"%{node.name}: slice bound {bound!r} is not an int, None or a size"
                    )
    return problems


def _relaid(node: Node, expected: object) -> bool:
    """A (non-view) prim stored in another dense layout than its meta function's
    row-major one (the decomposition gives results eager's layout): a storage choice,
    not a different value (``PrimDef.any_dense_layout``)."""
    assert node.op is not None
    meta = node.meta
    return (
        isinstance(meta, TensorMeta)
        and isinstance(expected, TensorMeta)
        and get_prim(node.op.name.removeprefix("prims.")).any_dense_layout
        and is_dense(meta.shape, meta.strides)
    )
