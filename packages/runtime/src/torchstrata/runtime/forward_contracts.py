"""What a lowered forward promises the code around it: its user outputs and write-backs
(:func:`forward_contract`), and the layouts it returns saved values in, which the backward
is built for (:func:`saved_layouts`)."""

from __future__ import annotations

from torchstrata.core import AotResult, GraphContract, TensorMeta
from torchstrata.runtime.artifacts import Lowered
from torchstrata.runtime.runners import output_layout
from torchstrata.runtime.write_backs import differentiable_writes


def forward_contract(aot: AotResult, inference: bool) -> GraphContract:
    """What the runner promises about ``aot``'s forward: its user outputs (they come back
    in eager's layouts) and the outputs it writes back into which inputs (the updates
    producing them may run in place): for ``inference`` all of them, for training the
    differentiable ones, whose inputs the runner's ``autograd.Function`` marks dirty
    (decision 0520; the others stay functional, copied under ``no_grad``)."""
    num_user, mutated, _ = output_layout(aot)
    if inference:
        write_backs = {num_user + k: index for k, index in enumerate(mutated)}
    else:
        write_backs = dict(differentiable_writes(num_user, mutated, aot.tangent_outputs))
    return GraphContract(user_outputs=num_user, write_backs=write_backs)


def saved_layouts(aot: AotResult, forward: Lowered) -> tuple[TensorMeta | None, ...]:
    """For each saved value, the layout the lowered ``forward`` returns it in where that
    differs from the backward graph's input (None elsewhere): the backward is built for
    it (the ``input_layouts`` of its :class:`GraphContract`).

    The backward graph was traced with ATen's layouts of the saved values; a
    decomposition may lay one out otherwise (a reshape that ATen makes a view of a
    non-contiguous input comes out of the prims graph contiguous). Kernels index their
    inputs by the strides they were generated for, so the backward is built for the
    layout it will be given.
    """
    produced = forward.output_layouts
    if not produced or aot.backward is None or not aot.num_saved:
        return ()
    first = len(aot.forward.outputs) - aot.num_unit_grads - aot.num_saved
    produced = produced[first : first + aot.num_saved]
    layouts: list[TensorMeta | None] = []
    for node, have in zip(aot.backward.inputs, produced, strict=False):
        want = node.meta
        relaid = (
            isinstance(want, TensorMeta)
            and isinstance(have, TensorMeta)
            and (want.shape, want.dtype) == (have.shape, have.dtype)
            and want.strides != have.strides
        )
        layouts.append(have if relaid else None)
    return tuple(layouts) if any(layouts) else ()
