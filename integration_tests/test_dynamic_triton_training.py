"""Training graphs whose kernels are Triton, lowered once for many sizes (issue 33,
decision 0440): the forward and the backward of a symbolic entry take one set of size
conditions, as the C++ training graphs do (0395) and Triton inference graphs (0400).

Each step is compiled with ``codegen="triton"`` on CPU tensors (Triton's interpreter, as
CI tests generated Triton; ``cuda`` variants under the ``gpu`` mark) and called at sizes
that include 1, odd and prime ones. The loss and every gradient are compared with an
eager twin's, and ``size_lowering_stats()`` says that no size lowered on its own and how
many lowerings served them: at most one per power-of-two bucket of the length the blocks
are chosen from (a weight gradient's column sum included); on a GPU, one more per class
of Triton's specialisation (a multiple of 16, or of 2 for ``24*B`` elements: 0400).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchstrata.runtime as tsr

from .training.models import PreLNBlock
from .triton_devices import TRITON_DEVICES

pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")


class Classifier(nn.Module):
    """A layer norm, a linear layer and a softmax-weighted head."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(12)
        self.head = nn.Linear(12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.softmax(self.norm(x), -1) * x)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 24), nn.GELU(), nn.Linear(24, 5))


def mse(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def cross_entropy(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), target)


def _buckets(sizes: Sequence[int]) -> int:
    """The power-of-two buckets of ``sizes`` (2 is a bucket's only size)."""
    return len({1 << (n - 1).bit_length() for n in sizes})


def _train(
    make: Callable[[], nn.Module],
    loss: Callable[..., torch.Tensor],
    inputs: Callable[[int], list[torch.Tensor]],
    sizes: Sequence[int],
    device: str,
    dynamic: bool | None = True,
) -> dict[str, int]:
    """A training step of ``loss(model, *inputs(n))`` compiled (Triton, ``dynamic``) and
    eager at each of ``sizes``: the loss, the inputs' gradients and every parameter's
    equal. Returns ``size_lowering_stats()``, after checking that no size lowered on its
    own and that every size after the static ones ran a symbolic lowering."""
    torch.manual_seed(0)
    model = make().to(device)
    twin = make().to(device)
    twin.load_state_dict(model.state_dict())
    compiled = tsr.compile(lambda a, b: loss(model, a, b), dynamic=dynamic, codegen="triton")
    for size in sizes:
        args = inputs(size)
        twin_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        got = compiled(*args)
        got.backward()
        want = loss(twin, *twin_args)
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        tensors = [(a, b) for a, b in zip(args, twin_args) if a.requires_grad]
        tensors += list(zip(model.parameters(), twin.parameters()))
        for mine, theirs in tensors:
            torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)
            mine.grad = theirs.grad = None
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0, stats
    assert not [key for key in stats if key.startswith("fallback")], stats
    symbolic = [n for n in sizes[0 if dynamic else 1 :] if n != 1]  # 1: a static entry
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(symbolic), stats
    return stats


#: batch sizes: 1 (a static entry of its own), primes, odd and even ones
BATCHES = (3, 7, 1, 2, 5, 11, 13, 6, 17, 31, 23, 29)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_an_mlp_training_step_over_batch_sizes(device):
    # the weight gradients are column sums over the batch: one lowering per bucket of it
    # on the interpreter (on a GPU the column sums loop over it and record none; the
    # loss's sum over ``5*B`` elements takes a bucket of them, and Triton's
    # specialisation of ``24*B`` and ``5*B`` splits even, odd and multiples of 16: 17 and
    # 23, 29 and 31 share every class)
    def inputs(n: int) -> list[torch.Tensor]:
        x = torch.randn(n, 6, device=device, requires_grad=True)
        return [x, torch.randn(n, 5, device=device)]

    stats = _train(_mlp, mse, inputs, BATCHES, device)
    symbolic = [n for n in BATCHES if n != 1]
    most = _buckets(symbolic) if device == "cpu" else len(symbolic) - 2
    assert 1 <= stats["symbolic"] <= most, stats


