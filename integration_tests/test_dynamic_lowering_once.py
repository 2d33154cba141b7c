"""A symbolic entry lowered once for many sizes (issue 33, decision 0381): the codegen
stage compiles the graph with its sizes as ``core.SizeValue``, records every decision it
takes on them, and each new size that meets those decisions runs that lowering with no
lowering of its own. Where a site reads a size as a number, the entry lowers per size as
before. Every call is compared with eager; ``size_lowering_stats()`` says which path ran."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import pytest
import torch

import torchstrata.runtime as tsr


@pytest.fixture(autouse=True)
def _fresh_counts_no_fallback() -> Iterator[None]:
    """Counts from zero; a call run eagerly (a runner that failed) is an error."""
    tsr.reset_size_lowering_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
        yield


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


def gelu_mean(x):
    return torch.nn.functional.gelu(x).mean(-1)


def test_an_unported_graph_lowers_per_size_and_says_why():
    # the mean divides by a size as a float (a SymFloat): no symbolic lowering yet
    torch.manual_seed(0)
    compiled = tsr.compile(gelu_mean, dynamic=True, codegen="cpp")
    sizes = range(3, 11)
    for rows in sizes:
        _check(compiled, gelu_mean, (torch.randn(rows, 6),))
    stats = tsr.size_lowering_stats()
    fallbacks = [key for key in stats if key.startswith("fallback: ")]
    assert len(fallbacks) == 1 and "SizeRead" in fallbacks[0], stats
    assert stats.get("per_size") == len(sizes), stats
    assert "symbolic" not in stats, stats


def test_a_training_graph_lowers_per_size():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4)
    compiled = tsr.compile(model, dynamic=True, codegen="cpp")
    for rows in range(3, 7):
        x = torch.randn(rows, 6)
        torch.testing.assert_close(compiled(x), model(x))
    stats = tsr.size_lowering_stats()
    assert stats.get("per_size") == 4, stats
    assert any("a training graph" in key for key in stats), stats


def test_triton_kernels_lower_per_size():
    # Triton compiles at a kernel's first launch, after the lowering: not tried yet
    torch.manual_seed(0)
    compiled = tsr.compile(scaled_softmax, dynamic=True, codegen="triton")
    sizes = range(3, 7)
    for rows in sizes:
        _check(compiled, scaled_softmax, (torch.randn(rows, 8),))
    stats = tsr.size_lowering_stats()
    assert any("Triton kernels lower per size" in key for key in stats), stats
    assert stats.get("per_size") == len(sizes), stats
    assert "symbolic" not in stats, stats
