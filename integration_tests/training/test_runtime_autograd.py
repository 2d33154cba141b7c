"""How the runtime runs training graphs: one ``autograd.Function`` per compiled graph,
the backward compiled on the first backward, inference graphs under ``no_grad`` or
without grad-requiring inputs, and a clear error on double backward."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.core import CompileOptions, GraphPass, create_plugin_manager, hookimpl

from .models import MLP, leaf, twin


class Spy:
    """A plugin whose passes record every graph reaching ``post_aot`` and
    ``post_decomp`` (i.e. every graph the runtime lowers)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []  # (stage, number of graph outputs)

    @hookimpl
    def torchstrata_graph_passes(self, stage, options):
        if stage not in ("post_aot", "post_decomp"):
            return None
        spy = self

        class Record(GraphPass):
            name = f"spy_{stage}"

            def __call__(self, graph):
                spy.seen.append((stage, len(graph.outputs)))
                return graph

        return [Record()]

    def count(self, stage: str) -> int:
        """How many graphs reached ``stage``."""
        return sum(1 for s, _ in self.seen if s == stage)


def spied(fn, codegen):
    spy = Spy()
    pipeline = rt.Pipeline(create_plugin_manager(plugins=[("training-spy", spy)]))
    return rt.compile(fn, codegen=codegen, pipeline=pipeline), spy


def test_one_autograd_function_per_graph(codegen):
    model = MLP()
    compiled = rt.compile(model, codegen=codegen)
    x = torch.randn(8, 16, requires_grad=True)
    y = compiled(x)
    assert type(y.grad_fn).__name__ == "CompiledGraphFunctionBackward"
    # Straight from the Function to the leaves: no eager autograd node in between.
    leaves = [fn for fn, _ in y.grad_fn.next_functions if fn is not None]
    assert {type(fn).__name__ for fn in leaves} == {"AccumulateGrad"}
    assert len(leaves) == 1 + len(list(model.parameters()))
    report = rt.explain(compiled, x)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_backward_is_compiled_on_first_backward(codegen):
    compiled, spy = spied(MLP(), codegen)
    lowering = "post_decomp" if codegen == "cpp" else "post_aot"
    x = torch.randn(8, 16, requires_grad=True)
    y = compiled(x)
    assert spy.count(lowering) == 1  # the forward alone: the backward waits for backward()
    y.sum().backward()
    assert spy.count(lowering) == 2  # the backward, now
    compiled(x).sum().backward()
    assert spy.count(lowering) == 2  # cached: nothing more is lowered


def test_no_grad_compiles_the_inference_graph(codegen):
    model = MLP()
    compiled, spy = spied(model, codegen)
    x = torch.randn(8, 16)
    with torch.no_grad():
        y = compiled(x)
    assert y.grad_fn is None and not y.requires_grad
    # One graph with one output (nothing saved for a backward), no backward lowered.
    assert spy.seen[0] == ("post_aot", 1) and spy.count("post_aot") == 1
    torch.testing.assert_close(y, model(x))
    # Grad mode is part of the guards: the training call compiles a training graph.
    z = compiled(x)
    assert type(z.grad_fn).__name__ == "CompiledGraphFunctionBackward"
    training_forward = [n for stage, n in spy.seen if stage == "post_aot"][1]
    assert training_forward > 1  # the output, then the values saved for the backward


def test_inputs_without_grad_compile_the_inference_graph(codegen):
    def fn(x, w):
        return torch.tanh(x @ w).sum(-1)

    compiled, spy = spied(fn, codegen)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    y = compiled(x, w)
    assert y.grad_fn is None
    assert spy.seen[0] == ("post_aot", 1) and spy.count("post_aot") == 1
    torch.testing.assert_close(y, fn(x, w))


def test_first_order_grads_under_create_graph_then_double_backward_raises(codegen):
    model = MLP()
    reference = twin(model)
    compiled = rt.compile(model, codegen=codegen)
    x = torch.randn(8, 16, requires_grad=True)
    (gx,) = torch.autograd.grad(compiled(x).sum(), x, create_graph=True)
    xr = leaf(x)
    (expected,) = torch.autograd.grad(reference(xr).sum(), xr, create_graph=True)
    torch.testing.assert_close(gx, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="double backward through a compiled graph"):
        gx.pow(2).sum().backward()


