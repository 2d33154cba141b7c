"""Split-row softmax: where does its time go? Textual variants of our generated kernels
(gen_split.py), timed side by side with the looped kernel's best (from tune_report.py).

* base: as generated (a ticket from a global counter; every program polls its row's
  arrival counter with an atomic add of 0 until all chunks arrived);
* poll_load: the poll is a volatile load instead of an atomic;
* no_wait: no poll at all (wrong results: bounds the cost of waiting);
* pid_ticket: the work item from the program id instead of the ticket counter (unsafe in
  general: bounds the cost of the ticket);
* lean_tail: no launch-wide finish counter (the taker of the last ticket resets the
  ticket counter) and relaxed departures;
* one_exp: the output's exp taken from the first pass's, rescaled by the chunk's max;
* lean_one_exp: both.

Arguments name the variants to run (all when none): run pid_ticket alone, last.
"""

import importlib.util
import sys
import tempfile

import torch
from triton.testing import do_bench

from ceiling import copy_ceiling

WAIT = """    seen = tl.atomic_add(arrivals, 0, sem='acquire')
    while seen < {split}:
        seen = tl.atomic_add(arrivals, 0, sem='acquire')
"""
POLL = """    seen = tl.load(arrivals, volatile=True)
    while seen < {split}:
        seen = tl.load(arrivals, volatile=True)
"""


def variants(text, split):
    wait = WAIT.format(split=split)
    assert wait in text, "the wait loop changed: update exp_split.py"
    yield "base", text
    yield "poll_load", text.replace(wait, POLL.format(split=split))
    yield "no_wait", text.replace(wait, "")
    yield "pid_ticket", text.replace(
        "ticket = tl.atomic_add(ts_counters, 1)", "ticket = tl.program_id(0)"
    )
    lean = lean_tail(text, split)
    yield "lean_tail", lean
    yield "one_exp", one_exp(text)
    yield "lean_one_exp", one_exp(lean)


def lean_tail(text, split):
    """The ticket counter reset by the program that takes the last ticket (no launch-wide
    finish counter), and the tickets and the row's departures taken with relaxed atomics
    (Triton's default is acq_rel: a fence each)."""
    head, finish = text.split("    finished = tl.atomic_add(ts_counters + 1, 1, sem='acq_rel')")
    assert "ticket = tl.atomic_add(ts_counters, 1)" in head
    programs = int(finish.split("if finished == ")[1].split(":")[0]) + 1
    head = head.replace(
        "ticket = tl.atomic_add(ts_counters, 1)\n",
        "ticket = tl.atomic_add(ts_counters, 1, sem='relaxed')\n"
        f"    if ticket == {programs - 1}:\n        tl.atomic_xchg(ts_counters, 0)\n",
    )
    return head.replace(
        "left = tl.atomic_add(arrivals + 1, 1, sem='acq_rel')",
        "left = tl.atomic_add(arrivals + 1, 1, sem='relaxed')",
    )


def one_exp(text):
    """The output's exp from the chunk's first pass, rescaled: one exp per element."""
    old = "    tmp4 = tl.exp(tmp3)\n"
    assert old in text, "the output's exp changed: update exp_split.py"
    return text.replace(old, "    tmp4 = term_amax * tl.exp(psafe_amax - rsafe_amax)\n")


ceiling = copy_ceiling()
print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
for n, rows in ((262144, 256), (65536, 1024)):
    x = torch.randn(rows, n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1).bfloat16()
    for chunk in (8192, 16384):
        split = n // chunk
        text = open(f"../split_{n}_{chunk}.py").read()
        for name, source in variants(text, split):
            if sys.argv[1:] and name not in sys.argv[1:]:
                continue
            path = tempfile.mktemp(suffix=".py")
            open(path, "w").write(source)
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            partials = torch.empty(rows * 2 * split, dtype=torch.float32, device="cuda")
            counters = torch.zeros(2 + 2 * rows, dtype=torch.int32, device="cuda")
            for warps in (4, 8, 16):

                def run():
                    mod.kernel0[(rows * split,)](x, y, partials, counters, 1, chunk, num_warps=warps)

                try:
                    run()
                    torch.cuda.synchronize()
                    err = (y.float() - ref.float()).abs().max().item()
                    t = do_bench(run, warmup=5, rep=30, return_mode="median")
                    pct = 100 * (2 * x.numel() * 2 / t / 1e6) / ceiling
                    print(f"N={n} chunk={chunk} {name:<10} w{warps}: {t * 1000:6.1f} us {pct:5.1f}% err {err:.4f}", flush=True)
                except Exception as error:  # noqa: BLE001
                    print(f"N={n} chunk={chunk} {name} w{warps}: failed {type(error).__name__}: {str(error)[:100]}", flush=True)
