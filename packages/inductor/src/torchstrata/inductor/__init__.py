"""torchstrata.inductor: prims graphs to fused Triton and C++ kernels with a Python launcher."""

from torchstrata.inductor.codegen.cpp.build import CppCompileError
from torchstrata.inductor.compile import CodegenError, choose_backend, compile_graph

__all__ = ["CodegenError", "CppCompileError", "choose_backend", "compile_graph"]
