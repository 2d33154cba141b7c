"""Training graphs lowered once for many sizes (issue 33, decision 0395): the forward and
the backward of a symbolic entry are lowered with one set of size conditions, and every
new size that meets them runs that lowering. Each call's outputs and every gradient are
compared with eager's; ``size_lowering_stats()`` says which path ran."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as tsr

from .training.models import PreLNBlock

pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")


class TinyGPT(nn.Module):
    """Token and position embeddings, two blocks, a final norm and a vocabulary head;
    ``forward(idx, targets)`` is the mean next-token cross-entropy."""

    def __init__(self, vocab: int = 64, width: int = 32) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(64, width)
        self.blocks = nn.Sequential(PreLNBlock(width, 4), PreLNBlock(width, 4))
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits = self.head(self.ln_f(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _twins(make: Callable[[], nn.Module]) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model, twin = make(), make()
    twin.load_state_dict(model.state_dict())
    return model, twin


def _grads(module: nn.Module, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    tensors = [*module.parameters(), *(t for t in inputs if t.requires_grad)]
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return grads


def _step_matches(compiled, fn, module_pair, inputs, loss_of=lambda out: out) -> None:
    """One training step compiled and eager (``module_pair``: the compiled function's
    module and its eager twin): the outputs and every gradient equal."""
    model, twin = module_pair
    twin_inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    got = compiled(*inputs)
    loss_of(got).backward()
    want = fn(twin, *twin_inputs)
    loss_of(want).backward()
    for value, expected in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
    ):
        torch.testing.assert_close(value, expected)
    for grad, expected in zip(_grads(model, inputs), _grads(twin, twin_inputs), strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)


def block_loss(blocks: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(blocks(x), y)


def _symbolic_only(stats: dict[str, int]) -> None:
    assert stats.get("per_size", 0) == 0, stats
    assert not any(key.startswith("fallback") for key in stats), stats


def test_a_two_layer_block_training_step_lowers_once_for_its_lengths():
    # lengths on one side of every condition the lowering records (at least 8 rows, a
    # row count 2*T no multiple of 8): odd ones and even ones, one lowering for all
    model, twin = _twins(lambda: nn.Sequential(PreLNBlock(32, 4), PreLNBlock(32, 4)))
    compiled = tsr.compile(lambda x, y: block_loss(model, x, y), dynamic=True, codegen="cpp")
    lengths = (9, 10, 11, 13, 14, 17, 21, 22, 25, 31)
    for length in lengths:
        x, y = torch.randn(2, length, 32, requires_grad=True), torch.randn(2, length, 32)
        _step_matches(compiled, block_loss, (model, twin), [x, y])
    stats = tsr.size_lowering_stats()
    assert stats == {"symbolic": 1, "reused": len(lengths) - 1}, stats


def gpt_loss(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return model(idx, targets)


def test_a_language_model_training_step_lowers_once():
    # embeddings (their gradient a row scatter, ``aten.index_add``), positions of the
    # length, two blocks and a cross-entropy over ``B*T`` rows
    model, twin = _twins(TinyGPT)
    compiled = tsr.compile(lambda i, t: gpt_loss(model, i, t), dynamic=True, codegen="cpp")
    lengths = (9, 10, 11, 13, 15, 17, 19, 21)
    for length in lengths:
        idx, targets = torch.randint(0, 64, (2, length)), torch.randint(0, 64, (2, length))
        _step_matches(compiled, gpt_loss, (model, twin), [idx, targets])
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": len(lengths) - 1}


def test_block_lengths_across_recorded_conditions():
    # short rows (< 8), row counts that are multiples of 8, and length 1 (specialised:
    # a static entry of its own); a few lowerings, none per size. ``dynamic=None``: the
    # first length is static, the length alone becomes symbolic at the second
    model, twin = _twins(lambda: nn.Sequential(PreLNBlock(32, 4), PreLNBlock(32, 4)))
    compiled = tsr.compile(lambda x, y: block_loss(model, x, y), dynamic=None, codegen="cpp")
    lengths = (5, 3, 7, 12, 20, 9, 1, 2, 6, 28, 11)
    for length in lengths:
        x, y = torch.randn(2, length, 32, requires_grad=True), torch.randn(2, length, 32)
        _step_matches(compiled, block_loss, (model, twin), [x, y])
    stats = tsr.size_lowering_stats()
    _symbolic_only(stats)
    symbolic = stats.get("symbolic", 0)
    # the first length and length 1 are static entries
    assert 1 <= symbolic <= 4 and symbolic + stats.get("reused", 0) == len(lengths) - 2, stats


def mlp_loss(mlp: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(mlp(x), y)


def test_an_mlp_training_step_over_batch_sizes():
    def make() -> nn.Module:
        return nn.Sequential(nn.Linear(6, 24), nn.GELU(), nn.Linear(24, 5))

    model, twin = _twins(make)
    compiled = tsr.compile(lambda x, y: mlp_loss(model, x, y), dynamic=True, codegen="cpp")
    batches = (3, 7, 2, 9, 11, 13, 19, 27, 33)
    for batch in batches:
        _step_matches(
            compiled, mlp_loss, (model, twin), [torch.randn(batch, 6), torch.randn(batch, 5)]
        )
    stats = tsr.size_lowering_stats()
    _symbolic_only(stats)
    assert 1 <= stats.get("symbolic", 0) <= 2, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(batches), stats


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(12)
        self.head = nn.Linear(12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.softmax(self.norm(x), -1) * x)


def classifier_loss(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), target)


def test_layernorm_softmax_cross_entropy_training():
    model, twin = _twins(Classifier)
    compiled = tsr.compile(lambda x, t: classifier_loss(model, x, t), dynamic=True, codegen="cpp")
    rows = (9, 11, 13, 14, 17, 19, 23, 29)
    for count in rows:
        x = torch.randn(count, 12, requires_grad=True)
        target = torch.randint(0, 10, (count,))
        _step_matches(compiled, classifier_loss, (model, twin), [x, target])
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": len(rows) - 1}


def branching(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h = model(x)
    if x.shape[0] > 12:  # a size-dependent branch: the capture guards on it
        h = torch.tanh(h) * 2
    return h.sum()


def test_a_size_dependent_branch():
    model, twin = _twins(lambda: nn.Linear(8, 6))
    compiled = tsr.compile(lambda x: branching(model, x), dynamic=True, codegen="cpp")
    rows = (9, 11, 10, 13, 17, 23, 12, 15, 30)
    for count in rows:
        _step_matches(
            compiled, branching, (model, twin), [torch.randn(count, 8, requires_grad=True)]
        )
    stats = tsr.size_lowering_stats()
    _symbolic_only(stats)
    # one lowering each side of the branch (or fewer than the sizes on each)
    assert 2 <= stats.get("symbolic", 0) < len(rows) - 2, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(rows), stats


def two_outputs(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.tanh(model(x))
    return h.sum(), h * 3


def test_tangents_the_runner_makes_or_scales_at_each_size():
    # an output given no gradient gets a zero tangent of the call's shape; a scalar
    # loss's unit gradients are scaled by a tangent other than 1; a second backward
    # through a retained graph runs the backward graph
    model, twin = _twins(lambda: nn.Linear(8, 6))
    compiled = tsr.compile(lambda x: two_outputs(model, x), dynamic=True, codegen="cpp")
    for count in (9, 11, 13, 17, 19):
        tangent = torch.randn(count, 6)
        for loss_of in (
            lambda out: out[0] * 2.5,
            lambda out, tangent=tangent: out[1].mul(tangent).sum(),
            lambda out: out[0] + out[0].detach() * 0,
        ):
            x = torch.randn(count, 8, requires_grad=True)
            _step_matches(compiled, two_outputs, (model, twin), [x], loss_of)
        x = torch.randn(count, 8, requires_grad=True)
        twin_x = x.detach().clone().requires_grad_()
        for out in (compiled(x), two_outputs(twin, twin_x)):
            out[0].backward(retain_graph=True)
            (out[1] * 0.5).sum().backward(retain_graph=True)
            out[0].backward(torch.tensor(3.0))
        for grad, want in zip(_grads(model, [x]), _grads(twin, [twin_x]), strict=True):
            torch.testing.assert_close(grad, want)
    stats = tsr.size_lowering_stats()
    _symbolic_only(stats)
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == 5, stats
    assert stats.get("symbolic", 0) < 5, stats


def view_output(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = model(x)
    return h, h.view(-1)  # a view of another output: rebuilt at each call's sizes (0445)


def test_a_view_of_another_output_lowers_once():
    model, twin = _twins(lambda: nn.Linear(6, 4))
    compiled = tsr.compile(lambda x: view_output(model, x), dynamic=True, codegen="cpp")
    rows = (3, 5, 7, 9)
    for count in rows:
        x = torch.randn(count, 6)
        _step_matches(compiled, view_output, (model, twin), [x], lambda o: o[0].sum())
        out = compiled(x)
        assert out[1].untyped_storage().data_ptr() == out[0].untyped_storage().data_ptr()
        assert out[1].shape == (count * 4,)
    stats = tsr.size_lowering_stats()
    _symbolic_only(stats)
    assert stats == {"symbolic": 1, "reused": len(rows) - 1}, stats


def offset_view(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return model(x.as_strided((n - 1, 6), (6, 1), 6)).sum()


def test_a_training_graph_not_ported_lowers_per_size_and_says_why():
    # an ``as_strided`` on an input: its offset is checked per size (``offset_inputs``)
    model, twin = _twins(lambda: nn.Linear(6, 4))
    compiled = tsr.compile(lambda x: offset_view(model, x), dynamic=True, codegen="cpp")
    rows = (3, 5, 7, 9)
    for count in rows:
        x = torch.randn(count, 6, requires_grad=True)
        _step_matches(compiled, offset_view, (model, twin), [x])
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size") == len(rows), stats
    assert any("as_strided" in key for key in stats), stats


def scaled_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x * 2).sum(), x.sum(0)


def test_a_backward_of_sizes_no_saved_value_carries():
    # the gradient of a sum is its tangent expanded to ``[s0, s1]``, and nothing is
    # saved: the backward takes a size carrier (strides 0) for its symbols
    compiled = tsr.compile(scaled_sums, dynamic=True, codegen="cpp")
    rows = (3, 5, 6, 7, 9, 10)
    for count in rows:
        x = torch.randn(count, 5, requires_grad=True)
        tangent = torch.randn(5)
        total, column = compiled(x)
        (total * 3 + (column * tangent).sum()).backward()
        torch.testing.assert_close(total, (x * 2).sum())
        torch.testing.assert_close(x.grad, torch.full((count, 5), 6.0) + tangent.expand(count, 5))
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": len(rows) - 1}


def step_inside(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.mse_loss(model(x), y)
    loss.backward()  # a graph break: ``loss.detach()`` is a segment of its own
    return loss.detach()


def test_a_step_with_its_backward_inside_the_function():
    # the segment after the break (its output an alias of its input, no gradient) lowers
    # once too, run with grad off; it returns a tensor that requires no grad, as eager's
    model, twin = _twins(lambda: nn.Sequential(nn.Linear(8, 24), nn.GELU(), nn.Linear(24, 8)))
    compiled = tsr.compile(step_inside, dynamic=True, codegen="cpp")
    rows = (9, 11, 13, 15, 17, 19)
    for count in rows:
        x, y = torch.randn(count, 8), torch.randn(count, 8)
        got, want = compiled(model, x, y), step_inside(twin, x, y)
        assert not got.requires_grad and got.grad_fn is None
        torch.testing.assert_close(got, want)
        for grad, expected in zip(_grads(model, []), _grads(twin, []), strict=True):
            torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)
    stats = tsr.size_lowering_stats()
    _symbolic_only(stats)
    # one lowering for the step's graph and one for the segment (compiled after the
    # first call's break, at its second size); every other size reused one
    assert stats.get("symbolic") == 2, stats
    assert stats["symbolic"] + stats.get("reused", 0) >= 2 * len(rows) - 1, stats
