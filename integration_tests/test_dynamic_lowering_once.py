"""A symbolic entry lowered once for many sizes (issue 33, decision 0381): the codegen
stage compiles the graph with its sizes as ``core.SizeValue``, records every decision it
takes on them, and each new size that meets those decisions runs that lowering with no
lowering of its own. Where a site reads a size as a number, the entry lowers per size as
before. Every call is compared with eager; ``size_lowering_stats()`` says which path ran."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as tsr
from torchstrata import core

pytestmark = pytest.mark.usefixtures("size_counts_no_fallback")


def decode_step(k_cache, v_cache, q, k, v):
    """One KV-cache decode step (bench.dynamic_sizes' decode workload)."""
    keys = torch.cat([k_cache, k], dim=1)
    values = torch.cat([v_cache, v], dim=1)
    weights = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(q.shape[-1]), -1)
    return weights @ values, keys, values


def scaled_softmax(x):
    return torch.softmax(x * 2.0, -1) + 1.0


def _decode_inputs(length: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, length, 32), torch.randn(2, length, 32), *torch.randn(3, 2, 1, 32))


def _check(compiled, fn, inputs) -> None:
    got, want = compiled(*inputs), fn(*inputs)
    for value, expected in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
    ):
        torch.testing.assert_close(value, expected)


def test_decode_step_lowers_once_for_its_cache_lengths():
    torch.manual_seed(0)
    compiled = tsr.compile(decode_step, dynamic=True, codegen="cpp")
    lengths = range(16, 28)
    for length in lengths:
        _check(compiled, decode_step, _decode_inputs(length))
    stats = tsr.size_lowering_stats()
    assert stats.get("symbolic") == 1, stats
    assert stats.get("reused") == len(lengths) - 1, stats
    assert stats.get("per_size", 0) == 0, stats


def test_symbolic_lowering_off_lowers_every_size():
    torch.manual_seed(0)
    options = {"symbolic_lowering": False}
    compiled = tsr.compile(decode_step, dynamic=True, codegen="cpp", options=options)
    for length in range(16, 24):
        _check(compiled, decode_step, _decode_inputs(length))
    assert tsr.size_lowering_stats() == {"per_size": 8}


def test_softmax_lowers_less_often_than_its_sizes():
    torch.manual_seed(0)
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="cpp")
    sizes = [(rows, cols) for rows, cols in zip(range(2, 12), (7, 9, 16, 5, 33, 7, 12, 3, 8, 21))]
    for shape in sizes:
        _check(compiled, scaled_softmax, (torch.randn(shape),))
    stats = tsr.size_lowering_stats()
    assert 1 <= stats.get("symbolic", 0) < len(sizes), stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(sizes), stats
    assert stats.get("per_size", 0) == 0, stats


def test_a_size_across_a_recorded_condition_lowers_again():
    # the C++ backend's column-loop choice (``cpp.columns.uses_column_loop``) compares a
    # kernel's last row dim, here the row count, with 8: a condition of the lowering made
    # at 3 rows; 9 rows violate it and lower again, then each later size runs the
    # lowering whose conditions it meets
    torch.manual_seed(0)
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="cpp")
    for rows in (3, 4):
        _check(compiled, scaled_softmax, (torch.randn(rows, 7),))
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 1}
    _check(compiled, scaled_softmax, (torch.randn(9, 7),))
    assert tsr.size_lowering_stats() == {"symbolic": 2, "reused": 1}
    for rows in (5, 10, 6, 30):
        _check(compiled, scaled_softmax, (torch.randn(rows, 7),))
    assert tsr.size_lowering_stats() == {"symbolic": 2, "reused": 5}


def last_third(x):
    n = x.shape[-1] // 3
    return x[..., -n:] * 2


def test_a_slice_one_column_wide_lowers_for_many_sizes():
    # at 3 to 5 columns the slice is one column wide: ``core.is_dense`` compared its
    # contiguous stride ``Max(1, s0//3)`` with 1 and the C++ row work its width with 1,
    # each pinning the size (a size read). Now the first is the range ``s0//3 <= 1`` and
    # the second prints ``rows * (s0//3)`` at every size (decision 0437)
    torch.manual_seed(0)
    compiled = tsr.compile(last_third, dynamic=True, codegen="cpp")
    sizes = (3, 4, 5, 16, 17)
    for columns in sizes:
        _check(compiled, last_third, (torch.randn(3, columns),))
    stats = tsr.size_lowering_stats()
    assert set(stats) == {"symbolic", "reused"}, stats
    assert stats["symbolic"] <= 2 and stats["symbolic"] + stats["reused"] == len(sizes), stats


