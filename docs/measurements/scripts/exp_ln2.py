"""LayerNorm: Welford on/off on long rows (compiled end to end); torch.compile's own looped
kernel under several configs; textual variants of our persistent [4096,16384] kernel."""
import glob, importlib.util, sys, tempfile, torch
import torch.nn.functional as F
from triton.testing import do_bench
import torchstrata.runtime as rt
from torchstrata.inductor import triton_codegen
def ln(x, w, b): return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
src_copy = torch.empty(2**26, dtype=torch.bfloat16, device="cuda"); dst_copy = torch.empty_like(src_copy)
ms = do_bench(lambda: dst_copy.copy_(src_copy), warmup=10, rep=50, return_mode="median")
ceiling = 2 * src_copy.numel() * 2 / ms / 1e6
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
def pct(t, x): return 100 * (2 * x.numel() * 2 / t / 1e6) / ceiling
for M, N in ((1024, 65536), (256, 262144), (4096, 16384)):
    x = torch.randn(M, N, device="cuda").bfloat16(); w = torch.randn(N, device="cuda").bfloat16(); b = torch.randn(N, device="cuda").bfloat16()
    ref = ln(x.double(), w.double(), b.double())
    for wmin in (0, 10**9):
        triton_codegen.WELFORD_MIN_LENGTH = wmin
        c = rt.compile(ln, options={"cache_dir": tempfile.mkdtemp()})
        out = c(x, w, b); torch.cuda.synchronize()
        t = do_bench(lambda: c(x, w, b), warmup=10, rep=50, return_mode="median")
        print(f"LN [{M},{N}] welford={'on' if wmin == 0 else 'off'}: {t*1000:6.1f} us {pct(t, x):5.1f}% err {(out.double()-ref).abs().max().item():.4f}", flush=True)
    tc = torch.compile(ln); tc(x, w, b)
    t = do_bench(lambda: tc(x, w, b), warmup=10, rep=50, return_mode="median")
    print(f"LN [{M},{N}] torch.compile: {t*1000:6.1f} us {pct(t, x):5.1f}%", flush=True)
# torch.compile's looped Welford kernel text under our launch, several configs
spec = importlib.util.spec_from_file_location("tc_ln", "../tc_ln.py"); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
M, N = 4096, 16384
x = torch.randn(M, N, device="cuda").bfloat16(); w = torch.randn(N, device="cuda").bfloat16(); b = torch.randn(N, device="cuda").bfloat16()
y = torch.empty_like(x); ref = ln(x.float(), w.float(), b.float())
for R in (1024, 2048, 4096, 8192):
    for nw in (4, 8, 16):
        f = lambda: mod.triton_red_fused_native_layer_norm_0[(M,)](x, w, b, y, M, N, 1, R, num_warps=nw)
        f(); torch.cuda.synchronize()
        t = do_bench(f, warmup=10, rep=40, return_mode="median")
        print(f"TC kernel R{R} w{nw}: {t*1000:6.1f} us {pct(t, x):5.1f}% err {(y.float()-ref).abs().max().item():.3f}", flush=True)
