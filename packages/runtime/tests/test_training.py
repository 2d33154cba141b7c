"""Backward graphs: forward and backward run as one autograd.Function; output aliases."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    AotResult,
    CompiledGraph,
    CompileOptions,
    GraphBuilder,
    Level,
    TensorMeta,
    aten,
    hookimpl,
    interpret,
    torch_op,
)
from torchstrata.runtime import TorchstrataFallbackWarning
from torchstrata.runtime.runners import _saved_layout_checker, direct_apply


def scale_and_square(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 3 + y * y


class TrainingAot:
    """Hand-written forward/backward of ``x * 3 + y * y``: saves y, grads for x and y.

    :param saved_dtype: the dtype the backward graph declares for the saved y (a broken
        autograd stage: the forward saves y as it is).
    :param saved_strides: the strides the backward graph declares for the saved y.
    """

    def __init__(
        self, saved_dtype: torch.dtype | None = None, saved_strides: tuple[int, ...] | None = None
    ) -> None:
        self.backward_runs = 0
        self.saved_dtype = saved_dtype
        self.saved_strides = saved_strides

    @hookimpl
    def torchstrata_aot(self, graph, options):
        x_meta, y_meta = graph.input_metas
        fwd = GraphBuilder(Level.ATEN)
        x, y = fwd.input("x", x_meta), fwd.input("y", y_meta)
        out = fwd.call(
            aten("add.Tensor"),
            fwd.call(aten("mul.Tensor"), x, 3),
            fwd.call(aten("mul.Tensor"), y, y),
        )
        forward = fwd.build([out, y])
        bwd = GraphBuilder(Level.ATEN)
        saved_meta = TensorMeta(
            y_meta.shape, self.saved_dtype or y_meta.dtype, strides=self.saved_strides
        )
        saved_y = bwd.input("y", saved_meta)
        tangent = bwd.input("tangent", TensorMeta(x_meta.shape, x_meta.dtype))
        grad_x = bwd.call(aten("mul.Tensor"), tangent, 3)
        grad_y = bwd.call(aten("mul.Tensor"), bwd.call(aten("mul.Tensor"), tangent, saved_y), 2)
        backward = bwd.build([grad_x, grad_y])
        return AotResult(
            forward,
            backward,
            num_user_outputs=1,
            num_saved=1,
            tangent_outputs=(0,),
            grad_inputs=(0, 1),
        )


def test_backward_runs_compiled_and_gradients_match(make_stages):
    stages = make_stages(aot=False, extra=(("training-aot", TrainingAot()),))
    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5, requires_grad=True)
    out = stages.compile(scale_and_square)(x, y)
    assert out.grad_fn is not None
    (out * torch.arange(5.0)).sum().backward()
    torch.testing.assert_close(x.grad, 3 * torch.arange(5.0))
    torch.testing.assert_close(y.grad, 2 * y.detach() * torch.arange(5.0))
    assert stages.codegen.calls == 2  # forward and backward both went through codegen


def test_a_saved_tensor_of_another_dtype_than_the_backward_expects_is_an_error(make_stages):
    """Compiled kernels would read it through a pointer of the wrong type (garbage, or
    reads past its end) instead of failing."""
    aot = TrainingAot(saved_dtype=torch.float64)
    stages = make_stages(aot=False, extra=(("training-aot", aot),))
    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5, requires_grad=True)
    out = stages.compile(scale_and_square)(x, y)
    with pytest.raises(RuntimeError, match=r"saved a torch\.float32 tensor where the backward"):
        out.sum().backward()


class StridesSeen:
    """A codegen stage that records the strides each graph's inputs are declared with and
    each call's tensors have, then interprets the graph."""

    def __init__(self) -> None:
        self.declared: list[tuple[tuple[int, ...], ...]] = []
        self.given: list[tuple[tuple[int, ...], ...]] = []

    @hookimpl
    def torchstrata_codegen(self, graph, device, options):
        self.declared.append(tuple(meta.strides for meta in graph.input_metas))

        def run(*args):
            self.given.append(tuple(a.stride() for a in args))
            return interpret(graph, *args)

        return CompiledGraph(run)


def test_the_backward_is_built_for_the_layouts_the_forward_saves(make_stages):
    """An autograd stage traced the saved y as strided; the lowered forward returns it
    contiguous. The backward is generated for what it will be given."""
    seen = StridesSeen()
    aot = TrainingAot(saved_strides=(2,))
    stages = make_stages(aot=False, codegen=False, extra=(("training-aot", aot), ("seen", seen)))
    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5, requires_grad=True)
    out = stages.compile(scale_and_square)(x, y)
    out.sum().backward()
    assert seen.declared[-1][0] == (1,)  # the backward's saved y, as the forward makes it
    assert seen.given[-1][0] == (1,)
    torch.testing.assert_close(y.grad, 2 * y.detach())


class IgnoresLayouts:
    """A third-party decomposition that takes no contract: it keeps the traced layouts."""

    @hookimpl(tryfirst=True)
    def torchstrata_decompose(self, graph, options):
        return graph