def test_a_training_graph_lowers_once_too():
    # its forward and backward with one set of conditions (decision 0395; the training
    # cases are in test_dynamic_training_once.py)
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4)
    compiled = tsr.compile(model, dynamic=True, codegen="cpp")
    for rows in (3, 5, 6, 7):
        x = torch.randn(rows, 6)
        got = compiled(x)
        torch.testing.assert_close(got, model(x))
        got.sum().backward()
        torch.testing.assert_close(model.weight.grad, x.sum(0).expand(4, 6))
        torch.testing.assert_close(model.bias.grad, torch.full((4,), float(rows)))
        model.zero_grad()
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 3}


def test_triton_kernels_lower_once_for_their_bucket():
    # decision 0400: Triton kernels take the sizes as arguments (the interpreter here);
    # rows 3..6 of 8: fewer than a smallest tile's rows (1024 elements), one block
    torch.manual_seed(0)
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="triton")
    sizes = range(3, 7)
    for rows in sizes:
        _check(compiled, scaled_softmax, (torch.randn(rows, 8),))
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 3}


def transposed_copy(x):
    # a pointwise kernel that stores through 8x8 transposed tiles where both of its
    # dims are multiples of 8 (``cpp.tiles``: a decision ``Mod(s, 8) == 0``, or its
    # negation) and indexes the input by a stride that is a symbol, not a size argument
    return (x.t() * 2).contiguous() + 1


def test_a_divisibility_decision_is_a_condition_not_a_pinned_size():
    # decision 0382: ``Eq(Mod(s, 8), 0)`` holds at every multiple of 8: recorded, where
    # it was refused as a size pinned; the stride ``s`` is a kernel argument
    torch.manual_seed(0)
    compiled = tsr.compile(transposed_copy, dynamic=True, codegen="cpp")
    for columns in (16, 24, 32, 40, 48, 64, 72, 80):
        _check(compiled, transposed_copy, (torch.randn(8, columns),))
    stats = tsr.size_lowering_stats()
    assert 1 <= stats.get("symbolic", 0) < 8, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == 8, stats
    # 20 columns are no multiple of 8: across the recorded condition, lowered again
    before = stats.get("symbolic", 0)
    _check(compiled, transposed_copy, (torch.randn(8, 20),))
    assert tsr.size_lowering_stats().get("symbolic") == before + 1
    assert not any(key.startswith("fallback") for key in tsr.size_lowering_stats())


def pad_rows(x):
    return F.pad(x, (1, 2)), F.pad(x, (0, 0, 2, 0), value=-1.0)


def test_symbols_in_kernels_are_arguments_with_parenthesised_sums():
    # the kernels index by ``(s + 3)*x0`` (a padded row's stride): every symbol of the
    # lowering is a kernel argument, and a sum is printed in parentheses
    # (``dynamic=None``: the first length is static, the length alone is symbolic)
    torch.manual_seed(0)
    compiled = tsr.compile(pad_rows, dynamic=None, codegen="cpp")
    lengths = (4, 5, 9, 16, 17, 2, 33, 7, 12)
    for length in lengths:
        _check(compiled, pad_rows, (torch.randn(2, 3, length),))
    stats = tsr.size_lowering_stats()
    assert 1 <= stats.get("symbolic", 0) < len(lengths) - 1, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(lengths) - 1, stats


def causal_mask(x):
    # a row index divided by ``2*s`` (``xi / (2*s)``): a product in parentheses too
    t = x.shape[-1]
    mask = torch.arange(t)[None, :] > torch.arange(t)[:, None]
    return torch.zeros(x.shape[0], 2, t, t).masked_fill(mask, float("-inf")) + x[:, None, :, None]


def test_a_divisor_that_is_a_product_of_sizes():
    torch.manual_seed(0)
    compiled = tsr.compile(causal_mask, dynamic=True, codegen="cpp")
    lengths = (3, 4, 5, 6, 7, 9, 11, 13)
    for length in lengths:
        _check(compiled, causal_mask, (torch.randn(2, length),))
    stats = tsr.size_lowering_stats()
    assert 1 <= stats.get("symbolic", 0) < len(lengths), stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(lengths), stats


def test_a_failure_at_one_size_is_that_sizes_alone():
    # a lowering that failed after deciding ``s == 3`` (a pinned size, refused) fails
    # again only at sizes that meet that decision; another size is lowered again
    from torchstrata.runtime.size_variants import (
        SizeSpecificFailure,
        SizeVariants,
        SymbolicLowering,
    )

    tried = []

    def lower(values):
        tried.append(values["s0"])
        if values["s0"] == 3:
            failure = SizeSpecificFailure(lambda v: v["s0"] == 3)
            raise failure from core.SizeRead("pinned")
        return SymbolicLowering(lambda: "ran", lambda v: v["s0"] != 3, ("Ne(s0, 3)",))

    variants = SizeVariants(lower)
    assert variants.runner_for({"s0": 3}) is None  # lowers per size
    assert variants.runner_for({"s0": 3}) is None and tried == [3]  # not tried again
    runner = variants.runner_for({"s0": 5})
    assert runner is not None and runner() == "ran" and tried == [3, 5]
    assert variants.runner_for({"s0": 9}) is runner and tried == [3, 5]
    assert dict(variants.counts) == {
        "fallback: SizeRead: pinned": 1,
        "symbolic": 1,
        "reused": 1,
    }

    def broken(values):
        raise TypeError("a site not ported")

    # any other failure: the entry lowers per size from then on, as before
    variants = SizeVariants(broken)
    assert variants.runner_for({"s0": 3}) is None and variants.fallback
    assert variants.runner_for({"s0": 5}) is None


