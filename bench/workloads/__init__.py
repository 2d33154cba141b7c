"""Benchmark workloads: the kernel set K1-K9 and the models M1-M5 of perf.md."""

from bench.workloads.registry import select_workloads
from bench.workloads.spec import Case, DeviceProfile, Workload

__all__ = ["Case", "DeviceProfile", "Workload", "select_workloads"]
