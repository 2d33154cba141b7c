"""Host time of a training step, ours: forward and backward apart (each call's return,
after a sync), then cProfile over 30 steps (top functions by own time), for K7/train F.ce
seeded with 1 and K5/train (LayerNorm [16384, 4096])."""
import cProfile, pstats, sys, time, torch
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
    rows = []
    for (file, line, func), (cc, nc, tt, ct, callers) in pstats.Stats(prof).stats.items():
        rows.append((ct / 30 * 1e6, tt / 30 * 1e6, nc / 30, f"{func} {file.split('/')[-1]}:{line}"))
    rows.sort(reverse=True)
    for cum, own, calls, where in rows[:34]:
        print(f"  {cum:8.1f} cum {own:7.1f} own us/step  {calls:5.1f} calls  {where[:90]}")
    if name == "K7 F.ce seed 1":  # eager's host time, the same step
        def eager():
            args[0].grad = None
            f(*args).backward(grad)
        for _ in range(5):
            eager()
        e_t = []
        for _ in range(20):
            torch.cuda.synchronize(); s0 = time.perf_counter()
            o = f(*args); s1 = time.perf_counter(); o.backward(grad); s2 = time.perf_counter()
            e_t.append(((s1 - s0) * 1e6, (s2 - s1) * 1e6))
            args[0].grad = None
        e_t.sort()
        print(f"eager host forward/backward (median by forward): {e_t[10][0]:.1f} / {e_t[10][1]:.1f} us")
