"""Python ``int`` arguments under the dynamic-shapes policy (decision 0330): static on the
first value, symbolic on a second distinct one (``dynamic=True``: from the first call),
0 and 1 specialised, ``dynamic=False`` a constant per value; a bool or a float is not
such an int."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import torchstrata.runtime as rt

VALUES = (2, 3, 5, 7, 4, 9, 11, 13, 6)


def narrowed(x, n):
    return x.narrow(1, 0, n).sin() + 1


def prefix(x, pos):
    return (x[:, : pos + 1] * 2).sum(1)


def viewed(x, b, n):
    return x.view(b, n, -1).cos()


def ramp(x, n):
    return x[:n] + torch.arange(n)[:, None]


def scaled(x, n):  # the int as a value: symbolic too, as a graph scalar
    return x * n + n


def decode_step(cache, new, pos):
    cache = cache.clone()
    cache[:, pos] = new
    return cache[:, : pos + 1].softmax(-1)


def unrolled(x, n):
    for i in range(n):  # a loop bound specialises the int
        x = x + i
    return x


def _inputs(fn, n):
    if fn is viewed:
        return torch.randn(2 * n * 3), 2, n
    if fn is decode_step:
        return torch.randn(2, 16), torch.randn(2), n
    if fn is ramp:
        return torch.randn(20, 3), n
    return torch.randn(3, 20), n


def _matches_eager_at_every_value(compiled, fn, inputs=_inputs) -> None:
    """Call ``compiled`` at every value of :data:`VALUES` (``inputs(fn, n)``), each result
    equal to ``fn``'s, no fallback to eager."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in VALUES:
            args = inputs(fn, n)
            torch.testing.assert_close(compiled(*args), fn(*args))


@pytest.mark.parametrize("fn", [narrowed, prefix, viewed, ramp, scaled, decode_step])
def test_an_int_argument_becomes_symbolic_on_its_second_value(fn):
    compiled = rt.compile(fn, codegen="eager")
    _matches_eager_at_every_value(compiled, fn)
    # the first value static, then one symbolic entry for the other eight
    assert len(compiled.cache) == 2
    assert "int argument" in compiled.recompile_reasons[0]
    assert "becomes symbolic" in compiled.recompile_reasons[0]


def test_generated_kernels_serve_every_value():
    compiled = rt.compile(decode_step)
    _matches_eager_at_every_value(compiled, decode_step)
    assert len(compiled.cache) == 2


def test_zero_one_and_minus_one_are_specialised():
    compiled = rt.compile(scaled, codegen="eager")
    for n in (2, 3, 0, 1, 5, -1, 8):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, n), scaled(x, n))
    # static 2, symbolic (3, 5, 8), 0, 1, -1
    assert len(compiled.cache) == 5
    assert (compiled.cache.recompiles, compiled.cache.policy_entries) == (2, 3)
    assert any(
        "L['n'] is 0: sizes 0 and 1 are specialised" in r for r in compiled.recompile_reasons
    )


def test_dynamic_true_is_symbolic_from_the_first_call():
    compiled = rt.compile(narrowed, codegen="eager", dynamic=True)
    for n in VALUES:
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x, n), narrowed(x, n))
    assert len(compiled.cache) == 1


def test_dynamic_false_keeps_one_entry_per_value():
    compiled = rt.compile(narrowed, codegen="eager", dynamic=False)
    for n in VALUES[:5]:
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x, n), narrowed(x, n))
    assert len(compiled.cache) == 5


def test_a_loop_bound_specialises_correctly():
    compiled = rt.compile(unrolled, codegen="eager", options={"recompile_limit": 16})
    for n in VALUES:
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x, n), unrolled(x, n))
    assert len(compiled.cache) == len(VALUES)


def test_bools_and_floats_are_not_symbolic_ints():
    compiled = rt.compile(scaled, codegen="eager")
    for value in (2, 3, True, False, 2.0, 3.5):
        x = torch.randn(4)
        out = compiled(x, value)
        torch.testing.assert_close(out, scaled(x, value))
        assert out.dtype == scaled(x, value).dtype
    # 2, the symbolic int entry (3), True, False, 2.0, 3.5: each non-int its own constant
    assert len(compiled.cache) == 6
    for value in (True, 2.0):  # a bool or a float never reaches the symbolic int entry
        failures = compiled.guard_failures((torch.randn(4), value), {})
        assert failures and all("L['n']" in f or "global" in f for f in failures)


def test_the_log_names_the_symbolic_argument(caplog):
    compiled = rt.compile(prefix, codegen="eager")
    with caplog.at_level(logging.INFO, logger="torchstrata.runtime"):
        for pos in (2, 3):
            compiled(torch.randn(3, 20), pos)
    assert any("symbolic sizes: L['pos'] as s" in r.getMessage() for r in caplog.records)


def test_explain_lists_the_int_arguments_guards():
    compiled = rt.compile(prefix, codegen="eager")
    for pos in (2, 3):
        compiled(torch.randn(3, 20), pos)
    text = str(rt.explain(compiled, torch.randn(3, 20), 5))
    assert "type(L['pos']) is int" in text
    assert "sizes of L['pos']" in text
    assert "L['pos'] >= 2" in text


def broken(x, n):
    y = x[:, :n] * 2
    if y.sum() > -1e9:  # a graph break: n is handed on to the resumed segment
        y = y + 1
    return y.sum() + x[:, : n + 1].cos().sum(1)


def test_an_int_argument_stays_symbolic_across_a_graph_break():
    compiled = rt.compile(broken, codegen="eager")
    for n in VALUES:
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x, n), broken(x, n))
    assert len(compiled.cache) == 2
    # the resumed segment: static at its first value, then one symbolic segment
    program = compiled.cache.entries[-1].run.func
    assert [len(segments) for segments in program.segments.values()] == [2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_cuda_decode_step_with_an_int_position(mode):
    # the carrier is a CPU tensor the graph never reads, beside CUDA inputs
    compiled = rt.compile(decode_step, mode=mode)

    def on_the_gpu(fn, pos):
        return torch.randn(2, 16, device="cuda"), torch.randn(2, device="cuda"), pos

    _matches_eager_at_every_value(compiled, decode_step, on_the_gpu)
    assert len(compiled.cache) == 2


def weighted_prefix(x, w, n):
    return (x.narrow(1, 0, n) * w).sum()


def test_a_training_step_with_an_int_argument():
    compiled = rt.compile(weighted_prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in VALUES:
            x = torch.randn(4, 16, requires_grad=True)
            w = torch.randn(4, 1, requires_grad=True)
            x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
            compiled(x, w, n).backward()
            weighted_prefix(x2, w2, n).backward()
            torch.testing.assert_close(x.grad, x2.grad)
            torch.testing.assert_close(w.grad, w2.grad)
    assert len(compiled.cache) == 2


def handed_back(x, n):
    return x[:n], n


def handed_on(x, n):
    return x[:n], n + 1, str(n)  # a Python value computed from n: specialised


def test_an_int_argument_handed_back_is_the_calls_int():
    compiled = rt.compile(handed_back, codegen="eager")
    for n in VALUES:
        x = torch.randn(20)
        out, m = compiled(x, n)
        assert type(m) is int and m == n
        torch.testing.assert_close(out, x[:n])
    assert len(compiled.cache) == 2
    specialised = rt.compile(handed_on, codegen="eager", options={"recompile_limit": 16})
    for n in VALUES:
        x = torch.randn(20)
        out, m, text = specialised(x, n)
        assert (type(m), m, text) == (int, n + 1, str(n))
        torch.testing.assert_close(out, x[:n])
