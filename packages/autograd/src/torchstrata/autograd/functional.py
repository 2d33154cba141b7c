"""Finding the functional ATen overload that stands for an in-place (mutating) one."""

from __future__ import annotations

import torch


def written_arguments(func: torch._ops.OpOverload) -> list[str]:
    """Names of the schema arguments ``func`` writes to (``self`` for ``add_``, ``out``...)."""
    return [
        argument.name
        for argument in func._schema.arguments
        if argument.alias_info is not None and argument.alias_info.is_write
    ]


def functional_counterpart(func: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The out-of-place overload computing what the in-place ``func`` writes into ``self``.

    ``aten.add_.Tensor`` gives ``aten.add.Tensor``, ``aten.copy_.default`` gives
    ``aten.copy.default``, ``aten.fill_.Scalar`` gives ``aten.fill.Scalar``.

    :raises NotImplementedError: if ``func`` is not an ``op_`` overload that writes only
        ``self``, or no functional overload of the same name exists.
    """
    namespace, _, rest = func.name().partition("::")
    packet, _, overload = rest.partition(".")
    written = written_arguments(func)
    if namespace != "aten" or written != ["self"] or not packet.endswith("_"):
        raise NotImplementedError(
            f"mutating op {func.name()} (writes {', '.join(written) or 'nothing'}) has no "
            "functional form here; out= and multi-output mutation need functionalization"
        )
    functional_packet = getattr(torch.ops.aten, packet.removesuffix("_"), None)
    functional = getattr(functional_packet, overload or "default", None)
    if functional is None or written_arguments(functional):
        raise NotImplementedError(f"in-place op {func.name()} has no functional ATen counterpart")
    return functional
