"""Session 16: a training batch norm with non-contiguous running statistics on the H200 —
which kernel, configuration or launch path gives the wrong running mean."""
import gc, os, sys, tempfile, torch, torch.nn.functional as F
import torchstrata.runtime as tsr
from torchstrata.inductor import triton_tuning as tt

def bn(x, mean, var, weight, bias):
    return F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.5, eps=0.6)

g = torch.Generator().manual_seed(0)
def strided(*s):
    *lead, last = s
    return torch.randn(*lead, 2 * last, generator=g)[..., 1::2].cuda()[..., :] if False else torch.randn(*lead, 2 * last, generator=g).cuda()[..., 1::2]
args = [strided(5, 5, 5), strided(5), strided(5).abs(), strided(5), strided(5)]
def copies():
    return [torch.empty_strided(a.shape, a.stride(), device="cuda").copy_(a) for a in args]
ours, eager = copies(), copies()
c = tsr.compile(bn, options={"cache_dir": tempfile.mkdtemp()})
got, want = c(*ours), bn(*eager)
print("out err", (got - want).abs().max().item())
print("running_mean ours ", ours[1].tolist()); print("running_mean eager", eager[1].tolist())
print("running_var err", (ours[2] - eager[2]).abs().max().item())
x = args[0]
print("batch mean", x.mean((0, 2)).tolist(), "old rm", args[1].tolist())
print("0.5*rm+0.5*bm", (0.5 * args[1] + 0.5 * x.mean((0, 2))).tolist())
tuned = [o for o in gc.get_objects() if isinstance(o, tt.TunedKernel)]
for t in tuned:
    print("kernel", [type(v).__name__ for v in t.variants.values()][:1], "chosen", t.chosen, "configs", len(t.configs))
# kernel0 (sums and running stats) under each configuration
k0 = next(t for t in tuned if len(t.configs) and any("sum" in str(v) for v in [t]) or True)
for t in tuned:
    fn = next(iter(t.variants.values()))
    names = fn.arg_names
    if "buf_mean" not in names:
        continue
    print("kernel with buf_mean:", names)
    for config in t.configs:
        buffers = [torch.full((5,), float("nan"), device="cuda") for _ in range(4)]
        a = copies()
        run = t.bind(config)
        run(a[0], a[1], a[2], *buffers)
        torch.cuda.synchronize()
        print(f"  {config}: add_1 {[round(v, 4) for v in buffers[2].tolist()]} sum {[round(v, 3) for v in buffers[0].tolist()]}")
    for direct in ("1", "0"):
        pass
print("TORCHSTRATA_DIRECT_LAUNCH", os.environ.get("TORCHSTRATA_DIRECT_LAUNCH"))
