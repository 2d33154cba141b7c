"""Print torch.compile's generated code (output_code) for selected gpu_kernels workloads."""
import sys, logging, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
from triton.testing import do_bench
torch._logging.set_logs(output_code=True)
wanted = sys.argv[1].split(";")
for w in gk.workloads(False, "cuda"):
    if w["id"] not in wanted:
        continue
    print("==", w["id"], flush=True)
    args = w["make"]()
    c = torch.compile(w["fn"])
    c(*args); torch.cuda.synchronize()
    print("== TC ms", w["id"], do_bench(lambda: c(*args), warmup=10, rep=50, return_mode="median"), flush=True)
