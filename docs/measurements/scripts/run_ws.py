"""Only exp_ring's warp-specialized softmax (``softmax_ws``), rows of 65536 and 16384."""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exp_ring  # noqa: E402
from ceiling import copy_ceiling  # noqa: E402

ceiling = copy_ceiling()
sms = torch.cuda.get_device_properties(0).multi_processor_count
for n in (65536, 16384):
    x = torch.randn(2**26 // n, n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1).bfloat16().float()
    for R, W, S, warps in ((128, 64, 12, 4), (128, 64, 12, 8), (256, 64, 6, 4), (256, 64, 6, 8), (64, 64, 24, 4)):
        if n // (R * W) > S:
            continue
        tag = f"N={n} ws R{R} W{W} S{S} w{warps} programs {sms}"
        try:
            f = exp_ring.run(x, y, R, W, S, warps, sms, exp_ring.softmax_ws)
            y.zero_(); f(); torch.cuda.synchronize()
            err = (y.float() - ref).abs().max().item()
            t = do_bench(f, warmup=10, rep=40, return_mode="median")
            print(f"{tag}: {t*1000:6.1f} us {100*4*x.numel()/t/1e6/ceiling:5.1f}% err {err:.1e}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{tag}: failed {type(e).__name__}: {str(e)[:300]}", flush=True)
