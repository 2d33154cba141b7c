"""Session 18: where the compiled channels-last ResNet BasicBlock (M4/block, bs 64,
64x56x56, bf16, inference) spends its GPU time: the top CUDA kernels of ours and of
eager under torch.profiler."""

import torch
from torch.profiler import ProfilerActivity, profile

import torchstrata.runtime as tsr
from bench.workloads.nets.resnet import BasicBlock

torch.manual_seed(0)
block = BasicBlock(64, 64).eval().cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
x = torch.randn(64, 64, 56, 56, device="cuda", dtype=torch.bfloat16).to(
    memory_format=torch.channels_last
)
ours = tsr.compile(block)
for label, fn in (("ours", ours), ("eager", block)):
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn(x)
            torch.cuda.synchronize()
    print("==", label)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=70))
