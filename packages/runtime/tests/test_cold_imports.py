"""A cold CPU compile does not import ``torch._dynamo`` (seconds of a cold start)."""

from __future__ import annotations

import os
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


def test_cpu_training_compile_with_attention_does_not_import_dynamo(tmp_path):
    """Attention is traced on fake tensors (its ATen form depends on the device), which
    read Dynamo's config from a copy (decision 0303)."""
    code = f"""
        import sys
        import torch
        import torch.nn.functional as F
        import torchstrata.runtime as tsr

        def step(w, x):
            q = (x @ w).view(2, 6, 2, 4).transpose(1, 2)
            return F.scaled_dot_product_attention(q, q, q, is_causal=True).square().sum()

        torch.manual_seed(0)
        w, x = torch.randn(8, 8, requires_grad=True), torch.randn(2, 6, 8)
        compiled = tsr.compile(step, options={{"cache_dir": {str(tmp_path)!r}}})
        compiled(w, x).backward()
        got, w.grad = w.grad, None
        step(w, x).backward()
        torch.testing.assert_close(got, w.grad)
        imported = "torch._dynamo" in sys.modules
        left = "_dynamo" in torch.__dict__
        from torch._dynamo import config  # afterwards the real one, as always

        print(imported, left, type(config).__module__.startswith("torch.utils"))
    """
    assert _run(code) == "False False True"


def test_fake_tensors_read_the_config_dynamo_would_give(tmp_path):
    """Inside the block, a fake tensor mode reads the settings the real config has (the
    environment variable included); code other than fake tensors gets Dynamo itself."""
    code = """
        import os, sys
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torchstrata.core import dynamo_import_deferred

        with dynamo_import_deferred():
            mode = FakeTensorMode()
            with mode:
                y = torch.ones(3) * 2
            inside = "torch._dynamo" in sys.modules
            compiling = torch._dynamo.is_compiling()  # imports Dynamo, as torch would
            after = "torch._dynamo" in sys.modules
            other = FakeTensorMode()
        import torch._dynamo.config as real

        print(
            inside, after, compiling, tuple(y.shape),
            mode.cache_enabled == real.fake_tensor_cache_enabled == other.cache_enabled,
            mode.cache_enabled, "_dynamo" in torch.__dict__ and torch._dynamo is sys.modules["torch._dynamo"],
        )
    """
    plain = _run(code)
    assert plain == "False True False (3,) True True True"
    disabled = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={**os.environ, "TORCH_FAKE_TENSOR_DISPATCH_CACHE": "0"},
    )
    assert disabled.stdout.strip().splitlines()[-1] == "False True False (3,) True False True"
