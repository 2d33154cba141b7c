"""A CPU inference compile in a fresh process leaves the slow optional imports alone.

sympy (imported by torch's Python meta kernels), networkx (the training partitioner's
min cut) and Triton (the GPU backend) each cost 0.2-0.7 s of a cold compile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
import torch
import torch.nn.functional as F
import torchstrata.runtime as tsr

def bias_gelu_mul(x, b, y):
    return F.gelu(x + b, approximate="tanh") * y

def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

def tiny(a):
    return (a + 1) * 2

x, b = torch.randn(64, 128), torch.randn(128)
cases = [
    (bias_gelu_mul, (x, b, torch.randn(64, 128))),
    (layer_norm, (x, torch.randn(128), b)),
    (tiny, (torch.randn(8),)),
]
ok = True
for fn, args in cases:
    with torch.no_grad():
        ok = ok and torch.allclose(tsr.compile(fn)(*args), fn(*args), atol=1e-5, rtol=1e-5)
print(json.dumps({"ok": bool(ok), "loaded": [m for m in sys.argv[1:] if m in sys.modules]}))
"""


def test_cpu_inference_compile_skips_slow_imports(tmp_path: Path) -> None:
    env = dict(os.environ, TORCHSTRATA_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "sympy", "networkx", "triton"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"ok": True, "loaded": []}
