"""User outputs that share one intermediate's memory: which of them the caller rebuilds
as views of another output, and which intermediates it needs returned for that.

In eager, ``z = x * 2; return z[0:3], z[2:5]`` returns two views of ``z``: an in-place
update of one shows in the other. A compiled graph returns each output as its own
tensor, so the caller rebuilds such outputs as views of one *owner*
(``AotResult.output_views``): a user output that covers the others (``z`` itself when it
is returned), or, when none does and two of them overlap, the intermediate itself,
returned as a *hidden* extra output (``AotResult.num_hidden_outputs``) that the caller
does not hand to the user.
"""

from __future__ import annotations

from typing import Any

import torch

from torchstrata.autograd.recorder import AtenRecorder
from torchstrata.core import spans_overlap, tensor_element_span

#: ``(index, size, stride, storage_offset)``: a user output that is a view of an input
#: or of another output, as ``base.as_strided(size, stride, base.storage_offset() +
#: storage_offset)`` (the offset relative to the base's own).
OutputAlias = tuple[int, tuple[int, ...], tuple[int, ...], int]


class UnsharableOutputs(NotImplementedError):
    """Overlapping outputs view an intermediate that cannot be returned whole as their
    common base (it is not dense, or does not contain them): returning them as separate
    tensors would hide an update of one from the other, so the graph is not compiled."""


def output_views(
    recorder: AtenRecorder, results: list[torch.Tensor], aliases: tuple[object, ...]
) -> tuple[tuple[OutputAlias | None, ...], tuple[torch.Tensor, ...]]:
    """``(AotResult.output_views, hidden bases)`` for the traced user outputs ``results``
    (fake tensors; ``aliases``: their ``output_aliases``, None where not an input alias).

    Outputs that view one intermediate's memory become views of one owner: the output
    that covers the most of the others, if it covers every other one that overlaps
    another (it must be dense and contain each view it owns: the compiled owner, laid
    out with the traced strides, then holds every element those views read). Otherwise
    the intermediate itself is the owner of all of them, returned as a hidden output:
    its index in the views is ``len(results) + k`` for the ``k``-th hidden base.
    Outputs that overlap no other stay separate tensors (no update of one can show in
    another, and a hidden base would cost an extra output). An output that requires grad
    is never owned by one that does not (a detached alias of it): the caller makes a view
    of a detached owner, with no history to backpropagate through.

    :raises UnsharableOutputs: when a hidden base is needed but does not cover its views.
    """
    groups: dict[int, list[int]] = {}
    bases: dict[int, torch.Tensor] = {}
    for index, value in enumerate(results):
        base = recorder.intermediate_owner(value) if aliases[index] is None else None
        if base is not None:
            groups.setdefault(id(base), []).append(index)
            bases[id(base)] = base
    views: list[OutputAlias | None] = [None] * len(results)
    hidden: list[torch.Tensor] = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        covered = {
            i: [j for j in members if j != i and _covers(results[i], results[j])] for i in members
        }
        # An owner that requires grad first: a view of one that does not (a detached
        # alias, ``y.detach()``) would rebuild a differentiable output without its history.
        chosen = max(
            members,
            key=lambda i: (results[i].requires_grad, len(covered[i]), results[i].numel(), -i),
        )
        left = [i for i in members if i != chosen and i not in covered[chosen]]
        if not any(_overlap(results[i], results[j]) for i in left for j in members if j != i):
            owner_index, owner, owned = chosen, results[chosen], covered[chosen]
        else:
            owner = bases[key]
            if not all(_covers(owner, results[i]) for i in members):
                raise UnsharableOutputs(
                    f"outputs {members} overlap in the memory of an intermediate "
                    f"{tuple(owner.shape)} (strides {owner.stride()}) that does not hold "
                    "them all densely; they cannot be returned as views of it"
                )
            owner_index, owned = len(results) + len(hidden), members
            hidden.append(owner)
        for index in owned:
            value = results[index]
            # not ``int()``: a symbolic offset (``y[n // 2 :]``) stays an expression
            offset: Any = value.storage_offset() - owner.storage_offset()
            views[index] = (owner_index, tuple(value.shape), tuple(value.stride()), offset)
    return tuple(views), tuple(hidden)


def _covers(owner: torch.Tensor, view: torch.Tensor) -> bool:
    """``owner`` is dense (its elements fill a block of its storage without gaps or
    overlaps) and ``view``'s elements all lie in that block."""
    dims = sorted((s, n) for s, n in zip(owner.stride(), owner.shape, strict=True) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    span = tensor_element_span(view)
    if span is None:
        return True
    start = owner.storage_offset()  # compared, not made an int (a symbolic one)
    return start <= span[0] and span[1] < start + owner.numel()


def _overlap(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether the spans of storage that the elements of two views of one storage lie in
    intersect (conservative: interleaved views with disjoint elements count)."""
    return spans_overlap(tensor_element_span(first), tensor_element_span(second))
