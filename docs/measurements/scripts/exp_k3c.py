"""K3 long rows: textual variants of our generated looped softmax kernels, timed side by side."""
import importlib.util, tempfile, torch
from triton.testing import do_bench
src = {}
for n in (65536, 262144):
    for kind in ("row", "lane"):
        src[(n, kind)] = open(f"../k3_{n}_{kind}.py").read()
def cs_store(s): return s.replace("xmask & rmask)\n", "xmask & rmask, cache_modifier='.cs')\n")
def evict_store(s): return s.replace("xmask & rmask)\n", "xmask & rmask, eviction_policy='evict_first')\n")
def no_keep(s): return s.replace(", eviction_policy='evict_last'", "")
def recip(s): return s.replace("tmp8 = tmp6 / tmp7", "tmp8 = tmp6 * (1.0 / tmp7)")
def fwd_store(s):  # second loop forwards
    return s.replace("roffset = ({n} - 1) // RBLOCK * RBLOCK - rstep", "roffset = rstep")
variants = {"base": lambda s: s, "cs_store": cs_store, "no_keep": no_keep, "recip": recip}
src_copy = torch.empty(2**26, dtype=torch.bfloat16, device="cuda"); dst_copy = torch.empty_like(src_copy)
ms = do_bench(lambda: dst_copy.copy_(src_copy), warmup=10, rep=50, return_mode="median")
ceiling = 2 * src_copy.numel() * 2 / ms / 1e6
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
configs = ((1, 8192, 16, 1), (1, 16384, 16, 1), (1, 16384, 32, 1), (1, 32768, 32, 1))
for n in (65536, 262144):
    x = torch.randn(2**26 // n, n, device="cuda").bfloat16(); y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1).bfloat16()
    for (nn, kind), text in src.items():
        if nn != n: continue
        for vname, fn in variants.items():
            path = tempfile.mktemp(suffix=".py"); open(path, "w").write(fn(text))
            spec = importlib.util.spec_from_file_location(vname, path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
            for X, R, w, st in configs:
                try:
                    f = lambda: mod.kernel0[(x.shape[0] // X,)](x, y, X, R, num_warps=w, num_stages=st)
                    y.zero_(); f(); torch.cuda.synchronize()
                    err = (y.float() - ref.float()).abs().max().item()
                    t = do_bench(f, warmup=10, rep=40, return_mode="median")
                    gbs = 2 * x.numel() * 2 / t / 1e6
                    print(f"N={n} {kind:<4} {vname:<11} X{X} R{R} w{w} s{st}: {t*1000:6.1f} us {100*gbs/ceiling:5.1f}% err {err:.4f}", flush=True)
                except Exception as e:
                    print(f"N={n} {kind} {vname} X{X} R{R} w{w} s{st}: failed {type(e).__name__}: {str(e)[:120]}", flush=True)
