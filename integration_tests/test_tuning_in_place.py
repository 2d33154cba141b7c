"""A tuned first call must not repeat a kernel's in-place updates.

Autotuning launches every candidate configuration many times. A kernel that writes a
batch norm's running statistics into the caller's buffers (or any input updated in
place) applied its update at every launch: the first call returned running statistics
far from eager's (found by the OpInfo sweep through Triton on the H200,
``python -m integration_tests.opinfo.sweep --codegen triton --device cuda``). Benchmarks
now run on copies of the written buffers (``triton_tuning.tuning_copies``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def _strided(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """A non-contiguous view (every other element of the last dim, at offset 1)."""
    *lead, last = shape
    base = torch.randn(*lead, 2 * last, generator=generator, device="cpu").cuda()
    return base[..., 1::2]


@pytest.mark.parametrize("shape", [(5, 5, 5), (64, 96, 33)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_running_statistics_match_eager_after_tuning(tmp_path, shape, contiguous):
    def bn(x, mean, var, weight, bias):
        return F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.5, eps=0.6)

    generator = torch.Generator().manual_seed(0)
    channels = shape[1]
    make = (
        (lambda *s: torch.randn(*s, generator=generator).cuda())
        if contiguous
        else (lambda *s: _strided(s, generator))
    )
    args = [make(*shape), make(channels), make(channels).abs(), make(channels), make(channels)]
    compiled = tsr.compile(bn, options={"cache_dir": str(tmp_path)})
    ours = [torch.empty_strided(a.shape, a.stride(), device="cuda").copy_(a) for a in args]
    eager = [torch.empty_strided(a.shape, a.stride(), device="cuda").copy_(a) for a in args]
    for call in range(2):  # the tuned first call, then the chosen configuration
        got, want = compiled(*ours), bn(*eager)
        torch.testing.assert_close(got, want, msg=lambda m, c=call: f"call {c}: output: {m}")
        for name, o, e in (("running_mean", ours[1], eager[1]), ("running_var", ours[2], eager[2])):
            torch.testing.assert_close(o, e, msg=lambda m, c=call, n=name: f"call {c}: {n}: {m}")
