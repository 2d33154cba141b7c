"""torchstrata.inductor: prims graphs to fused Triton and C++ kernels with a Python launcher."""

from torchstrata.inductor.compile import CodegenError, choose_backend, compile_graph
from torchstrata.inductor.cpp_build import CppCompileError

__all__ = ["CodegenError", "CppCompileError", "choose_backend", "compile_graph"]
