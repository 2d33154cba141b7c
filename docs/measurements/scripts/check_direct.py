"""Direct launches on the GPU: results of the third call (launched directly) match eager."""
import sys, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
import torchstrata.runtime as rt
from torchstrata.inductor import triton_launch
count = [0]
orig = triton_launch.DirectLaunch._launch
def counted(self, args):
    count[0] += 1
    return orig(self, args)
triton_launch.DirectLaunch._launch = counted
want = {"K1", "K3/N=4096", "K5 [16384,4096]", "K6 (no dropout)", "K7 F.ce [8192,32000]", "K8", "K4/train", "K5/train", "K7/train F.ce"}
for w in gk.workloads(False, "cuda"):
    if w["id"] not in want:
        continue
    inputs = w["make"]()
    compiled = rt.compile(w["fn"])
    runner, _ = gk.prepare(w["fn"], inputs, w["train"])
    run = runner(compiled)
    run(); run()
    before = count[0]
    status = gk.check(w["fn"], compiled, inputs, w["train"])
    print(f"{w['id']:<24} {status}  direct launches in the checked call: {count[0] - before}", flush=True)
