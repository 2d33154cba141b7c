"""Host time of a tiny training step on the GPU, taken apart: our compiled K5/K4 training
steps ([8,64] bf16) against eager, with the autograd engine's device threads on and off,
and a trivial Python autograd.Function (one multiply each way) as the engine's floor."""
import sys
import time

import torch

sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk  # noqa: E402

import torchstrata.runtime as rt  # noqa: E402


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def rn(*s):
    return torch.randn(s, device="cuda").bfloat16()


def per_step(run, n=1000):
    for _ in range(30):
        run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


x0 = rn(8, 64).requires_grad_()
g0 = rn(8, 64)


def double_step():
    x0.grad = None
    torch.autograd.backward([Double.apply(x0)], [g0])


def eager_double_step():
    x0.grad = None
    torch.autograd.backward([x0 * 2], [g0])


for threads in (True, False):
    with torch.autograd.set_multithreading_enabled(threads):
        print(f"device threads={threads}: Python Function x*2 step {per_step(double_step):6.1f} us, "
              f"eager x*2 step {per_step(eager_double_step):6.1f} us", flush=True)
        for name, fn, inputs in (("K5/train", gk.layer_norm, [rn(8, 64), rn(64), rn(64)]),
                                 ("K4/train", gk.rms_norm, [rn(8, 64), rn(64)])):
            compiled = rt.compile(fn)
            fwd, _ = gk.prepare(fn, inputs, False)
            runner, _ = gk.prepare(fn, inputs, True)
            leaves = [x.detach().requires_grad_() for x in inputs]
            print(f"device threads={threads} {name}: ours forward {per_step(fwd(compiled)):6.1f}, "
                  f"ours forward with grad {per_step(lambda: compiled(*leaves)):6.1f}, "
                  f"ours step {per_step(runner(compiled)):6.1f}, eager step {per_step(runner(fn)):6.1f} us",
                  flush=True)
