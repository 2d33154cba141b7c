"""The kernel table's K7/train explicit rows in its order (random seed, then seed 1):
which forwards compute unit gradients (UnitGrads.expected / take), and the time per step."""
import sys, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
import torchstrata.runtime as ts
from torchstrata.runtime import unit_grads as ug
from triton.testing import do_bench
calls = []
orig_expected, orig_take = ug.UnitGrads.expected, ug.UnitGrads.take
def expected(self):
    r = orig_expected(self); calls.append("E" if r else "e"); return r
def take(self, inputs, outputs):
    r = orig_take(self, inputs, outputs); calls.append("T" if r is not None else "t"); return r
ug.UnitGrads.expected, ug.UnitGrads.take = expected, take
rows = {r["id"]: r for r in gk.workloads(False, "cuda")}
for name in sys.argv[1:]:
    row = rows[name]
    inputs = row["make"]()
    compiled = ts.compile(row["fn"], fullgraph=True)
    runner, _ = gk.prepare(row["fn"], inputs, True, seed=row["seed"])
    calls.clear()
    runner(compiled)()
    status = gk.check(row["fn"], compiled, inputs, True, row["seed"])
    head = "".join(calls); calls.clear()
    ms = do_bench(runner(compiled), warmup=10, rep=50, return_mode="median")
    text = "".join(calls)
    print(f"{name}: {ms:.3f} ms {status}; first call+check {head}; bench {text[:40]}...{text[-20:]} ({text.count('T')} unit-grad forwards of {text.count('E') + text.count('e')})")
