"""A C++ kernel to build as a JSON record, and back (for the compiled-graph cache).

The record holds what :func:`~torchstrata.inductor.codegen.cpp.build.build_kernels`
needs: the source, its entry point, the numbers of buffer and size arguments and the checks the
kernel makes (each an attrs record: a gather check's buffer and size, or the division
check). The library is not in it: it is looked up in the kernel cache by its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchstrata.inductor.codegen.cpp.build import KernelSource, canonical_of
from torchstrata.inductor.codegen.cpp.checks import GatherCheck, KernelCheck
from torchstrata.inductor.codegen.cpp.division import DivisionCheck


def _check_record(check: KernelCheck) -> dict[str, Any]:
    if isinstance(check, GatherCheck):
        return {"gather": [check.buffer, check.size]}
    return {"division": []}


def _check_from_record(record: Mapping[str, Any]) -> KernelCheck:
    if set(record) == {"gather"}:
        buffer, size = record["gather"]
        if not isinstance(buffer, str) or not isinstance(size, int):
            raise ValueError(f"bad gather check record {record!r}")
        return GatherCheck(buffer, size)
    if set(record) == {"division"}:
        return DivisionCheck()
    raise ValueError(f"unknown kernel check record {record!r}")


def kernel_record(kernel: KernelSource) -> dict[str, Any]:
    """``kernel`` as JSON types, with its canonical source and entry point (so that
    loading it does not rename it again)."""
    text, symbol = canonical_of(kernel)
    return {
        "name": kernel.name,
        "source": kernel.source,
        "num_args": kernel.num_args,
        "num_sizes": kernel.num_sizes,
        "checks": [_check_record(check) for check in kernel.checks],
        "canonical": [text, symbol],
    }


def kernel_from_record(record: Mapping[str, Any]) -> KernelSource:
    """The kernel that :func:`kernel_record` wrote as ``record``."""
    name, source, num_args = record["name"], record["source"], record["num_args"]
    if not (isinstance(name, str) and isinstance(source, str) and isinstance(num_args, int)):
        raise ValueError("a C++ kernel record needs a str name and source and an int num_args")
    num_sizes = record.get("num_sizes", 0)  # none in records written before kernels took sizes
    if not isinstance(num_sizes, int):
        raise ValueError("a C++ kernel record's num_sizes must be an int")
    checks = tuple(_check_from_record(check) for check in record["checks"])
    text, symbol = record["canonical"]
    if not (isinstance(text, str) and isinstance(symbol, str) and symbol in text):
        raise ValueError("a C++ kernel record's canonical source must name its entry point")
    return KernelSource(source, name, num_args, checks, (text, symbol), num_sizes)
