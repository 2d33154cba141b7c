"""The copy ceiling the device experiments report percentages of: GB/s of a 128 MB bf16
device-to-device copy, median of triton's do_bench (the scripts' directory is on
sys.path when they run, so they import this)."""

import torch
from triton.testing import do_bench


def copy_ceiling() -> float:
    """GB/s of one bf16 copy of 2**26 elements (read plus write)."""
    src = torch.empty(2**26, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=10, rep=50, return_mode="median")
    return 2 * src.numel() * 2 / ms / 1e6
