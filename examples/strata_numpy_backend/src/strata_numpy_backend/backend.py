"""``NumpyBackend``: the inductor's backend interface, kernels run by :mod:`.evaluate`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from strata_numpy_backend.evaluate import SUPPORTED, KernelFunction, numpy_dtype
from torchstrata.core import CompileOptions, GraphPass, KernelInfo
from torchstrata.inductor import (
    BuiltLaunch,
    CodegenError,
    Kernel,
    KernelLaunch,
    PlanPass,
    format_kernel,
)


def _call(handle: str, args: Sequence[str]) -> str:
    return f"{handle}({', '.join(args)})"


class NumpyBackend:
    """Fused kernels of the loop IR evaluated with NumPy, one array per value."""

    name = "numpy"

    def supports(self, prim: str, dtype: torch.dtype) -> bool:
        """The prims of :data:`~strata_numpy_backend.evaluate.SUPPORTED`, on dtypes NumPy has."""
        return numpy_dtype(dtype) is not None and prim in SUPPORTED.get(dtype, ())

    def graph_passes(self) -> Sequence[GraphPass]:
        """None beyond the common ones."""
        return ()

    def plan_passes(self) -> Sequence[PlanPass]:
        """None: no tails, partials or horizontal kernels (the evaluator walks plain kernels)."""
        return ()

    def build(self, kernel: Kernel, options: CompileOptions) -> BuiltLaunch:
        """A Python callable that evaluates ``kernel``; its "source" is the IR printout."""
        for arg in kernel.args:
            if numpy_dtype(arg.dtype) is None:
                raise CodegenError(f"the numpy backend has no NumPy dtype for {arg.dtype}")
        function = KernelFunction(kernel)
        info = KernelInfo(kernel.name, self.name, format_kernel(kernel), "", kernel.ops)
        return BuiltLaunch(KernelLaunch(kernel, function, _call), info)
