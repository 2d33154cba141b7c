"""Dynamic shapes, first slice (decision 0200): the policy, guards and limits, on the
first sixteen programs of the corpus (``dynamic_corpus/``, which calls all of them at
sizes 0 and 1 too) called with many sizes of one dimension, compared with eager.

The broad corpus lowers through ``codegen="eager"`` (ATen graphs in the reference
interpreter: capture, guards and the policy are what is tested, in seconds); the
issue's target program and a few others go through the C++ backend.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt
from integration_tests.dynamic_corpus.programs import (
    SIXTEEN,
    SLICING,
    layer_norm,
    pointwise,
    slice_half,
    softmax_gelu,
)
from torchstrata.core import TensorMeta, size_check_of

#: Sizes of the dynamic dimension: odd, even, small and large (never 0 or 1 here).
SIZES = (16, 17, 5, 33, 2, 64, 9, 40)


CORPUS = SIXTEEN


def _call_all(compiled, fn, sizes, *, cols=64):
    w = torch.randn(cols, 32)
    for size in sizes:
        x = torch.randn(size, cols)
        torch.testing.assert_close(compiled(x, w), fn(x, w), msg=lambda m, s=size: f"{s}: {m}")


@pytest.mark.parametrize("fn", CORPUS, ids=lambda f: f.__name__)
def test_corpus_compiles_twice_over_eight_sizes(fn):
    compiled = rt.compile(fn, codegen="eager")
    _call_all(compiled, fn, SIZES)
    # static for 16, symbolic from 17 on (and for size 2 where a slice is 0 or 1 long)
    assert len(compiled.cache) == (3 if fn in SLICING else 2)
    assert "dimension 0 of L['x'] becomes symbolic" in compiled.recompile_reasons[0]


def branchy(x):
    if x.shape[0] > 20:
        return x[: x.shape[0] // 2] * 2
    return x.sum(0)


def test_a_branch_on_a_size_is_guarded():
    compiled = rt.compile(branchy, codegen="eager", dynamic=True)
    for size in (8, 9, 30, 31, 20, 21, 3, 50):
        x = torch.randn(size, 4)
        torch.testing.assert_close(compiled(x), branchy(x))
    # one symbolic entry per side of the branch
    assert len(compiled.cache) == 2
    assert (
        "L['x'].size()[0] > 20" in compiled.recompile_reasons[0]
        or "<= 20" in (compiled.recompile_reasons[0])
    )


def parity(x):
    if x.shape[0] % 2 == 0:
        return x.view(x.shape[0] // 2, -1).sum(1)
    return x[1:].view(-1, 2 * x.shape[1]).sum(1)


def test_a_branch_on_a_remainder_is_one_symbolic_entry_per_side():
    compiled = rt.compile(parity, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for size in (4, 6, 7, 9, 8, 11, 2, 3, 13, 10, 5):
            x = torch.randn(size, 3)
            torch.testing.assert_close(compiled(x), parity(x))
    # static for 4, then one symbolic entry for even sizes and one for odd ones (the
    # remainder used to specialise every size: an entry each, then the recompile limit)
    assert len(compiled.cache) == 3
    assert "Eq(Mod(L['x'].size()[0], 2), 0) is false" in compiled.recompile_reasons[-1]


def test_sizes_zero_and_one_get_static_entries():
    compiled = rt.compile(pointwise, codegen="eager", dynamic=True)
    _call_all(compiled, pointwise, (7, 8, 1, 0, 9, 1, 0))
    assert len(compiled.cache) == 3  # symbolic, size 1, size 0
    assert "L['x'].size()[0] is 1: sizes 0 and 1 are specialised" in compiled.recompile_reasons[0]
    assert "L['x'].size()[0] is 0: sizes 0 and 1 are specialised" in compiled.recompile_reasons[1]


def test_dynamic_false_specialises_every_shape():
    compiled = rt.compile(pointwise, codegen="eager", dynamic=False)
    _call_all(compiled, pointwise, (3, 4, 5))
    assert len(compiled.cache) == 3


def test_mark_dynamic_and_mark_static():
    compiled = rt.compile(pointwise, codegen="eager")
    w = torch.randn(64, 32)
    x = torch.randn(6, 64)
    rt.mark_dynamic(x, 0)
    torch.testing.assert_close(compiled(x, w), pointwise(x, w))
    y = torch.randn(7, 64)
    torch.testing.assert_close(compiled(y, w), pointwise(y, w))
    assert len(compiled.cache) == 1  # symbolic from the first call

    fixed = rt.compile(pointwise, codegen="eager", dynamic=True)
    for size in (6, 7):
        x = torch.randn(size, 64)
        rt.mark_static(x, 0)
        torch.testing.assert_close(fixed(x, w), pointwise(x, w))
    assert len(fixed.cache) == 2
    with pytest.raises(IndexError, match="dimension 3 out of range"):
        rt.mark_dynamic(x, 3)


def test_torch_dynamo_marks_are_honoured():
    # code written for torch.compile marks its tensors with torch._dynamo's functions
    # (tests may import Dynamo; the runtime reads the marks without importing it)
    import torch._dynamo

    compiled = rt.compile(pointwise, codegen="eager")
    w = torch.randn(64, 32)
    for size in (6, 7):
        x = torch.randn(size, 64)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x, w), pointwise(x, w))
    assert len(compiled.cache) == 1  # symbolic from the first call

    fixed = rt.compile(pointwise, codegen="eager", dynamic=True)
    for size in (6, 7):
        x = torch.randn(size, 64)
        torch._dynamo.mark_static(x, 0)
        torch.testing.assert_close(fixed(x, w), pointwise(x, w))
    assert len(fixed.cache) == 2


@pytest.mark.parametrize("fn", [softmax_gelu, slice_half, layer_norm], ids=lambda f: f.__name__)
def test_cpp_backend_sixteen_sizes_two_compiles(fn):
    compiled = rt.compile(fn, codegen="cpp")
    sizes = (16, 17, 5, 33, 2, 64, 9, 40, 3, 11, 23, 7, 128, 31, 6, 19)
    _call_all(compiled, fn, sizes)
    assert len(compiled.cache) == (3 if fn in SLICING else 2)
    report = rt.explain(compiled, torch.randn(5, 64), torch.randn(64, 32))
    assert "dimension 0 of L['x'] becomes symbolic" in str(report)


def test_dynamic_true_every_dim_symbolic_one_entry():
    # x.size(1) == w.size(0) is a relation the ShapeEnv records by replacing one symbol
    # with the other; the guard still reads both
    compiled = rt.compile(softmax_gelu, codegen="eager", dynamic=True)
    for rows, cols in ((17, 64), (17, 64), (9, 64), (30, 48)):
        x, w = torch.randn(rows, cols), torch.randn(cols, 8)
        torch.testing.assert_close(compiled(x, w), softmax_gelu(x, w))
    assert len(compiled.cache) == 1


SEEN: list[int] = []


def python_values(x):
    n = x.shape[0]
    SEEN.append(n)  # a side effect of a size: replayed with its value
    tag = f"rows={n}" + str(n)  # formatting a size specialises it (guarded)
    return x * len(tag), n, x.numel(), x.shape, torch.ones(n // 2)


def sizes_as_values(x):
    n = x.shape[0]
    return torch.ones(n // 2) * x.sum(), x.new_zeros(n, 2)


def test_python_values_of_sizes_are_plain_and_correct():
    compiled = rt.compile(python_values, codegen="eager", dynamic=True)
    for size in (5, 6, 7, 17):
        x = torch.randn(size, 3)
        SEEN.clear()
        got = compiled(x)
        seen_compiled = list(SEEN)
        SEEN.clear()
        expected = python_values(x)
        assert seen_compiled == SEEN
        for a, b in zip(got, expected, strict=True):
            assert type(a) is type(b)
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b)
            else:
                assert a == b


def test_sizes_passed_to_factories_stay_symbolic():
    compiled = rt.compile(sizes_as_values, codegen="eager", dynamic=True)
    for size in (5, 6, 7, 17, 4):
        x = torch.randn(size, 3)
        for a, b in zip(compiled(x), sizes_as_values(x), strict=True):
            torch.testing.assert_close(a, b)
    assert len(compiled.cache) == 1


def test_sizes_beyond_the_lowering_cap_run_unlowered():
    from torchstrata.capture import capture
    from torchstrata.core import SymbolicSizes, interpret, symbolic_scope
    from torchstrata.runtime.dynamic_shapes import SizeSpecialisedRunner

    lowered = []

    def lower(graph):
        lowered.append(graph)
        return lambda *inputs: interpret(graph, *inputs)

    sizes = SymbolicSizes({"L['x']": [0]})
    with symbolic_scope(sizes):
        graph = capture(pointwise, (torch.randn(6, 64), torch.randn(64, 32)), {}).graphs[0]
    runner = SizeSpecialisedRunner(graph, lower, max_lowered=2)
    w = torch.randn(64, 32)
    for size in (6, 7, 6, 8, 9):
        x = torch.randn(size, 64)
        torch.testing.assert_close(runner.call(x, w)[0], pointwise(x, w))
    assert len(lowered) == 2  # 6 and 7; 8 and 9 ran unlowered


def growing_cache(cache, new):
    # a KV cache that grows by one row per step
    cache = torch.cat([cache, new], dim=0)
    scores = torch.softmax(cache @ new.T, dim=0)
    return cache, (scores * cache).sum(0)


def length_mask(x, lengths):
    mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
    return torch.where(mask, x, 0.0).sum(1) / lengths


def loop_over_columns(x):
    total = x[:, 0]
    for i in range(1, x.size(1)):  # a loop over a size: unrolled, so specialised
        total = total + x[:, i] * i
    return total


def test_a_growing_cache_compiles_twice():
    compiled = rt.compile(growing_cache, codegen="cpp")
    cache = torch.randn(3, 16)
    for _ in range(10):
        new = torch.randn(1, 16)
        got, got_out = compiled(cache, new)
        want, want_out = growing_cache(cache, new)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_out, want_out)
        cache = want
    assert len(compiled.cache) == 2


def attend_step(k_cache, v_cache, q, k, v):
    keys, values = torch.cat([k_cache, k], dim=1), torch.cat([v_cache, v], dim=1)
    return torch.softmax(q @ keys.transpose(1, 2), -1) @ values, keys, values


def test_dynamic_true_with_inputs_the_trace_made_static():
    # every size of q, k, v is specialised by the trace (the batch and width equal the
    # caches', the step is 1): their guards are exact, and the size check reads those
    # sizes from them instead of failing every call ("no tensor guard") until the
    # recompile limit
    compiled = rt.compile(attend_step, codegen="eager", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        for length in range(5, 16):
            k_cache, v_cache = torch.randn(2, length, 16), torch.randn(2, length, 16)
            q, k, v = torch.randn(3, 2, 1, 16)  # views of one tensor, as a fused qkv gives
            for got, want in zip(
                compiled(k_cache, v_cache, q, k, v),
                attend_step(k_cache, v_cache, q, k, v),
                strict=True,
            ):
                torch.testing.assert_close(got, want)
    assert len(compiled.cache) <= 2
    (entry,) = [e for e in compiled.cache.entries if "symbolic sizes" in str(e.guards.guards)]
    exact = [g for g in entry.guards.guards if isinstance(g.expected, TensorMeta)]
    assert len(exact) == 3  # q, k, v
    for guard in exact:  # compared as ints: a SymInt of known value compares via sympy
        sizes = (*guard.expected.shape, *guard.expected.strides)
        assert all(type(size) is int for size in sizes), guard
    (check,) = [size_check_of(g) for g in entry.guards.guards if size_check_of(g)]
    pinned = {"L['q']", "L['k']", "L['v']"}
    names = {b.name for b in check.sizes.bindings if b.source in pinned}
    # relations over the sizes of q, k, v read the values their exact guards require;
    # none is left that those guards decide alone
    assert not any({s.name for s in expr.free_symbols} & names for expr in check.exprs)
    assert len(check.exprs) < len(check.sizes.guard_exprs())
    failure = entry.guards.failure(
        {
            "k_cache": torch.randn(3, 7, 16),
            "v_cache": torch.randn(3, 7, 16),
            "q": q,
            "k": k,
            "v": v,
        },
        compiled._globals,
    )
    assert failure is not None and "L['k_cache'].size()[0]" in str(failure)


def test_a_mask_from_arange_and_lengths():
    compiled = rt.compile(length_mask, codegen="cpp")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)  # never eagerly
        for time_steps in (6, 7, 11, 30, 5, 9, 13, 8):
            x = torch.randn(4, time_steps)
            lengths = torch.randint(1, time_steps + 1, (4,))
            torch.testing.assert_close(compiled(x, lengths), length_mask(x, lengths))
    assert len(compiled.cache) == 2


def test_a_loop_over_a_size_specialises_and_stays_correct():
    compiled = rt.compile(loop_over_columns, codegen="eager")
    for cols in (3, 4, 5, 3, 6, 4, 7, 8):
        x = torch.randn(5, cols)
        torch.testing.assert_close(compiled(x), loop_over_columns(x))
    # range(n) unrolls the loop: every column count is its own entry, guarded on the size
    assert len(compiled.cache) == 6
