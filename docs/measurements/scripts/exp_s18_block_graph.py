"""Session 18: the compiled channels-last BasicBlock's prims graph and kernels on the GPU
(bf16, inference), to see which values lose the channels-last layout there."""

import torch

import torchstrata.runtime as tsr
from bench.workloads.nets.resnet import BasicBlock

torch.manual_seed(0)
block = BasicBlock(64, 64).eval().cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
x = torch.randn(64, 64, 56, 56, device="cuda", dtype=torch.bfloat16).to(
    memory_format=torch.channels_last
)
with torch.no_grad():
    report = tsr.explain(tsr.compile(block), x)
    print(report.eager_ops)
    for graph in report.prims_graphs:
        print(graph)
    for kernel in report.kernels:
        source = kernel.source
        start = source.find(f"def {kernel.name}")
        print(kernel.name, kernel.backend, source[start : start + 1600] if start >= 0 else "")
    out = tsr.compile(block)(x)
    print("out strides", out.stride(), "eager", block(x).stride())