#: row counts from 2048 on: a weight gradient's column sum is split in two levels there
#: (decision 0415), padded to one more part of 1024 rows than the rows fill (0440)
LONG_ROWS = (2053, 2048, 3001, 4099, 3072, 2311, 4096, 5003)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_long_batches_split_their_weight_gradients_at_every_size(device):
    def inputs(n: int) -> list[torch.Tensor]:
        x = torch.randn(n, 12, device=device, requires_grad=True)
        return [x, torch.randint(0, 10, (n,), device=device)]

    stats = _train(Classifier, cross_entropy, inputs, LONG_ROWS, device)
    # the loss's mean over the rows takes a bucket of them (3), the second level of the
    # split sums one of its parts (3, 4 and 5 to 8), and the first level's rows ``10 *
    # parts`` one more (3 parts or more): 2053, 3001 and 2311 share every one, and on a
    # GPU (where 16 does not divide them either) a lowering too
    assert 1 <= stats["symbolic"] <= 5 < len(LONG_ROWS), stats


#: sequence lengths: the first static, the others symbolic (1 a static entry of its own)
LENGTHS = (6, 5, 7, 3, 11, 1, 13, 2, 9, 16, 14, 4)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_a_transformer_block_training_step_over_sequence_lengths(device):
    # attention's rows of T, column sums over 2*T rows, tiles of 128*T elements: all of
    # one power-of-two bucket of T
    def inputs(n: int) -> list[torch.Tensor]:
        x = torch.randn(2, n, 16, device=device, requires_grad=True)
        return [x, torch.randn(2, n, 16, device=device)]

    stats = _train(lambda: PreLNBlock(16, 2), mse, inputs, LENGTHS, device, dynamic=None)
    symbolic = [n for n in LENGTHS[1:] if n != 1]
    most = _buckets(symbolic) + (2 if device == "cuda" else 0)
    assert 1 <= stats["symbolic"] <= most < len(symbolic), stats


def scaled_dropout(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x * w, 0.25, training=True)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_dropout_draws_a_fresh_mask_of_each_size(device):
    # the mask is drawn in the kernel (``prims.rand``): its count of elements is the
    # call's, the output and the gradients consistent with the mask at every size
    w = torch.randn(8, device=device, requires_grad=True)
    compiled = tsr.compile(scaled_dropout, dynamic=True, codegen="triton")
    rows = (37, 41, 53, 45, 59, 61, 43, 50)
    for count in rows:
        x = torch.randn(count, 8, device=device, requires_grad=True)
        out = compiled(w, x)
        kept = out != 0
        assert abs(kept.float().mean().item() - 0.75) < 0.1
        torch.testing.assert_close(out, (x * w).detach() * kept / 0.75)
        out.sum().backward()
        torch.testing.assert_close(x.grad, w.detach().expand_as(x) * kept / 0.75)
        torch.testing.assert_close(w.grad, (x.detach() * kept / 0.75).sum(0))
        w.grad = None
        torch.manual_seed(count)
        first = compiled(w, x)
        torch.manual_seed(count)
        assert torch.equal(compiled(w, x), first)  # the seed is torch's generator's
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0, stats
    assert stats["symbolic"] + stats.get("reused", 0) == len(rows), stats
    assert stats["symbolic"] <= (1 if device == "cpu" else 3), stats


def scaled_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x * 2).sum(), x.sum(0)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_a_backward_of_sizes_no_saved_value_carries(device):
    # the gradient of a sum is its tangent expanded to ``[s0, 5]`` and nothing is saved:
    # the backward takes a size carrier (strides 0) on the input's device (0395, 0440)
    compiled = tsr.compile(scaled_sums, dynamic=True, codegen="triton")
    rows = (3, 5, 6, 7, 9, 10)
    for count in rows:
        x = torch.randn(count, 5, device=device, requires_grad=True)
        tangent = torch.randn(5, device=device)
        total, column = compiled(x)
        (total * 3 + (column * tangent).sum()).backward()
        torch.testing.assert_close(total, (x * 2).sum())
        torch.testing.assert_close(column, x.sum(0))
        torch.testing.assert_close(x.grad, (6 + tangent).expand(count, 5))
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size", 0) == 0, stats
    assert stats["symbolic"] + stats.get("reused", 0) == len(rows), stats
    assert stats["symbolic"] < len(rows), stats