def _kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.kron(a, b)


def _svdvals(a: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(a)


@pytest.mark.parametrize("codegen", ["cpp", "eager"])
def test_a_saved_reshape_of_a_non_contiguous_input(codegen: str) -> None:
    """``kron`` saves ``x.reshape(5, 1, 5, 1)`` of a strided x for its backward. ATen
    traces that reshape as a strided view; the decomposed forward returns it contiguous.
    The backward read it at the view's strides: garbage gradients (1e35), silently."""
    compiled = rt.compile(_kron, options=CompileOptions(codegen=codegen))
    a = torch.randn(5, 10)[:, ::2].requires_grad_()
    b = torch.randn(4, 8)[:, ::2].requires_grad_()
    cotangent = torch.randn(20, 20)
    expected = torch.autograd.grad(torch.kron(a, b), (a, b), cotangent)
    for _ in range(2):  # compiles, then behind the guards
        got = torch.autograd.grad(compiled(a, b), (a, b), cotangent)
        for mine, eager in zip(got, expected, strict=True):
            torch.testing.assert_close(mine, eager)


def test_an_extern_op_saving_column_major_results() -> None:
    """``svdvals`` saves U and Vh from ``_linalg_svd``: on the CPU, LAPACK's Vh comes out
    column-major where the meta kernel says row-major, so the backward's kernel read it
    transposed. The trace now lays it out as LAPACK does (``autograd.cpu_layouts``), so
    the backward is built for it, and the runner need not copy it before each backward
    (that copy, for a kernel that still surprises the trace, is tested in the runtime's
    ``test_training.py``)."""
    compiled = rt.compile(_svdvals, options=CompileOptions(codegen="cpp"))
    a = torch.randn(5, 5, requires_grad=True)
    cotangent = torch.randn(5)
    (expected,) = torch.autograd.grad(torch.linalg.svdvals(a), a, cotangent)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for _ in range(2):
            (got,) = torch.autograd.grad(compiled(a), a, cotangent)
            torch.testing.assert_close(got, expected)


def _strided_window(a: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(a, (2, 2), (1, 2), storage_offset=0) * 2


def test_as_strided_on_an_input_inside_its_storage() -> None:
    """``as_strided`` takes an absolute storage offset; its gradient was traced for an
    input at offset 0 and went to the wrong elements of one that starts at 1. Such a call
    runs eagerly, with a warning; an input at offset 0 runs compiled."""
    compiled = rt.compile(_strided_window, options=CompileOptions(codegen="cpp"))
    cotangent = torch.randn(2, 2)
    at_start = torch.randn(3, 6)[:, ::2].requires_grad_()
    inside = torch.randn(19)[1:].as_strided((3, 3), (6, 2)).detach().requires_grad_()
    for a in (at_start, inside):
        (expected,) = torch.autograd.grad(_strided_window(a), a, cotangent)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (got,) = torch.autograd.grad(compiled(a), a, cotangent)
        torch.testing.assert_close(got, expected)
        eager = [w for w in caught if "storage offset" in str(w.message)]
        assert bool(eager) == (a is inside)


def _avg_pool(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.avg_pool1d(
        x, 3, stride=1, padding=1, ceil_mode=True, count_include_pad=False
    )


_NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, _NEEDS_CUDA])]
)
def test_avg_pool_gradient_of_a_column_major_input(device: str) -> None:
    """The backward's extern ``avg_pool2d_backward`` got its operands as views whose new
    size-one dimension had stride 0; on the H200 it returned wrong values for them."""
    compiled = rt.compile(_avg_pool)
    x = torch.randn(1, 9, 3, device=device).transpose(1, 2).requires_grad_()
    cotangent = torch.randn(1, 3, 9, device=device)
    (expected,) = torch.autograd.grad(_avg_pool(x), x, cotangent)
    (got,) = torch.autograd.grad(compiled(x), x, cotangent)
    torch.testing.assert_close(got, expected)
