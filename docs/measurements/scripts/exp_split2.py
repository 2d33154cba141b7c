"""Split-row softmax as generated (session 6: relaxed tickets, one exp), over chunk sizes
and warp counts, next to torch.softmax. Run on the device from the source tree root."""

import importlib.util
import sys
import tempfile

import torch
from triton.testing import do_bench

from ceiling import copy_ceiling

sys.path.insert(0, "..")
from gen_k3 import kernel_for  # noqa: E402

from torchstrata.inductor.triton_split import generate_split_triton, scratch_sizes  # noqa: E402

ceiling = copy_ceiling()
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
for n, rows in ((262144, 256), (65536, 1024)):
    x = torch.randn(rows, n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1).bfloat16()
    kernel = kernel_for(rows, n)
    for chunk in (4096, 8192, 16384):
        split = n // chunk
        if split > 64:
            continue
        path = tempfile.mktemp(suffix=".py")
        open(path, "w").write(generate_split_triton(kernel, split, chunk))
        spec = importlib.util.spec_from_file_location(f"split{chunk}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        floats, counters = scratch_sizes(kernel, split)
        partials = torch.empty(floats, dtype=torch.float32, device="cuda")
        counts = torch.zeros(counters, dtype=torch.int32, device="cuda")
        for warps in (2, 4, 8):

            def run():
                getattr(mod, kernel.name)[(rows * split,)](x, y, partials, counts, 1, chunk, num_warps=warps)

            try:
                for _ in range(3):
                    y.zero_()
                    run()
                    torch.cuda.synchronize()
                    err = (y.float() - ref.float()).abs().max().item()
                t = do_bench(run, warmup=5, rep=30, return_mode="median")
                pct = 100 * (2 * x.numel() * 2 / t / 1e6) / ceiling
                print(f"N={n} chunk={chunk} w{warps}: {t * 1000:6.1f} us {pct:5.1f}% err {err:.4f}", flush=True)
            except Exception as error:  # noqa: BLE001
                print(f"N={n} chunk={chunk} w{warps}: failed {type(error).__name__}: {str(error)[:100]}", flush=True)
