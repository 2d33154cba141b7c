"""M5 (4-layer Llama decode step, bs 1, static KV cache) on the GPU with CUDA graphs:
eager, torch.compile default and mode="reduce-overhead", ours default and
mode="reduce-overhead"; wall time per step (device synced every 20 steps), and each
compiled step's output against eager's over a few steps (models deep-copied per contender,
so every cache sees the same updates)."""
import copy
import sys
import time

import torch

sys.path.insert(0, ".")
from bench.workloads.models import m5  # noqa: E402
from bench.workloads.spec import DeviceProfile  # noqa: E402

import torchstrata.runtime as ts  # noqa: E402

case = m5(DeviceProfile("cuda"))[0].make()
base, (tokens, pos) = case.fn, case.args
contenders = {
    "eager": lambda m: m,
    "torch.compile": lambda m: torch.compile(m),
    "torch.compile reduce-overhead": lambda m: torch.compile(m, mode="reduce-overhead"),
    "ours": lambda m: ts.compile(m),
    "ours reduce-overhead": lambda m: ts.compile(m, mode="reduce-overhead"),
}
reference = copy.deepcopy(base)
steps = [(torch.tensor([[5 + i]], device="cuda"), torch.tensor([100 + i], device="cuda")) for i in range(6)]
with torch.no_grad():
    want = [reference(t, p).float() for t, p in steps]
    for name, make in contenders.items():
        model = copy.deepcopy(base)
        fn = make(model)
        errors = [(fn(t, p).float() - w).abs().max().item() for (t, p), w in zip(steps, want)]
        for _ in range(10):
            fn(tokens, pos)
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(20):
                fn(tokens, pos)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) / 20 * 1e6)
        times.sort()
        print(f"{name:>30}: {times[2]:8.1f} us/step  max err vs eager over 6 steps {max(errors):.2e}", flush=True)
