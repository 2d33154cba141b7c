"""M5 (4-layer Llama decode step, bs 1) on the GPU: our compiled step's host time under
cProfile (top functions by own time), and the step's time without the profiler."""
import cProfile
import pstats
import sys
import time

import torch

sys.path.insert(0, ".")
from bench.workloads.models import m5  # noqa: E402
from bench.workloads.spec import DeviceProfile  # noqa: E402

import torchstrata.runtime as ts  # noqa: E402

case = m5(DeviceProfile("cuda"))[0].make()
model, args = case.fn, case.args
compiled = ts.compile(model)
with torch.no_grad():
    for _ in range(10):
        compiled(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(50):
        compiled(*args)
    torch.cuda.synchronize()
    print(f"step {(time.perf_counter() - start) / 50 * 1e6:.1f} us", flush=True)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(50):
        compiled(*args)
    torch.cuda.synchronize()
    profiler.disable()
stats = pstats.Stats(profiler)
stats.sort_stats("tottime").print_stats(25)
with torch.no_grad():
    report = ts.explain(model, *args)
print("kernels", len(report.kernels), "eager ops", len(report.eager_ops), sorted(set(report.eager_ops)))
