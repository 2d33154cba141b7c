"""``torch.compile(fn, backend="torchstrata")`` with Dynamo's dynamic shapes (decision
0207): a graph Dynamo traces with symbolic sizes (``s77`` placeholders) is imported and
run at every size, with no Dynamo recompile per size and no eager fallback (lowered once
for many sizes, decision 0455: test_dynamo_lowered_once.py counts the lowerings).
Dynamo is the harness here (tests may call ``torch.compile``)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from torchstrata.runtime.dynamo_record import recording

#: Row counts: odd, even, small and large (never 0 or 1).
SIZES = (4, 5, 6, 9, 17, 3, 33, 8, 2, 64)


pytestmark = pytest.mark.usefixtures("dynamo_reset_no_fallback")


def sizes_in_the_graph(x, w):
    half = x.shape[0] // 2  # a computed size: a SymInt node in Dynamo's graph
    return torch.softmax(x @ w, -1) * x.shape[0] + x.narrow(0, 0, half).sum()


def reshape_by_size(x, w):
    rows, cols = x.size()
    return F.gelu(x).reshape(rows * cols).view(rows, cols) @ w


def _run(fn, sizes, **compile_kwargs):
    """Every size through ``torch.compile(fn, backend="torchstrata")`` against eager;
    the distinct backend graphs that ran, in order of first use."""
    compiled = torch.compile(fn, backend="torchstrata", **compile_kwargs)
    w = torch.randn(8, 4)
    graphs: list = []
    for size in sizes:
        x = torch.randn(size, 8)
        with recording() as ran:
            # atol: sizes_in_the_graph adds a sum over up to 16 x 8 values of magnitude ~1
            # to every element; summed in another order it differs by ~1e-5
            torch.testing.assert_close(
                compiled(x, w), fn(x, w), rtol=1.3e-6, atol=1e-4, msg=lambda m, s=size: f"{s}: {m}"
            )
        assert len(ran) == 1 and ran[0].is_compiled, f"size {size} did not run compiled code"
        if all(graph is not ran[0] for graph in graphs):
            graphs.append(ran[0])
    return graphs


def slices_by_size(x, w):
    # Dynamo records x[...] as operator.getitem on the tensor, bounds from sizes included
    half = x[: x.shape[0] // 2, 1:]
    return torch.softmax(x[..., None, 2:] @ w[2:], -1).squeeze(1) * half.sum() + x[-1, :4]


def transposed_scores(x, w):
    # Dynamo records x.T as getattr(x, "T")
    return torch.softmax(x @ x.T, -1) @ x @ w + x.mT.sum(1, keepdim=True).T @ w


@pytest.mark.parametrize(
    "fn",
    [sizes_in_the_graph, reshape_by_size, slices_by_size, transposed_scores],
    ids=lambda f: f.__name__,
)
def test_automatic_dynamic_one_symbolic_graph_for_every_size(fn):
    graphs = _run(fn, SIZES)
    # static for the first size, then one graph with symbolic sizes for all the others
    assert len(graphs) == 2
    symbolic = graphs[1]
    assert not any("Eq(" in guard for guard in symbolic.dynamo_guards)
    lowered = symbolic._run.per_size.runners  # one runner per distinct size
    assert sorted(key[0] for key in lowered) == sorted(SIZES[1:])


def test_dynamic_true_from_the_first_call():
    # (no first size of 4: duck sizing would tie it to w's 4 columns)
    graphs = _run(sizes_in_the_graph, (5, 6, 9, 17, 3, 33, 7, 10), dynamic=True)
    assert len(graphs) == 1
    assert len(graphs[0]._run.per_size.runners) == 8


def test_generated_kernels_per_size_and_explain():
    graphs = _run(sizes_in_the_graph, (4, 5, 7, 12, 3, 9, 2, 21))
    assert len(graphs) == 2
    artifacts = graphs[1].artifacts
    assert artifacts is not None and artifacts.compiled is not None  # C++ kernels, not eager


def test_training_through_dynamo_per_size():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="torchstrata")
    graphs = set()
    for rows in (4, 5, 9, 3, 17, 6, 2, 12):
        x = torch.randn(rows, 8)
        xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        with recording() as ran:
            outs = [compiled(xs[0]), reference(xs[1])]
        assert len(ran) == 1 and ran[0].is_compiled
        graphs.add(ran[0])
        for out in outs:
            out.square().mean().backward()
        torch.testing.assert_close(outs[0], outs[1])
        torch.testing.assert_close(xs[0].grad, xs[1].grad)
        for a, b in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)
            a.grad = b.grad = None
    assert len(graphs) == 2  # static for 4, symbolic for the other seven


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_cuda_graphs_per_size_on_a_gpu(mode):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    compiled = torch.compile(sizes_in_the_graph, backend="torchstrata", mode=mode)
    w = torch.randn(8, 4, device="cuda")
    graphs = []
    for size in (4, 5, 6, 9, 17, 3, 33, 8, 5, 9):  # repeated sizes replay their graphs
        x = torch.randn(size, 8, device="cuda")
        with recording() as ran:
            torch.testing.assert_close(compiled(x, w), sizes_in_the_graph(x, w))
        assert len(ran) == 1 and ran[0].is_compiled
        if all(graph is not ran[0] for graph in graphs):
            graphs.append(ran[0])
    assert len(graphs) == 2
    assert len(graphs[1]._run.per_size.runners) == 7
