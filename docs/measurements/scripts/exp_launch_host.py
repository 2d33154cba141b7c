"""Host time of one direct Triton launch (triton_launch.DirectLaunch) on the GPU machine,
piece by piece: what each check of the hot path costs, against the C launcher alone and
an eager torch launch of the same pointwise work."""
import time

import torch
from triton import knobs

from torchstrata.core import CompileOptions, GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor import compile_graph, triton_launch
from torchstrata.inductor.triton_launch import DirectLaunch
from torchstrata.inductor.triton_tuning import TunedKernel

b = GraphBuilder(Level.PRIMS)
x = b.input("x", TensorMeta((4096,), torch.float32, torch.device("cuda")))
graph = b.build([b.call(prim("add"), b.call(prim("mul"), x, 2.0), 1.0)])
compiled = compile_graph(graph, "cuda", CompileOptions(codegen="triton"))
(tuned,) = [v for v in compiled.fn.__globals__.values() if isinstance(v, TunedKernel)]
xv = torch.randn(4096, device="cuda")
out = torch.empty_like(xv)
for _ in range(5):
    compiled(xv)
launch = getattr(tuned, 'run', None) or tuned._run
assert isinstance(launch, DirectLaunch), launch
torch.cuda.synchronize()
assert launch.proven
dev = triton_launch._current_device()
stream = triton_launch.current_stream(dev)


def us(fn, n=20000):
    best = 1e9
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


args = (xv, out)
gx, gy, gz = launch.grid
head, extra, raw = launch.head, launch.extra, launch.launcher
rows = {
    "TunedKernel(x, out)": lambda: tuned(*args),
    "DirectLaunch(x, out)": lambda: launch(*args),
    "DirectLaunch._launch(args)": lambda: launch._launch(args),
    "the whole compiled graph (alloc + launch)": lambda: compiled.fn(xv),
    "C launcher alone": lambda: raw(gx, gy, gz, stream, *head, *args, *extra),
    "_current_device()": triton_launch._current_device,
    "_hooked()": triton_launch._hooked,
    "_aligned(args)": lambda: triton_launch._aligned(args),
    "current_stream(dev)": lambda: triton_launch.current_stream(dev),
    "torch.cuda.current_device()": torch.cuda.current_device,
    "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
    "knobs.runtime.launch_enter_hook": lambda: knobs.runtime.launch_enter_hook,
    "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
    "eager x.mul(2).add_(1)": lambda: xv.mul(2).add_(1),
    "eager torch.add(x, 1, out=out)": lambda: torch.add(xv, 1, out=out),
}
for name, fn in rows.items():
    print(f"{name:45s} {us(fn):7.2f} us", flush=True)
