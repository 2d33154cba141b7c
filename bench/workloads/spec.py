"""The shape of a workload: what the runner needs to build, run and judge it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# A function that rebuilds the fp64 reference from the outputs a compiler produced.
# It exists for workloads with randomness (dropout), whose reference depends on the
# mask that the run drew. It raises ``WrongResult`` when the outputs cannot be right.
ReferenceFromOutputs = Callable[
    [Sequence[Any], Sequence[torch.Tensor], Sequence[torch.Tensor] | None], list[torch.Tensor]
]


#: The working dtypes that ``--dtype`` may name.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class DeviceProfile:
    """Where and at which size the suite runs.

    ``kind`` is ``"cuda"`` (perf.md H200 shapes, bf16) or ``"cpu"`` (perf.md CPU
    shapes, fp32); ``quick`` shrinks every shape to a toy size for smoke tests;
    ``dtype_name`` (``"bfloat16"``, ``"float16"``, ``"float32"``) overrides the working
    dtype, e.g. to time 16-bit kernels on the CPU.
    """

    kind: str
    quick: bool = False
    dtype_name: str | None = None

    @property
    def device(self) -> torch.device:
        """The torch device workloads allocate on."""
        return torch.device(self.kind)

    @property
    def dtype(self) -> torch.dtype:
        """Working dtype of kernel inputs: ``dtype_name``, else bf16 on CUDA, fp32 on CPU."""
        if self.dtype_name is not None:
            return DTYPES[self.dtype_name]
        return torch.bfloat16 if self.kind == "cuda" else torch.float32

    def pick(self, cuda: Any, cpu: Any, quick: Any) -> Any:
        """Return the size that applies to this profile."""
        if self.quick:
            return quick
        return cuda if self.kind == "cuda" else cpu


@dataclass
class Case:
    """One built instance of a workload: a callable and the arguments to call it with.

    ``fn`` is a plain function or an ``nn.Module`` (compilers receive it as is).
    ``grad_outputs`` are the gradients fed to ``backward`` for training workloads;
    ``None`` means the output is a scalar loss.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    grad_outputs: tuple[torch.Tensor, ...] | None = None


@dataclass(frozen=True)
class Workload:
    """A benchmark workload, already specialised to a device profile.

    Attributes:
        id: short id such as ``"K3/N=4096"``; the part before ``/`` is the perf.md id.
        name: human-readable description with the shape.
        make: builds a fresh :class:`Case` (random weights, fixed seed).
        train: time forward + backward and compare gradients as well as outputs.
        memory_bound: report achieved GB/s and % of the copy ceiling.
        overhead: also measure host time per call over many back-to-back calls.
        reference: rebuilds the fp64 reference from produced outputs (random ops).
        tags: free-form notes shown in the JSON.
    """

    id: str
    name: str
    make: Callable[[], Case]
    train: bool = False
    memory_bound: bool = False
    overhead: bool = False
    reference: ReferenceFromOutputs | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def group(self) -> str:
        """``"K"`` for kernels, ``"M"`` for models."""
        return self.id[0]

    @property
    def base_id(self) -> str:
        """The perf.md id (``"K3"`` for ``"K3/N=4096"``)."""
        return self.id.split("/")[0]


class WrongResult(Exception):
    """Raised by a reference builder when produced outputs cannot be correct."""
