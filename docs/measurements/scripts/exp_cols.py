"""Column sums of LayerNorm/RMSNorm training (dw, db: the first level of split_sums' two):
every candidate's time under a wider set of column tiles than OUTER_SHAPES, and under
other split_sums chunks, for K5/train and K4/train (fresh tuning cache each)."""
import sys, os, tempfile, torch
sys.path.insert(0, "packages/inductor/benchmarks")
import gpu_kernels as gk
import torchstrata.runtime as rt
from torchstrata.inductor import triton_tuning as tt, split_sums
from triton.testing import do_bench
tt.OUTER_SHAPES = tuple(dict.fromkeys(tt.OUTER_SHAPES + (
    (64, 32, 4), (64, 64, 8), (128, 32, 8), (256, 16, 8), (32, 64, 4), (128, 64, 8), (256, 32, 8), (512, 8, 8), (64, 128, 8))))
def bench(self, args):
    rows = []
    for config in self.configs:
        run = self.bind(config)
        try:
            run(*args)
            ms = do_bench(lambda run=run: run(*args), warmup=5, rep=25, return_mode="median")
        except Exception:
            ms = float("nan")
        rows.append((ms, config))
    rows.sort(key=lambda r: r[0])
    print(f"  kernel rows={self.rows}:", flush=True)
    for ms, c in rows[:5]:
        print(f"    {ms*1000:8.1f} us  x{c.xblock} r{c.rblock} w{c.num_warps} s{c.num_stages} {'P' if c.persistent else 'L'}", flush=True)
    return rows[0][1]
tt.TunedKernel._benchmark = bench
rn = lambda *s: torch.randn(s, device="cuda").bfloat16()
for chunk in (1024, 512, 2048):
    split_sums.CHUNK = chunk
    for name, fn, make in (("K5/train", gk.layer_norm, lambda: [rn(16384, 4096), rn(4096), rn(4096)]),):
        print(f"== {name} CHUNK={chunk}", flush=True)
        inputs = make()
        runner, traffic = gk.prepare(fn, inputs, True)
        run = runner(rt.compile(fn, options={"cache_dir": tempfile.mkdtemp()}))
        run(); torch.cuda.synchronize()
        t = do_bench(run, warmup=10, rep=50, return_mode="median")
        print(f"   step {t*1000:.0f} us", flush=True)
