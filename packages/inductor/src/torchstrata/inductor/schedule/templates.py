"""Shape templates: a ``prims.full`` that random externs read only for its metadata.

``torch.rand_like(torch.empty_like(x))``, or dropout's ``bernoulli_(empty_like(r), q)``
where the decomposition leaves it to ATen (a generator passed), reaches the inductor as
``aten.rand_like(full(0))`` / ``aten.bernoulli.p(full(0), q)``: these ATen ops read
nothing of their ``self`` but the shape, dtype, device and layout (they fill a fresh
``empty_like(self)``). Generating the ``full`` would write the whole tensor in a kernel
of its own (16 MB for an fp32 [4096, 1024] one) for values nobody reads; it is
allocated instead.
"""

from __future__ import annotations

from torchstrata.core import Graph, Node, prim

_FULL = prim("full")

#: ATen ops whose first argument is read only for its metadata (the result is as
#: ``empty_like(self)`` filled with random numbers). ``aten.bernoulli.default`` is not
#: one: it reads ``self`` as the probabilities.
TEMPLATE_READERS = frozenset(
    {"aten.bernoulli.p", "aten.rand_like.default", "aten.randn_like.default"}
)


def shape_templates(graph: Graph) -> set[Node]:
    """The ``prims.full`` nodes of ``graph`` whose every use is the first argument of a
    :data:`TEMPLATE_READERS` op (and which are not graph outputs)."""
    outputs = set(graph.outputs)
    users = graph.users()
    return {
        node
        for node in graph.nodes
        if node.op == _FULL
        and node not in outputs
        and users[node]
        and all(_reads_only_metadata(user, node) for user in users[node])
    }


def _reads_only_metadata(user: Node, node: Node) -> bool:
    if user.op is None or user.op.name not in TEMPLATE_READERS or not user.args:
        return False
    rest = [*user.args[1:], *user.kwargs.values()]
    return user.args[0] is node and not any(value is node for value in rest)
