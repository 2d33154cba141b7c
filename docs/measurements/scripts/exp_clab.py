"""Why the generated cluster-row softmax is slower than the handwritten one (exp_cls.py):
the generated source with parts changed, all launched as clusters, side by side with the
handwritten kernel (softmax over bf16 rows of 65536 and 262144)."""
import os
import re
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, "packages/inductor/tests")
import exp_cls  # noqa: E402
from ceiling import copy_ceiling  # noqa: E402
from gen_k3 import kernel_for  # noqa: E402

from torchstrata.inductor import triton_codegen  # noqa: E402
from torchstrata.inductor.triton_backend import load_module  # noqa: E402
from torchstrata.inductor.triton_launch import ClusterLaunch  # noqa: E402

real_tile_loop = triton_codegen.tile_loop


def source(kernel, size, stats_ahead=True, out_ahead=True):
    def tile_loop(*args, **kwargs):
        reverse = kwargs.get("reverse", False)
        if (reverse and not out_ahead) or (not reverse and not stats_ahead):
            kwargs["prefetch"] = False
        return real_tile_loop(*args, **kwargs)

    triton_codegen.tile_loop = tile_loop
    try:
        return triton_codegen.generate_triton(kernel, interpret=False, persistent=False, group=8,
                                              even_row=True, even_rows=True, cluster=size)
    finally:
        triton_codegen.tile_loop = real_tile_loop


def no_guard(text):
    text = re.sub(r"ts_cluster = tl.inline_asm_elementwise\(.*\)\n", "ts_cluster = 0\n", text)
    return re.sub(r"    red_\w+ = tl.where\(ts_cluster == \d+, .*\n", "", text)


def plain_max(text):
    text = text.replace("tl.reduce(val_amax, 2, _ts_max, keep_dims=False)", "tl.max(val_amax, 2)")
    return text.replace("_ts_max(acc_amax, ", "tl.maximum(acc_amax, ")


def scalar_rows(text):
    return re.sub(r"(\d+)\*x0 \+ xzero", r"\1*row", text)


def mul_inv(text):
    return re.sub(r"(tmp\d+) = (tmp\d+) / (tmp\d+)\n", r"\1 = \2 * (1.0 / \3)\n", text)


if __name__ == "__main__":
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    for n, size, block, warps in ((65536, 8, 8192, 8), (262144, 8, 8192, 16)):
        rows = 2**26 // n
        kernel = kernel_for(rows, n)
        x = torch.randn(rows, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1).bfloat16().float()
        part = torch.zeros(rows * 2 * size, device="cuda")
        res = []

        def bench(tag, f):
            y.zero_(); f(); f(); torch.cuda.synchronize()
            err = (y.float() - ref).abs().max().item()
            t = do_bench(f, warmup=10, rep=40, return_mode="median")
            res.append((t, f"N={n} C{size} R{block} w{warps} {tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}"))

        bench("handwritten", exp_cls.launcher(x, y, part, n, size, block, warps))
        hand = ClusterLaunch(exp_cls.softmax_cls, rows, size, {"N": n, "C": size, "CHUNK": n // size,
                             "RBLOCK": block, "num_warps": warps, "num_stages": 1})
        bench("handwritten through ClusterLaunch", lambda: hand(x, y, part))
        variants = {
            "generated": source(kernel, size),
            "no guard": no_guard(source(kernel, size)),
            "plain max": plain_max(source(kernel, size)),
            "scalar rows": scalar_rows(source(kernel, size)),
            "plain max, scalar rows": plain_max(scalar_rows(source(kernel, size))),
        }
        for tag, text in variants.items():
            try:
                module, _ = load_module(text, kernel.name, None, False)
                launch = ClusterLaunch(getattr(module, kernel.name), rows, size,
                                       {"XBLOCK": 1, "RBLOCK": block, "num_warps": warps, "num_stages": 1})
                bench(tag, lambda launch=launch: launch(x, y, part))
            except Exception as e:  # noqa: BLE001
                print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _, line in sorted(res):
            print(line, flush=True)
