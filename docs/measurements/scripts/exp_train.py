"""Training rows: are they host-bound? The same step on tiny tensors (host time only) next to
the benchmark shape, for ours / eager / torch.compile, three repeats."""
import sys, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
import torchstrata.runtime as rt
from triton.testing import do_bench
rn = lambda *s: torch.randn(s, device="cuda").bfloat16()
for name, fn, make in (("K4/train", gk.rms_norm, lambda m, n: [rn(m, n), rn(n)]),
                       ("K5/train", gk.layer_norm, lambda m, n: [rn(m, n), rn(n), rn(n)])):
    for m, n in ((8, 64), (16384, 4096)):
        inputs = make(m, n)
        runner, _ = gk.prepare(fn, inputs, True)
        row = []
        for label, f in (("ours", rt.compile(fn)), ("eager", fn), ("TC", torch.compile(fn))):
            run = runner(f)
            run(); torch.cuda.synchronize()
            ts = [do_bench(run, warmup=10, rep=50, return_mode="median") * 1000 for _ in range(3)]
            row.append(f"{label} " + "/".join(f"{t:.0f}" for t in ts))
        print(f"{name} [{m},{n}] us: " + "  ".join(row), flush=True)