def flatten_and_unflatten(x):
    n = x.shape[0]
    flat = x.flatten(0, 1)  # a view of strides (3, 1) over n * 4 rows
    return flat.sum(1), x.reshape(n, 12).unflatten(1, (3, 4)).permute(0, 2, 1).reshape(n, 12)


def test_reshape_views_of_symbolic_sizes():
    # a reshape's view strides on symbolic sizes (ATen's computeStride in Python,
    # ``schedule.view_strides``), where a meta tensor refused them (decision 0382)
    torch.manual_seed(0)
    compiled = tsr.compile(flatten_and_unflatten, dynamic=None, codegen="cpp")
    rows = (4, 5, 9, 16, 17, 2, 33, 7, 12)  # the first is static (dynamic=None)
    for count in rows:
        _check(compiled, flatten_and_unflatten, (torch.randn(count, 4, 3),))
    stats = tsr.size_lowering_stats()
    assert 1 <= stats.get("symbolic", 0) < len(rows) - 1, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(rows) - 1, stats


def size_as_value(x):
    n = x.shape[0]
    return x.sum(0) / n, x.new_ones(n, 2) * n, torch.full((n,), 2.0) + n


def test_a_size_used_as_a_value_in_a_kernel():
    # a constant that is a size (a division by the row count, a product with it) prints
    # as its expression over the kernel's symbol arguments, converted as the literal of
    # its value would be (decision 0382)
    torch.manual_seed(0)
    compiled = tsr.compile(size_as_value, dynamic=None, codegen="cpp")
    rows = (4, 5, 9, 16, 17, 2, 33, 7, 12)  # the first is static (dynamic=None)
    for count in rows:
        _check(compiled, size_as_value, (torch.randn(count, 3),))
    stats = tsr.size_lowering_stats()
    assert 1 <= stats.get("symbolic", 0) < len(rows) - 1, stats
    assert stats.get("symbolic", 0) + stats.get("reused", 0) == len(rows) - 1, stats


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def test_rows_as_many_as_the_columns_stay_symbolic():
    # traced at 16 rows of 16: broadcasting the weight ``[16]`` to ``[s0, 16]`` compared
    # the shapes item by item before their ranks, deciding ``Eq(s0, 16)`` (decision 0436)
    weight = torch.randn(16)
    compiled = tsr.compile(rms_norm, dynamic=True, codegen="cpp")
    sizes = (16, 17, 5, 33, 9, 24)
    for rows in sizes:
        _check(compiled, rms_norm, (torch.randn(rows, 16), weight))
    stats = tsr.size_lowering_stats()
    # one lowering a side of the C++ kernels' divisibility decisions (``Mod(s0, 8)``)
    assert set(stats) == {"symbolic", "reused"}, stats
    assert stats["symbolic"] <= 2 and stats["symbolic"] + stats["reused"] == len(sizes), stats


def test_rows_as_many_as_the_width_in_a_training_step_stay_symbolic():
    # first lowered at B*T = 2*32 = 64 rows of a width of 64: the scheduler matched a
    # reduction's rows and reduced elements with a group's by value (a bias gradient
    # regrouped with a norm's), recording ``Eq(2*s0, 64)``: the next size lowered again.
    # Shapes are matched by expression now (decision 0439)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 64))

    def step(x):
        return model(x).square().mean()

    compiled = tsr.compile(step, dynamic=True, codegen="cpp")
    for length in (32, 17, 9, 33, 40):
        x = torch.randn(2, length, 64)
        grads = []
        for fn in (compiled, step):
            fn(x).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            model.zero_grad()
        for got, want in zip(*grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": 4}


def halves_summed(x):
    t = x.shape[1]
    return x[:, : t // 2].sum(1) - x[:, t - t // 2 :].sum(1)


def test_halves_one_long_lower_with_the_other_lengths():
    # at 2 and 3 the halves are one long: the decomposition's ``same_layout`` compared
    # ``t // 2 > 1`` (a condition the size broke: lowered on its own), and the C++ row
    # kernel named its length only from 2. No size decides either now (decision 0480)
    torch.manual_seed(0)
    compiled = tsr.compile(halves_summed, dynamic=True, codegen="cpp")
    sizes = (16, 17, 2, 3, 5, 33, 9)
    for length in sizes:
        _check(compiled, halves_summed, (torch.randn(2, length, 3),))
    assert tsr.size_lowering_stats() == {"symbolic": 1, "reused": len(sizes) - 1}
