"""Time per call of M5 (4-layer Llama decode step) and M1/mlp compiled by the installed
torchstrata, in a process of its own with nothing else compiled: best of 15 batches of
back-to-back calls, the GPU synced per batch, with eager's time measured the same way in
the same process. Run once per build, alternating builds, to compare host time."""
import sys
import time

import torch

sys.path.insert(0, ".")
from bench.workloads.models import m1, m5  # noqa: E402
from bench.workloads.spec import DeviceProfile  # noqa: E402

import torchstrata.runtime as ts  # noqa: E402

profile = DeviceProfile("cuda")
cases = {"M5": m5(profile)[0].make(), "M1/mlp": m1(profile)[1].make()}
if len(sys.argv) > 1:  # e.g. "M5"
    cases = {name: case for name, case in cases.items() if name in sys.argv[1].split(",")}


def best_us(fn, calls):
    best = float("inf")
    for _ in range(15):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


line = []
for name, case in cases.items():
    model, args = case.fn, case.args
    compiled = ts.compile(model)
    with torch.no_grad():  # as the benchmark runs these inference workloads
        for _ in range(5):
            compiled(*args)
            model(*args)
        calls = 50 if name == "M5" else 400
        ours, eager = best_us(lambda: compiled(*args), calls), best_us(lambda: model(*args), calls)
    line.append(f"{name} ours {ours:7.1f} us eager {eager:7.1f} us ({eager / ours:.2f}x)")
print(" | ".join(line), flush=True)
