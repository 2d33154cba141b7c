"""A cold CPU compile does not import ``torch._dynamo`` (seconds of a cold start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout.strip().splitlines()[-1]


def test_cpu_inference_compile_does_not_import_dynamo(tmp_path):
    code = f"""
        import sys
        import torch
        import torch.nn.functional as F
        import torchstrata.runtime as tsr

        fn = tsr.compile(lambda x, b: F.gelu(x + b, approximate="tanh") * 2, options={{"cache_dir": {str(tmp_path)!r}}})
        x, b = torch.randn(64, 32), torch.randn(32)
        torch.testing.assert_close(fn(x, b), F.gelu(x + b, approximate="tanh") * 2)
        print("torch._dynamo" in sys.modules)
    """
    assert _run(code) == "False"


def test_deferral_ends_with_the_block():
    code = """
        import sys
        import torch
        from torchstrata.core import dynamo_import_deferred

        x = torch.empty(4, device="meta")
        with dynamo_import_deferred():
            assert (x + x).shape == (4,)
            inside = "torch._dynamo" in sys.modules
        x + x  # outside the block torch's wrapper imports Dynamo as usual
        print(inside, "torch._dynamo" in sys.modules)
    """
    assert _run(code) == "False True"
