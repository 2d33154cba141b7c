"""Recomputable forward values that the forward writes to memory anyway.

A pointwise value read by a matmul, a convolution or an attention op is written by the
forward whatever the partition decides: no backend fuses a producer into those calls
(they go to the vendor libraries). Saving such a value costs only the memory that holds
it until the backward; recomputing it costs a kernel in the backward that writes it again
(a GPT's GELU, read by the MLP's second matmul and, in the backward, by that matmul's
weight gradient: an ``erf`` per element, twice). The partition prices these values like
a matmul's result and never recomputes them (:func:`materialised_values`). AOTAutograd's
partitioner does the same (its ``is_materialized`` nodes, half price, and no recompute
of what a non-fusible backward op reads).

The inductor also stores a value shared down a chain (decision 0190): a transformer's
residual stream ``x_k = x_(k-1) + f_k(x_(k-1))``, read by the next norm and the next sum.
Left unsaved, the backward rebuilt every ``x_k`` from the saved branch outputs in one
kernel that read two buffers and wrote one per layer (1.2 ms of a 24-layer GPT step):
a pointwise value that sums two operands of its own size or more and that a reduction
(or another op the partition may not recompute) and at least one other forward node
read is treated the same way.

A value that a checkpointed region reads (a node the backward recomputes) is left to
the cut: there the user chose memory over time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import torch

from torchstrata.core import GETITEM, Graph, Node, size_hint

#: Ops that read their operands from memory as they are: extern calls in every backend.
EXTERN_READERS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    }
)

#: The name in ``CompileOptions.blocked_plugins`` that turns the rule off (for measuring
#: it in one process).
MATERIALISED_SAVED = "autograd.materialised_saved"


def _packet(node: Node) -> str | None:
    if node.op is None or node.op == GETITEM:
        return None
    overload: torch._ops.OpOverload = node.op.resolve()  # type: ignore[assignment]
    return str(overload._overloadpacket.__name__)


def is_view(node: Node) -> bool:
    """True for an ATen view op (its result aliases its first operand)."""
    return node.op is not None and node.op.is_view


def _read_by_extern(node: Node, users: Mapping[Node, Sequence[Node]], forward: set[Node]) -> bool:
    """Whether a forward extern reader reads ``node``, directly or through views."""
    stack, seen = [node], set()
    while stack:
        value = stack.pop()
        for user in users.get(value, ()):
            if user not in forward or user in seen:
                continue
            seen.add(user)
            if _packet(user) in EXTERN_READERS:
                return True
            if is_view(user):
                stack.append(user)
    return False


def _shared_sum(
    node: Node,
    users: Mapping[Node, Sequence[Node]],
    forward: set[Node],
    writes_result: Callable[[Node], bool],
) -> bool:
    """Whether ``node`` is a pointwise value of two operands of its size or more that a
    forward op writing its result (a reduction, a norm) and another forward node read."""
    if node.op is None or node.op == GETITEM:
        return False
    overload: torch._ops.OpOverload = node.op.resolve()  # type: ignore[assignment]
    if torch.Tag.pointwise not in overload.tags:
        return False
    # sizes at their hints, no condition recorded: a choice of speed (decision 0280)
    numel = size_hint(node.tensor_meta.numel)
    same_size = [arg for arg in node.input_nodes() if size_hint(arg.tensor_meta.numel) == numel]
    readers = [user for user in users.get(node, ()) if user in forward]
    return len(same_size) >= 2 and len(readers) >= 2 and any(map(writes_result, readers))


def materialised_values(
    joint: Graph,
    users: Mapping[Node, Sequence[Node]],
    forward: set[Node],
    recomputable: set[Node],
    writes_result: Callable[[Node], bool],
    recomputed: AbstractSet[Node] = frozenset(),
) -> set[Node]:
    """The recomputable forward nodes, views aside, that the forward stores whatever is
    saved: those that a forward extern reader reads (directly or through views), and
    shared sums (see the module's docstring).

    ``forward``: the joint nodes that read no tangent; ``recomputable``: those the
    partition may recompute (pointwise ops, copies, factories, views);
    ``writes_result``: whether a node's result is written by the forward anyway (a
    matmul, a reduction); ``recomputed``: nodes of checkpointed regions (their operands
    are left out)."""
    return {
        node
        for node in joint.nodes
        if node in forward
        and node in recomputable
        and node not in recomputed
        and not any(user in recomputed for user in users.get(node, ()))
        and not is_view(node)
        and node.op != GETITEM
        and (
            _read_by_extern(node, users, forward)
            or _shared_sum(node, users, forward, writes_result)
        )
    }