def test_a_decomposition_that_ignores_the_saved_layouts_is_not_trusted(make_stages):
    """The backward's contract says the saved y comes contiguous; a decomposition that
    keeps the traced strides would have kernels index y wrongly: that backward runs in the
    interpreter instead, with a warning, and the gradients are right."""
    seen = StridesSeen()
    aot = TrainingAot(saved_strides=(2,))
    extra = (("training-aot", aot), ("seen", seen), ("ignores", IgnoresLayouts()))
    stages = make_stages(aot=False, codegen=False, extra=extra)
    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5, requires_grad=True)
    out = stages.compile(scale_and_square)(x, y)
    with pytest.warns(TorchstrataFallbackWarning, match="ignore the contract's input_layouts"):
        out.sum().backward()
    assert len(seen.declared) == 1  # the forward only: the backward never reached codegen
    torch.testing.assert_close(y.grad, 2 * y.detach())


def test_a_saved_tensor_laid_out_otherwise_is_copied_into_the_backward_layout():
    """The runner's safety net, for a forward whose layouts the pipeline could not know
    (a codegen stage that returns other strides than its graph says): the saved tensor is
    copied into the backward's layout on every backward, with one warning."""
    builder = GraphBuilder(Level.ATEN)
    saved = builder.input("y", TensorMeta((5,), torch.float32, strides=(2,)))
    backward = builder.build([builder.call(aten("mul.Tensor"), saved, 2)])
    check = _saved_layout_checker(AotResult(backward, backward, num_saved=1))
    y = torch.arange(5.0)
    with pytest.warns(TorchstrataFallbackWarning, match=r"saved values \[0\] with other strides"):
        (first,) = check([y])
    (second,) = check([y])
    assert first.stride() == second.stride() == (2,)
    assert torch.equal(first, y) and torch.equal(second, y)


class AliasingAot:
    """``return x`` as an alias of input 0 (plus a computed output)."""

    @hookimpl
    def torchstrata_aot(self, graph, options):
        builder = GraphBuilder(Level.ATEN)
        x = builder.input("x", graph.inputs[0].tensor_meta)
        doubled = builder.call(aten("mul.Tensor"), x, 2)
        copy = builder.call(aten("clone.default"), x)
        meta = graph.inputs[0].tensor_meta
        return AotResult(
            builder.build([copy, doubled]),
            num_user_outputs=2,
            output_aliases=((0, meta.shape, meta.strides, 0), None),
        )


def test_outputs_that_alias_inputs_are_views_of_them(make_stages):
    stages = make_stages(aot=False, extra=(("alias-aot", AliasingAot()),))
    x = torch.randn(4)
    builder = GraphBuilder(Level.TORCH)
    node = builder.input("x", TensorMeta.from_tensor(x))
    graph = builder.build([builder.call(torch_op(torch.neg), node)])
    artifacts = stages.pipeline.compile_graph(graph, CompileOptions())
    same, doubled = artifacts.runner(x)
    assert same.data_ptr() == x.data_ptr() and same.shape == x.shape
    torch.testing.assert_close(doubled, x * 2)


class _TwiceXPlusY(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * 2 + y

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, grad


def test_direct_apply_runs_the_function_without_its_python_wrapper():
    apply = direct_apply(_TwiceXPlusY, all_tensors=True)
    # torch 2.14's Function.apply is C++ already: then there is nothing to skip
    python_apply = isinstance(vars(torch.autograd.Function)["apply"], classmethod)
    assert (apply != _TwiceXPlusY.apply) is python_apply
    assert direct_apply(_TwiceXPlusY, all_tensors=False) == _TwiceXPlusY.apply
    x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    out = apply(x, y)
    assert type(out.grad_fn).__name__ == "_TwiceXPlusYBackward"
    (out * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.arange(3.0))
    torch.testing.assert_close(y.grad, torch.arange(3.0))


def test_direct_apply_unwraps_a_tensor_leaked_from_a_transform_as_apply_does():
    leaked = []

    def keep(x):
        leaked.append(x)
        return (x * x).sum()

    torch.func.grad(keep)(torch.randn(3))
    (dead,) = leaked  # a functorch wrapper whose transform has ended
    expected = _TwiceXPlusY.apply(dead, dead)
    got = direct_apply(_TwiceXPlusY, all_tensors=True)(dead, dead)
    torch.testing.assert_close(got, expected)
    assert expected.grad_fn is None and got.grad_fn is None  # unwrapped: not a graph node


def test_direct_apply_leaves_active_transforms_to_function_apply():
    apply = direct_apply(_TwiceXPlusY, all_tensors=True)
    messages = []
    for run in (apply, _TwiceXPlusY.apply):
        with pytest.raises(RuntimeError) as raised:
            torch.func.grad(lambda x, run=run: run(x, x).sum())(torch.randn(3))
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and "setup_context" in messages[0]
