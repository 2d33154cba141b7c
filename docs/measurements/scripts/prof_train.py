"""Where does a tiny training step's host time go (ours, K5/train and K4/train at [8,64])?"""
import sys, time, cProfile, pstats, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
import torchstrata.runtime as rt
rn = lambda *s: torch.randn(s, device="cuda").bfloat16()
for name, fn, inputs in (("K5/train", gk.layer_norm, [rn(8, 64), rn(64), rn(64)]),
                         ("K4/train", gk.rms_norm, [rn(8, 64), rn(64)])):
    for train in (False, True):
        runner, _ = gk.prepare(fn, inputs, train)
        for label, f in (("ours", rt.compile(fn)), ("eager", fn)):
            run = runner(f)
            for _ in range(20): run()
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(500): run()
            torch.cuda.synchronize()
            print(f"{name} train={train} {label}: {(time.perf_counter() - t) / 500 * 1e6:.1f} us/step wall", flush=True)
    runner, _ = gk.prepare(fn, inputs, True)
    run = runner(rt.compile(fn))
    for _ in range(20): run()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(300): run()
    torch.cuda.synchronize()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(22)
