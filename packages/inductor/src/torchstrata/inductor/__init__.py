"""torchstrata.inductor: prims graphs to fused Triton and C++ kernels with a Python launcher."""

from torchstrata.inductor.codegen.backend import Backend, BuiltLaunch
from torchstrata.inductor.codegen.cpp.build import CppCompileError
from torchstrata.inductor.codegen.registry import BackendSpec, CodegenError, choose_backend
from torchstrata.inductor.compile import compile_graph
from torchstrata.inductor.ir.format import format_kernel
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.launcher import KernelLaunch
from torchstrata.inductor.schedule.plan_passes import PlanPass

__all__ = [
    "Backend",
    "BackendSpec",
    "BuiltLaunch",
    "CodegenError",
    "CppCompileError",
    "Kernel",
    "KernelLaunch",
    "PlanPass",
    "choose_backend",
    "compile_graph",
    "format_kernel",
]
