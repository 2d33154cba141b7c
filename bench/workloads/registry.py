"""Build the workload list for a device profile and filter it by id."""

from __future__ import annotations

from collections.abc import Sequence

from bench.workloads.kernels import KERNEL_FACTORIES
from bench.workloads.models import MODEL_FACTORIES
from bench.workloads.spec import DeviceProfile, Workload


def _matches(workload: Workload, wanted: str) -> bool:
    """``K3`` selects every K3 variant; ``K3/N=4096`` or ``M2/train`` select one."""
    return workload.id == wanted or workload.id.startswith(wanted + "/")


def select_workloads(profile: DeviceProfile, only: Sequence[str] = ()) -> list[Workload]:
    """All workloads for ``profile`` in perf.md order, or those matching ``only``.

    Raises ``ValueError`` for an ``only`` entry that matches nothing.
    """
    every = [w for make in (*KERNEL_FACTORIES, *MODEL_FACTORIES) for w in make(profile)]
    if not only:
        return every
    unknown = [o for o in only if not any(_matches(w, o) for w in every)]
    if unknown:
        raise ValueError(f"unknown workload id(s): {', '.join(unknown)}")
    return [w for w in every if any(_matches(w, o) for o in only)]
