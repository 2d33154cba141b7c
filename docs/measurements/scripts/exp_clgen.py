"""Generated split-row kernels (triton_split) launched as thread-block clusters
(``cluster=True``, triton_launch.ClusterLaunch) against the same kernels with tickets and
counters, and torch's copy: softmax over bf16 rows of 65536 and 262144 (K3), and a
two-phase LayerNorm with a ragged last chunk checked against torch.

Ran once, against a working tree whose ``generate_split_triton`` took ``cluster=True``
(ticket from the program id, cluster barriers for the waits). That option was then removed:
register-held chunks were no faster in clusters than with tickets; the looped chunks of
``triton_cluster`` were kept instead. This script no longer runs against main."""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, "packages/inductor/tests")
from ceiling import copy_ceiling  # noqa: E402
from gen_k3 import kernel_for  # noqa: E402
from test_split_rows import _kernel, _layer_norm  # noqa: E402

from torchstrata.inductor.triton_backend import load_module  # noqa: E402
from torchstrata.inductor.triton_launch import ClusterLaunch  # noqa: E402
from torchstrata.inductor.triton_split import generate_split_triton, scratch_sizes  # noqa: E402


def launcher(kernel, chunk, warps, cluster):
    split = -(-kernel.row_length // chunk)
    source = generate_split_triton(kernel, split, chunk, cluster=cluster)
    module, _ = load_module(source, kernel.name, None, False)
    fn = getattr(module, kernel.name)
    floats, counters = scratch_sizes(kernel, split, cluster)
    part = torch.empty(floats, device="cuda")
    count = torch.zeros(counters, dtype=torch.int32, device="cuda")
    constants = {"XBLOCK": 1, "RBLOCK": chunk, "num_warps": warps, "num_stages": 1}
    if cluster:
        run = ClusterLaunch(fn, kernel.rows, split, constants)
    else:
        grid = (kernel.rows * split,)
        def run(*args):
            fn[grid](*args, **constants)
    return lambda *args: run(*args, part, count)


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    # correctness first: LayerNorm (two waits, rstd stored once per row, ragged chunk)
    norm = _kernel(_layer_norm(64, 40000))
    x = torch.randn(64, 40000, device="cuda")
    out, rstd = torch.empty_like(x), torch.empty(64, device="cuda")
    mean = x.mean(1, keepdim=True)
    var = ((x - mean) ** 2).mean(1, keepdim=True)
    for chunk, warps in ((8192, 4), (8192, 8)):
        for cluster in (True, False):
            run = launcher(norm, chunk, warps, cluster)
            for _ in range(3):
                out.zero_(); rstd.zero_()
                run(x, rstd, out)
            err = max((out - (x - mean) * torch.rsqrt(var + 1e-5)).abs().max().item(),
                      (rstd - torch.rsqrt(var + 1e-5)[:, 0]).abs().max().item())
            print(f"layer_norm 64x40000 chunk {chunk} (5 per row) w{warps} cluster={cluster}: err {err:.1e}", flush=True)
    # a cluster kernel launched without clusters: NaN, not a wrong number
    kernel = kernel_for(8, 65536)
    split = 8
    module, _ = load_module(generate_split_triton(kernel, split, 8192, cluster=True), kernel.name, None, False)
    xs = torch.randn(8, 65536, device="cuda").bfloat16(); ys = torch.zeros_like(xs)
    getattr(module, kernel.name)[(8 * split,)](xs, ys, torch.empty(8 * 2 * split, device="cuda"),
                                              torch.zeros(1, dtype=torch.int32, device="cuda"),
                                              XBLOCK=1, RBLOCK=8192, num_warps=4)
    print("plain launch of a cluster kernel: all NaN", bool(ys.float().isnan().all()), flush=True)
    for n, shapes in ((65536, ((8192, 4), (8192, 8), (4096, 4), (4096, 2), (16384, 8), (16384, 16))),
                      (262144, ((16384, 8), (16384, 16), (16384, 4), (32768, 16)))):
        rows = 2**26 // n
        kernel = kernel_for(rows, n)
        x = torch.randn(rows, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        src = x.clone()
        res = []
        t = do_bench(lambda: y.copy_(src), warmup=10, rep=40, return_mode="median")
        res.append((t, f"N={n} torch copy_: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}%"))
        for chunk, warps in shapes:
            for cluster in (True, False):
                split = n // chunk
                if cluster and split > 16:
                    continue
                tag = f"N={n} {'cluster' if cluster else 'tickets'} chunk {chunk} split {split} w{warps}"
                try:
                    run = launcher(kernel, chunk, warps, cluster)
                    y.zero_(); run(x, y); run(x, y); torch.cuda.synchronize()
                    err = (y.float() - ref).abs().max().item()
                    t = do_bench(lambda: run(x, y), warmup=10, rep=40, return_mode="median")
                    res.append((t, f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))
                except Exception as e:  # noqa: BLE001
                    print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _, line in sorted(res):
            print(line, flush=True)
