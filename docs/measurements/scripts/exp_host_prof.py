"""Host time of a training step, ours: forward and backward apart (each call's return,
after a sync), then cProfile over 30 steps (top functions by own time), for K7/train F.ce
seeded with 1 and K5/train (LayerNorm [16384, 4096])."""
import cProfile, io, pstats, sys, time, torch
import torchstrata.runtime as ts
sys.path.insert(0, "packages/inductor/benchmarks")
from gpu_kernels import cross_entropy, layer_norm

g = torch.Generator(device="cuda").manual_seed(0)
def rn(*s):
    return torch.randn(s, device="cuda", generator=g).to(torch.bfloat16)
cases = {
    "K7 F.ce seed 1": (cross_entropy, [rn(8192, 32000).requires_grad_(), torch.randint(0, 32000, (8192,), device="cuda", generator=g)], "ones"),
    "K5/train": (layer_norm, [rn(16384, 4096).requires_grad_(), rn(4096).requires_grad_(), rn(4096).requires_grad_()], "random"),
}
for name, (f, args, seed) in cases.items():
    fn = ts.compile(f, fullgraph=True)
    out = fn(*args)
    grad = torch.ones_like(out) if seed == "ones" else torch.randn_like(out)
    def fwd():
        for a in args:
            if a.requires_grad: a.grad = None
        return fn(*args)
    for _ in range(10):
        fwd().backward(grad)
    torch.cuda.synchronize()
    f_t, b_t = [], []
    for _ in range(30):
        torch.cuda.synchronize(); s0 = time.perf_counter()
        o = fwd()
        s1 = time.perf_counter()
        torch.cuda.synchronize(); s2 = time.perf_counter()
        o.backward(grad)
        s3 = time.perf_counter()
        torch.cuda.synchronize()
        f_t.append((s1 - s0) * 1e6); b_t.append((s3 - s2) * 1e6)
    f_t.sort(); b_t.sort()
    print(f"{name}: host forward {f_t[15]:.1f} us, backward {b_t[15]:.1f} us (medians)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(30):
        fwd().backward(grad)
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
    lines = [l for l in buf.getvalue().splitlines() if l.strip()][5:30]
    print("\n".join(l[:150] for l in lines))
