"""Negative Python ``int`` values as sizes (decision 0385): a negative int is carried as
its magnitude, by a carrier of its own, so a loop over negative values makes one static
and one symbolic entry, as positive values do; an int seen at both signs makes an entry
pair per sign, each guarded on its sign; -1, 0 and 1 stay specialised. Every call is
compared with eager and the compiled entries are counted."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt

NEGATIVES = (-2, -3, -5, -7, -4, -9, -11, -13, -6)


def tail(x, n):
    return x[:, -n:].sin()


def head(x, n):
    return x[..., :n].cos()


def rolled(x, n):
    return torch.roll(x, n, 1) * 2


def narrowed(x, n):
    return x.narrow(0, 0, x.shape[0] + n).sum(0)


def column(x, n):
    return x[:, n] + 1


def _matches_eager(compiled, fn, values, rows=16):
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in values:
            x = torch.randn(rows, 16)
            torch.testing.assert_close(compiled(x, n), fn(x, n))


@pytest.mark.parametrize("fn", [tail, head, rolled, narrowed, column], ids=lambda f: f.__name__)
def test_negative_int_arguments_are_symbolic(fn):
    compiled = rt.compile(fn, codegen="eager")
    _matches_eager(compiled, fn, NEGATIVES)
    # the first value static, one symbolic entry for the other eight (was 8 entries,
    # then the recompile limit and eager)
    assert len(compiled.cache) == 2
    assert "negative int argument L['n'] becomes symbolic" in compiled.recompile_reasons[0]
    text = str(rt.explain(compiled, torch.randn(16, 16), -8))
    assert "type(L['n']) is int" in text
    assert "L['n']: a negative int, its magnitude as the size of its carrier" in text
    assert "(-L['n']) >= 2" in text


def test_a_positive_value_fails_the_negative_entry_and_recompiles():
    compiled = rt.compile(tail, codegen="eager")
    _matches_eager(compiled, tail, NEGATIVES)
    x = torch.randn(16, 16)
    failures = compiled.guard_failures((x, 5), {})
    assert len(failures) == 2 and all("L['n']" in failure for failure in failures)
    torch.testing.assert_close(compiled(x, 5), tail(x, 5))
    assert len(compiled.cache) == 3


def test_a_negative_value_past_a_relation_recompiles_and_raises_as_eager():
    compiled = rt.compile(narrowed, codegen="eager")
    _matches_eager(compiled, narrowed, NEGATIVES)
    # the symbolic entry relied on 16 + n >= 0: -17 fails its size check, names the int
    failures = compiled.guard_failures((torch.randn(16, 16), -17), {})
    assert any("16 - (-L['n']) >= 0 is false" in failure for failure in failures)
    with pytest.raises(RuntimeError):
        narrowed(torch.randn(16, 16), -17)
    with pytest.raises(RuntimeError):
        compiled(torch.randn(16, 16), -17)


def test_both_signs_make_two_entries_each_and_small_values_stay_specialised():
    compiled = rt.compile(rolled, codegen="eager")
    values = (*NEGATIVES, *(-n for n in NEGATIVES))
    _matches_eager(compiled, rolled, values)
    assert len(compiled.cache) == 4  # static and symbolic per sign
    _matches_eager(compiled, rolled, (-1, 0, 1, -1, 0, 1))
    assert len(compiled.cache) == 7  # -1, 0 and 1: an entry each, like sizes


def test_negative_ints_with_generated_kernels():
    compiled = rt.compile(tail)
    _matches_eager(compiled, tail, NEGATIVES)
    assert len(compiled.cache) == 2
    assert compiled.cache.entries[-1].run is not None


def shifted(x, cfg):
    return torch.roll(x, cfg["shift"], 0)[: cfg["len"]] * cfg["scale"]


def test_a_negative_int_in_a_dict_argument_is_symbolic():
    compiled = rt.compile(shifted, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in NEGATIVES:
            cfg = {"shift": n, "len": -n, "scale": 0.5}
            x = torch.randn(16, 4)
            torch.testing.assert_close(compiled(x, cfg), shifted(x, cfg))
    assert len(compiled.cache) == 2
    reason = compiled.recompile_reasons[0]
    assert "negative int L['cfg']['shift'] becomes symbolic" in reason
    assert "int L['cfg']['len'] becomes symbolic" in reason


def broken_tail(x, n):
    y = x[:, -n:] * 2
    if y.sum() > -1e9:  # a graph break: n is handed on to the resumed segment
        y = y + 1
    return y.sum() + x[:, :n].cos().sum(1)


def test_a_negative_int_stays_symbolic_across_a_graph_break():
    compiled = rt.compile(broken_tail, codegen="eager")
    _matches_eager(compiled, broken_tail, NEGATIVES, rows=3)
    assert len(compiled.cache) == 2  # was 8, then eager
    # the resumed segment: static at its first value, then one symbolic segment
    program = compiled.cache.entries[-1].run.func
    assert [len(segments) for segments in program.segments.values()] == [2]


def test_dynamic_true_and_dynamic_sources_cover_negative_ints_from_the_first_call():
    compiled = rt.compile(tail, codegen="eager", dynamic=True)
    _matches_eager(compiled, tail, (*NEGATIVES, *(-n for n in NEGATIVES)))
    assert len(compiled.cache) == 2  # one symbolic entry per sign
    named = rt.compile(tail, codegen="eager", options={"dynamic_sources": "L['n']"})
    _matches_eager(named, tail, NEGATIVES)
    assert len(named.cache) == 1
