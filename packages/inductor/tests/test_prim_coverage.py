"""Every prim has a lowering, and every backend either prints what it claims to support or
declares it unsupported: a prim added to core, or a spelling dropped from a printer,
fails here rather than in a user's graph."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from torchstrata.core import (
    CompileOptions,
    Graph,
    GraphBuilder,
    Level,
    MetaInferenceError,
    Prim,
    PrimError,
    PrimFamily,
    TensorMeta,
)
from torchstrata.core.prims import ELEMENTWISE_FAMILIES
from torchstrata.inductor.codegen.backend import CppBackend
from torchstrata.inductor.codegen.cpp.build import SIMD_MATH_CANDIDATES
from torchstrata.inductor.codegen.triton.backend import TritonBackend
from torchstrata.inductor.compile import schedule_graph
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.ir.kernel_ops import KernelOp
from torchstrata.inductor.schedule.lowering import LOWERINGS

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool)
SHAPE = (4, 8)


def _generate_cpp(kernel: Kernel) -> list[str]:
    return [CppBackend().generate(kernel, frozenset(SIMD_MATH_CANDIDATES))]


def _generators() -> dict[str, tuple[object, Callable[[Kernel], list[str]]]]:
    gpu = TritonBackend(interpret=False)
    interpreted = TritonBackend(interpret=True)
    return {
        "cpp": (CppBackend(), _generate_cpp),
        "triton": (gpu, lambda k: [s for _, s in gpu.generate(k, clusters=False)[2]]),
        "triton-interpret": (
            interpreted,
            lambda k: [s for _, s in interpreted.generate(k, clusters=False)[2]],
        ),
    }


def _elementwise_graph(member: Prim, dtype: torch.dtype) -> Graph | None:
    """A graph applying ``member`` to ``dtype`` operands; None where the prim does not
    take that dtype (its meta function refuses it)."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, dtype))
    y = b.input("y", TensorMeta(SHAPE, dtype))
    try:
        if member.family is PrimFamily.CAST:
            target = torch.int64 if dtype.is_floating_point else torch.float32
            out = b.call(member.op, x, target)
        elif member.family is PrimFamily.TERNARY:
            c = b.input("c", TensorMeta(SHAPE, torch.bool))
            out = b.call(member.op, c, x, y)
        elif member.family is PrimFamily.UNARY:
            out = b.call(member.op, x)
        else:
            out = b.call(member.op, x, y)
    except (PrimError, MetaInferenceError, TypeError, ValueError):
        return None
    return b.build([out])


def _reduction_graph(member: Prim, dtype: torch.dtype) -> Graph | None:
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(SHAPE, dtype))
    try:
        return b.build([b.call(member.op, x, (1,))])
    except (PrimError, MetaInferenceError, TypeError, ValueError):
        return None


def _rand_graph() -> Graph:
    b = GraphBuilder(Level.PRIMS)
    seed = b.input("seed", TensorMeta((), torch.int64))
    return b.build([b.call(Prim.RAND.op, list(SHAPE), seed, 0, torch.float32, torch.device("cpu"))])


def _kernels(graph: Graph, backend) -> list[Kernel]:
    plan = schedule_graph(graph, backend, CompileOptions()).plan
    return [step for step in plan.steps if isinstance(step, Kernel)]


def _printed(generate: Callable[[Kernel], list[str]], kernel: Kernel, what: str) -> list[str]:
    try:
        return generate(kernel)
    except Exception as error:  # any failure to print is the finding
        raise AssertionError(
            f"{what}: the backend's supports() claims it, but its printer fails "
            f"({type(error).__name__}: {error}); print it or declare it unsupported"
        ) from error


def test_every_prim_has_a_lowering():
    assert set(LOWERINGS) == set(Prim), set(Prim) ^ set(LOWERINGS)


@pytest.mark.parametrize("backend_name", ["cpp", "triton", "triton-interpret"])
def test_every_supported_elementwise_prim_is_printed(backend_name):
    backend, generate = _generators()[backend_name]
    elementwise = [m for m in Prim if m.family in ELEMENTWISE_FAMILIES]
    printed = 0
    for member in elementwise:
        for dtype in DTYPES:
            graph = _elementwise_graph(member, dtype)
            if graph is None or not backend.supports(member.value, dtype):
                continue  # not a graph, or declared unsupported: ATen runs it
            kernels = _kernels(graph, backend)
            assert kernels, f"{member} on {dtype}: supported, yet no kernel generated"
            for kernel in kernels:
                sources = _printed(generate, kernel, f"{backend_name}: {member} on {dtype}")
                assert sources and all(sources), f"{member} on {dtype}: empty source"
            printed += 1
    assert printed > len(elementwise)  # most prims on several dtypes


@pytest.mark.parametrize("backend_name", ["cpp", "triton", "triton-interpret"])
def test_every_supported_reduction_and_kernel_op_is_printed(backend_name):
    backend, generate = _generators()[backend_name]
    for member in Prim:
        if member.family is not PrimFamily.REDUCTION:
            continue
        for dtype in DTYPES:
            graph = _reduction_graph(member, dtype)
            if graph is None or not backend.supports(member.value, dtype):
                continue
            for kernel in _kernels(graph, backend):
                assert all(_printed(generate, kernel, f"{backend_name}: {member} on {dtype}"))
    for op in KernelOp:
        assert op is KernelOp.RAND_BITS, f"{op}: add a graph that lowers to it here"
        if backend.supports(op.value, torch.int64):
            (kernel,) = _kernels(_rand_graph(), backend)
            assert all(_printed(generate, kernel, f"{backend_name}: {op}"))
