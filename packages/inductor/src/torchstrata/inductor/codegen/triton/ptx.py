"""Ahead-of-time PTX of a kernel under a launch configuration, no GPU needed.

Triton compiles for a named target (``sm_90`` by default, the H200) from the generated
source, specialised the way a launch would be: the constants, 16-byte aligned pointers
(torch allocations are), the warps and pipelining stages. Tests use it to check on a
machine without a GPU that every variant the autotuner may pick compiles and what it
compiles to (vector widths, predication, atomics).
"""

from __future__ import annotations

import tempfile

import torch

from torchstrata.inductor.codegen.triton.backend import load_module
from torchstrata.inductor.codegen.triton.cluster import CLUSTER_PARAMS
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.printer import (
    rounds_to_half,
    size_params,
    size_values,
)
from torchstrata.inductor.codegen.triton.split import SCRATCH_PARAMS, generate_split_triton
from torchstrata.inductor.codegen.triton.tuning import Config
from torchstrata.inductor.ir.kernel import Kernel

POINTER_TYPES = {
    torch.float32: "*fp32",
    torch.float64: "*fp64",
    torch.float16: "*fp16",
    torch.bfloat16: "*bf16",
    torch.int64: "*i64",
    torch.int32: "*i32",
    torch.bool: "*i1",
}
_SCRATCH_TYPES = {"ts_partials": "*fp32", "ts_counters": "*i32"}


def kernel_ptx(
    kernel: Kernel,
    config: Config,
    *,
    capability: int = 90,
    cache_dir: str | None = None,
    fp_fusion: bool | None = None,
    **flags: bool,
) -> str:
    """PTX of ``kernel`` launched with ``config`` on a GPU of compute ``capability``.

    ``flags`` go to :func:`generate_triton` (``even_rows``, ``even_row``). ``fp_fusion``:
    Triton's ``enable_fp_fusion``; by default as the backend sets it (off for a kernel
    that rounds intermediates to 16 bits, :func:`rounds_to_half`).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if config.split > 1:
        source = generate_split_triton(kernel, config.split, config.rblock)
        extra = list(SCRATCH_PARAMS)
    else:
        source = generate_triton(
            kernel,
            interpret=False,
            persistent=config.persistent,
            group=config.group,
            cluster=config.cluster,
            **flags,
        )
        extra = list(CLUSTER_PARAMS) if config.cluster > 1 else []
    module, _ = load_module(source, kernel.name, cache_dir or tempfile.mkdtemp(), False)
    signature = {arg.name: POINTER_TYPES[arg.dtype] for arg in kernel.args}
    signature |= {name: _SCRATCH_TYPES[name] for name in extra}
    # the number of rows as a launch passes it: an i32 (i64 from 2**31), specialised by
    # Triton as a multiple of 16 when it is one
    # and the other size arguments (``rnumel``, a horizontal kernel's parts' elements)
    sizes = [kernel.rows, *size_values(kernel).values()]
    names = size_params(kernel)
    signature |= {name: "i64" if size >= 2**31 else "i32" for name, size in zip(names, sizes)}
    signature |= {"XBLOCK": "constexpr", "RBLOCK": "constexpr"}
    pointers = len(kernel.args) + len(extra)
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(pointers)}
    for position, size in enumerate(sizes, start=pointers):
        if size % 16 == 0:
            attrs[(position,)] = [["tt.divisibility", 16]]
    constants = {"XBLOCK": config.xblock, "RBLOCK": config.rblock}
    ast = ASTSource(getattr(module, kernel.name), signature, constants, attrs)
    options = {
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "enable_fp_fusion": not rounds_to_half(source) if fp_fusion is None else fp_fusion,
    }
    target = GPUTarget("cuda", capability, 32)
    return triton.compile(ast, target=target, options=options).asm["ptx"]
