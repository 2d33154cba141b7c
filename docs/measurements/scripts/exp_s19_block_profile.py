"""Session 19: where the compiled channels-last ResNet BasicBlock (M4/block, bs 64,
64x56x56, bf16, inference) spends its GPU time against torch.compile: each CUDA kernel's
time under torch.profiler for ours, torch.compile and eager, and our kernels' sources."""

import torch
from torch.profiler import ProfilerActivity, profile

import torchstrata.runtime as tsr
from bench.workloads.nets.resnet import BasicBlock, randomize_batchnorm

torch.manual_seed(0)
block = BasicBlock(64, 64).eval()
randomize_batchnorm(block)
block = block.cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
x = torch.randn(64, 64, 56, 56, device="cuda", dtype=torch.bfloat16).to(
    memory_format=torch.channels_last
)
ours = tsr.compile(block)
tc = torch.compile(block)
with torch.no_grad():
    report = tsr.explain(ours, x)
    for kernel in report.kernels:
        source = kernel.source
        start = source.find(f"def {kernel.name}")
        print(kernel.name, kernel.backend, source[start : start + 2400] if start >= 0 else "")
for label, fn in (("ours", ours), ("torch.compile", tc), ("eager", block)):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn(x)
            torch.cuda.synchronize()
    print("==", label)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=90))
