"""Typed options of the stages, carried in :class:`~torchstrata.core.CompileOptions`.

Each stage reads its switches from its own attrs object (``options.inductor``,
``options.autograd``), never from the environment where they are used. For debugging
and side-by-side measurements, :meth:`InductorOptions.from_env` and
:meth:`AutogradOptions.from_env` read the documented ``TORCHSTRATA_*`` variables once::

    CompileOptions(inductor=InductorOptions.from_env(), autograd=AutogradOptions.from_env())

A variable set to ``0`` turns its switch off, ``1`` on; unset keeps the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

#: The variables :meth:`InductorOptions.from_env` reads, by field.
INDUCTOR_VARIABLES = {
    "tails": "TORCHSTRATA_TAILS",
    "partials": "TORCHSTRATA_PARTIALS",
    "partials_prefetch": "TORCHSTRATA_PARTIALS_PREFETCH",
    "split_rows": "TORCHSTRATA_SPLIT_ROWS",
    "row_tiles": "TORCHSTRATA_ROW_TILES",
    "shifted_exps": "TORCHSTRATA_SHIFTED_EXPS",
    "reciprocals": "TORCHSTRATA_RECIPROCALS",
    "direct_launch": "TORCHSTRATA_DIRECT_LAUNCH",
    "cluster_rows": "TORCHSTRATA_CLUSTER_ROWS",
    "native_alloc": "TORCHSTRATA_NATIVE_ALLOC",
    "half_roundings": "TORCHSTRATA_HALF_ROUNDINGS",
    "flat_indices": "TORCHSTRATA_FLAT_INDICES",
}
#: The variables :meth:`AutogradOptions.from_env` reads, by field.
AUTOGRAD_VARIABLES = {"unit_grads": "TORCHSTRATA_UNIT_GRADS"}


def _switches(variables: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, Any]:
    """``{field: bool}`` for each variable set to ``0`` or ``1``; anything else is an error."""
    values = {}
    for field, variable in variables.items():
        value = environ.get(variable)
        if value is None or value == "":
            continue
        if value not in ("0", "1"):
            raise ValueError(f"{variable}={value!r}: expected 0 (off) or 1 (on)")
        values[field] = value == "1"
    return values


def _check_bool(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name}={value!r} must be a bool")


def _check_threads(instance: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name}={value!r} must be None or a positive int")


def _check_count(instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name}={value!r} must be a non-negative int")


@attrs.frozen
class InductorOptions:
    """Switches of the inductor's optimisations (all on by default; each off for
    measurements or to rule it out while debugging).

    * ``tails``: a full reduction over a row kernel's rows finished by its last program
      (Triton).
    * ``partials``: column partial sums fused into the row kernel reading the same rows
      (Triton); ``partials_prefetch``: their loops load one block ahead.
    * ``split_rows``: long rows reduced by several programs: None offers them from
      ``LONG_ROW_MIN`` elements on, True from ``SPLIT_MIN``, False never (Triton).
    * ``row_tiles``: pointwise kernels with per-row work generated as row kernels (Triton).
    * ``shifted_exps``: a row's ``exp(v - max)`` as a shifted ``exp2`` (Triton).
    * ``reciprocals``: a division by a per-row value as a multiplication (both backends).
    * ``direct_launch``: compiled Triton kernels launched without Triton's dispatch.
    * ``cluster_rows``: long rows walked by thread-block clusters (Hopper).
    * ``compile_threads``: threads compiling a Triton kernel's launch configurations at
      once before they are timed (None: one per CPU core, at most 16; 1: one by one).
    * ``tune_min_elements``: kernels over fewer elements (rows times reduced elements)
      launch their first candidate configuration without autotuning: their time is
      launch latency, whichever configuration runs (0: tune every kernel) (Triton).
    * ``onednn_matmuls``: float32 CPU ``mm``/``addmm`` externs called through oneDNN where it
      is faster than ATen's (MKL's): None times both once per shape and layout (symbolic
      sizes: once per size bucket when a call first reaches it, decision 0466), True takes
      oneDNN wherever it applies, False never (C++; decision 0375).
    * ``native_alloc``: launchers allocate kernel outputs through a small C++ extension
      calling ATen's ``empty_strided_cpu``/``empty_strided_cuda`` (built once per machine,
      kept in the on-disk cache; anything unusual still takes ``torch.empty_strided``);
      False, or where it cannot be built: ``torch.empty_strided`` (decision 0510).
    * ``half_roundings``: a bf16 or fp16 chain's intermediates are rounded to 16 bits
      where eager stores them, so results are eager's bit for bit; False keeps them in
      float32 through a fused kernel and rounds only where it stores, as torch.compile
      does by default (faster on the CPU; nearer the exact value, not eager's bits;
      both backends, decision 0525).
    * ``flat_indices``: a Triton kernel prints each load's and store's index over its flat
      ``xindex``/``rindex`` where that takes fewer divisions and remainders than over the
      per-dim variables derived from it (a contiguous access is ``xindex``, decision 0521).
    """

    tails: bool = attrs.field(default=True, validator=_check_bool)
    partials: bool = attrs.field(default=True, validator=_check_bool)
    partials_prefetch: bool = attrs.field(default=True, validator=_check_bool)
    split_rows: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(_check_bool)
    )
    row_tiles: bool = attrs.field(default=True, validator=_check_bool)
    shifted_exps: bool = attrs.field(default=True, validator=_check_bool)
    reciprocals: bool = attrs.field(default=True, validator=_check_bool)
    direct_launch: bool = attrs.field(default=True, validator=_check_bool)
    cluster_rows: bool = attrs.field(default=True, validator=_check_bool)
    compile_threads: int | None = attrs.field(default=None, validator=_check_threads)
    tune_min_elements: int = attrs.field(default=1 << 16, validator=_check_count)
    onednn_matmuls: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(_check_bool)
    )
    native_alloc: bool = attrs.field(default=True, validator=_check_bool)
    half_roundings: bool = attrs.field(default=True, validator=_check_bool)
    flat_indices: bool = attrs.field(default=True, validator=_check_bool)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> InductorOptions:
        """The defaults with each variable of :data:`INDUCTOR_VARIABLES` that is set
        (``0`` off, ``1`` on) applied: for debugging, never read implicitly."""
        return cls(**_switches(INDUCTOR_VARIABLES, os.environ if environ is None else environ))


@attrs.frozen
class AutogradOptions:
    """Switches of the autograd stage.

    * ``unit_grads``: a backward whose one tangent is a floating scalar computes its
      gradients for a unit tangent in the forward graph and scales them.
    """

    unit_grads: bool = attrs.field(default=True, validator=_check_bool)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AutogradOptions:
        """The defaults with ``TORCHSTRATA_UNIT_GRADS`` applied when set (``0``/``1``)."""
        return cls(**_switches(AUTOGRAD_VARIABLES, os.environ if environ is None else environ))
