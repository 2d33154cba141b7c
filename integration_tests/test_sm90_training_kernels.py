"""Every Triton kernel of the training workloads (forward AND backward graphs) compiles
for sm_90 ahead of time, no GPU needed: the variants the autotuner may pick on an H200
(first, last, grouped online and split candidates) go through Triton's compiler to PTX.

The graphs come from the real stages: a torch-level graph, ``aot`` (joint trace and
min-cut partition), ``decompose``, then the inductor's lowering and scheduler.
"""

from __future__ import annotations

import tempfile

import pytest
import torch
import torch.nn.functional as F

from torchstrata.autograd import aot
from torchstrata.capture import capture
from torchstrata.core import Graph, TensorMeta
from torchstrata.decomp import decompose
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
from torchstrata.inductor.codegen.triton.split_sums import split_long_sums
from torchstrata.inductor.codegen.triton.tuning import candidate_configs
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.passes.rewrites import gather_as_reduction
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

pytest.importorskip("triton")

BF16 = torch.bfloat16


def _rms_norm(x, w):
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


def _swiglu(a, b):
    return F.silu(a) * b


def _grad(shape, dtype=BF16):
    return TensorMeta(shape, dtype, requires_grad=True)


ROWS, COLS, VOCAB = 4096, 1024, 40000
WORKLOADS = {
    "rms_norm": (_rms_norm, (_grad((ROWS, COLS)), _grad((COLS,)))),
    "layer_norm": (_layer_norm, (_grad((ROWS, COLS)), _grad((COLS,)), _grad((COLS,)))),
    "cross_entropy": (
        _cross_entropy,
        (_grad((256, VOCAB)), TensorMeta((256,), torch.int64)),
    ),
    "swiglu": (_swiglu, (_grad((ROWS, COLS)), _grad((ROWS, COLS)))),
}


def _torch_graph(fn, metas) -> Graph:
    """``fn`` captured into a torch-level graph on empty CPU tensors of ``metas``."""
    args = [
        torch.empty(meta.shape, dtype=meta.dtype).requires_grad_(meta.requires_grad)
        if meta.dtype.is_floating_point
        else torch.zeros(meta.shape, dtype=meta.dtype)
        for meta in metas
    ]
    return capture(fn, tuple(args), {}).graphs[0]


def _kernels(graph: Graph) -> list[Kernel]:
    prims = split_long_sums(gather_as_reduction(decompose(graph)))
    lowered = lower_graph(prims, lambda name, dtype: supports(name, dtype, interpret=False))
    steps = plan_graph(prims, lowered).steps
    return [step for step in steps if isinstance(step, Kernel) and step.rows > 0]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_forward_and_backward_kernels_compile_for_sm90(name):
    fn, metas = WORKLOADS[name]
    result = aot(_torch_graph(fn, metas))
    assert result.backward is not None
    directory = tempfile.mkdtemp()
    compiled = 0
    for graph in (result.forward, result.backward):
        for kernel in _kernels(graph):
            configs = candidate_configs(kernel, interpret=False, split_rows=True)
            chosen = {
                configs[0],
                configs[-1],
                *(c for c in configs if c.group or c.split > 1),
            }
            for config in chosen:
                assert ".entry" in kernel_ptx(kernel, config, cache_dir=directory)
                compiled += 1
    assert compiled >= 3
