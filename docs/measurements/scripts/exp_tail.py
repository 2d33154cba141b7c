"""Cross-entropy's row kernel with its tail (tails.py): where does the time go?
Textual variants of the generated looped kernel, [8192, 32000] bf16, timed directly:

* base: as generated (each program: barrier, acq_rel ticket);
* release: the ticket a release, the last program acquiring once more;
* relaxed: a relaxed ticket (no ordering: wrong in general, bounds the fences);
* row_only: the row kernel without the tail (its statistics only: bounds the tail).
"""

import glob
import importlib.util
import os
import sys
import tempfile

cache = tempfile.mkdtemp()
os.environ["TORCHSTRATA_CACHE_DIR"] = cache
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from ceiling import copy_ceiling  # noqa: E402

import torchstrata.runtime as rt  # noqa: E402

rows, vocab = 8192, 32000
x = torch.randn(rows, vocab, device="cuda").bfloat16()
t = torch.randint(0, vocab, (rows,), device="cuda")
fn = rt.compile(lambda a, b: F.cross_entropy(a.float(), b))
got = fn(x, t)
print("compiled ok", (got - F.cross_entropy(x.float(), t)).abs().item(), flush=True)
ceiling = copy_ceiling()
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)


def variants(text):
    yield "base", text
    release = text.replace(
        "ts_done = tl.atomic_add(ts_tail_count, 1, sem='acq_rel')",
        "ts_done = tl.atomic_add(ts_tail_count, 1, sem='release')",
    ).replace(
        "        tl.atomic_xchg(ts_tail_count, 0, sem='relaxed')\n",
        "        tl.atomic_xchg(ts_tail_count, 0, sem='acquire')\n",
    )
    yield "release", release
    yield "relaxed", text.replace("sem='acq_rel'", "sem='relaxed'")
    lines = text.split("\n")
    first_tail = next(i for i, line in enumerate(lines) if "tl.store(ts_tail" in line)
    last = max(i for i in range(first_tail) if "tl.store(buf_" in lines[i])
    yield "row_only", "\n".join(lines[: last + 1]) + "\n"


for path in sorted(glob.glob(f"{cache}/triton/kernel*.py")):
    text = open(path).read()
    if "ts_done" not in text:
        continue
    looped = "roffset" in text
    print("==", os.path.basename(path), "looped" if looped else "persistent", flush=True)
    for name, source in variants(text):
        tmp = tempfile.mktemp(suffix=".py")
        open(tmp, "w").write(source)
        spec = importlib.util.spec_from_file_location(name, tmp)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        kernel = [v for k, v in vars(mod).items() if k.startswith("kernel")][-1]
        names = kernel.arg_names
        buffers = {
            "buf_log_softmax_amax": torch.empty(rows, device="cuda"),
            "buf_log_softmax_sum": torch.empty(rows, device="cuda"),
            "ts_tail": torch.empty(2 * rows, device="cuda"),
            "ts_tail_count": torch.zeros(1, dtype=torch.int32, device="cuda"),
        }
        out = torch.empty((), device="cuda")
        for xblock, rblock, warps in ((1, 4096, 8), (1, 8192, 16), (2, 2048, 8), (4, 1024, 8)):
            args = []
            for arg in names[:-2]:
                if arg == "buf_x" or "logits" in arg or arg == "buf_a":
                    args.append(x)
                elif arg in buffers:
                    args.append(buffers[arg])
                elif arg.startswith("buf_t") or arg == "buf_b":
                    args.append(t)
                else:
                    args.append(out)

            def run():
                kernel[((rows + xblock - 1) // xblock,)](*args, xblock, rblock, num_warps=warps)

            try:
                run()
                torch.cuda.synchronize()
                ms = do_bench(run, warmup=5, rep=40, return_mode="median")
                pct = 100 * x.numel() * 2 / ms / 1e6 / ceiling
                print(f"{name:<9} X{xblock} R{rblock} w{warps}: {ms * 1000:6.1f} us {pct:5.1f}%  out {out.item():.4f}", flush=True)
            except Exception as error:  # noqa: BLE001
                print(f"{name} X{xblock} R{rblock} w{warps}: failed {type(error).__name__}: {str(error)[:120]}", flush=True)
    print("args", names, flush=True)
sys.exit(0)
