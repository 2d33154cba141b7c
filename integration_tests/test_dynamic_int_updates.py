"""Python ``int`` values the compiled function changes itself, ``dynamic=True`` on ints
beyond the arguments, and the int form of ``mark_static`` (decisions 0386-0388).

- An int computed from symbolic ints and handed back to Python (a dict item advanced
  in the function, ``cfg["pos"] += 1``, a value returned) is computed again at call time
  from the ints it came from, not specialised; so is a module attribute read after the
  function incremented it (``self.pos += 1; x[:, self.pos]``).
- a ``dynamic_sources`` regex makes module attributes and globals symbolic from the first
  call; ``dynamic=True`` alone, from their second value.
- ``mark_static(ModuleClass)`` keeps its instances' int attributes constants.

Every call is compared with eager and the compiled entries are counted."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt

STEPS = 10


def advance_in_place(x, cfg):
    cfg["pos"] += 1
    return x[:, : cfg["pos"]].sum(1) + x[:, cfg["pos"]]


def advance_by_assignment(x, cfg):
    y = x[:, : cfg["pos"]].sum(1)
    cfg["pos"] = cfg["pos"] * 2 - cfg["pos"] + 1
    return y


@pytest.mark.parametrize("fn", [advance_in_place, advance_by_assignment], ids=lambda f: f.__name__)
def test_a_dict_item_the_function_advances_is_symbolic(fn):
    compiled = rt.compile(fn, codegen="eager")
    cfg, reference = {"pos": 2}, {"pos": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for _ in range(STEPS):
            x = torch.randn(3, 20)
            torch.testing.assert_close(compiled(x, cfg), fn(x, reference))
            assert cfg == reference and type(cfg["pos"]) is int
    # static at 2, one symbolic entry for the other nine (was one entry per step)
    assert len(compiled.cache) == 2
    assert "int L['cfg']['pos'] becomes symbolic" in compiled.recompile_reasons[0]
    text = str(rt.explain(compiled, torch.randn(3, 20), {"pos": 7}))
    assert "type(L['cfg']['pos']) is int" in text
    assert "L['cfg']['pos'] >= 2" in text


def test_a_dict_item_advanced_past_a_relation_recompiles_and_raises_as_eager():
    compiled = rt.compile(advance_in_place, codegen="eager")
    cfg = {"pos": 2}
    for _ in range(8):
        compiled(torch.randn(3, 20), cfg)
    # the symbolic entry relied on pos + 1 < 20 (the select): 19 fails it, names the int
    failures = compiled.guard_failures((torch.randn(3, 20), {"pos": 19}), {})
    assert any("L['cfg']['pos']" in failure and "19" in failure for failure in failures)
    with pytest.raises(IndexError):
        compiled(torch.randn(3, 20), {"pos": 19})


def handed_on(x, n):
    return x[:n], n + 1, n * 3 - 4


def test_ints_computed_from_a_symbolic_int_are_the_calls_values():
    compiled = rt.compile(handed_on, codegen="eager")
    for n in (2, 3, 5, 7, 4, 9, 11, 13, 6):
        x = torch.randn(20)
        out, m, k = compiled(x, n)
        assert (type(m), m, type(k), k) == (int, n + 1, int, n * 3 - 4)
        torch.testing.assert_close(out, x[:n])
    assert len(compiled.cache) == 2


class Stepper(torch.nn.Module):
    """Advances its own position, then reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = 2

    def forward(self, x):
        self.pos += 1
        return x[:, : self.pos].sum(1)


def test_a_module_attribute_read_after_its_increment_is_symbolic():
    model, reference = Stepper(), Stepper()
    compiled = rt.compile(model, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for _ in range(STEPS):
            x = torch.randn(3, 20)
            torch.testing.assert_close(compiled(x), reference(x))
            assert model.pos == reference.pos
    forward = compiled.compiled_forward
    assert len(forward.cache) == 2  # was one entry per step
    assert "int L['self'].pos becomes symbolic" in forward.recompile_reasons[0]


WINDOW = 3


def windowed(x):
    return x[:, :WINDOW].sum(1)


class Window(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.size = 3

    def forward(self, x):
        return x[:, : self.size].softmax(-1)


VALUES = (3, 4, 5, 6, 7, 8, 9, 10, 11)


def _run_global(compiled):
    global WINDOW
    try:
        for n in VALUES:
            WINDOW = n
            x = torch.randn(3, 20)
            torch.testing.assert_close(compiled(x), windowed(x))
    finally:
        WINDOW = 3


def _run_attribute(compiled, model):
    for n in VALUES:
        model.size = n
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize("dynamic", [True, None])
def test_globals_and_attributes_become_symbolic_on_their_second_value(dynamic):
    # decision 0387: dynamic=True alone keeps configuration ints static at first, as
    # torch.compile does; a second value makes them symbolic under either policy
    entries = 2
    compiled = rt.compile(windowed, codegen="eager", dynamic=dynamic)
    _run_global(compiled)
    assert len(compiled.cache) == entries
    text = str(rt.explain(compiled, torch.randn(3, 20)))
    assert "type(G['WINDOW']) is int" in text and "G['WINDOW'] >= 2" in text
    model = Window()
    module = rt.compile(model, codegen="eager", dynamic=dynamic)
    _run_attribute(module, model)
    assert len(module.compiled_forward.cache) == entries
    text = str(rt.explain(module, torch.randn(3, 20)))
    assert "type(L['self'].size) is int" in text and "L['self'].size >= 2" in text


def test_a_symbolic_attribute_past_a_relation_recompiles():
    model = Window()
    module = rt.compile(model, codegen="eager", options={"dynamic_sources": r"L\['self'\]\..*"})
    _run_attribute(module, model)
    forward = module.compiled_forward
    assert len(forward.cache) == 1
    model.size = 1  # 0 and 1 stay specialised: the size check fails and names it
    assert any(
        "L['self'].size" in failure for failure in forward.guard_failures((torch.randn(3, 20),), {})
    )
    x = torch.randn(3, 20)
    torch.testing.assert_close(module(x), model(x))
    assert len(forward.cache) == 2


def test_a_dynamic_sources_regex_reaches_an_attribute_from_the_first_call():
    model = Window()
    module = rt.compile(model, codegen="eager", options={"dynamic_sources": r"L\['self'\]\..*"})
    _run_attribute(module, model)
    assert len(module.compiled_forward.cache) == 1  # was 2


class StaticWindow(Window):
    pass


rt.mark_static(StaticWindow)


class DynamoStaticWindow(Window):
    pass


DynamoStaticWindow._dynamo_marked_static = True  # what torch._dynamo.mark_static sets


@pytest.mark.parametrize("cls", [StaticWindow, DynamoStaticWindow], ids=lambda c: c.__name__)
@pytest.mark.parametrize("dynamic", [True, None])
def test_mark_static_on_a_module_class_keeps_its_int_attributes_constants(cls, dynamic):
    model = cls()
    module = rt.compile(model, codegen="eager", dynamic=dynamic, options={"recompile_limit": 16})
    _run_attribute(module, model)
    forward = module.compiled_forward
    assert len(forward.cache) == len(VALUES)  # one constant entry per value
    model.size = 12  # a new value fails every entry's value guard: a new entry again
    failures = forward.guard_failures((torch.randn(3, 20),), {})
    assert len(failures) == len(VALUES)
    assert all(f.startswith("constant_match on L['self'].size (expected") for f in failures)


def test_mark_static_refuses_an_int_and_a_class_that_is_not_a_module():
    with pytest.raises(TypeError, match="mark_static"):
        rt.mark_static(5, 0)
    with pytest.raises(TypeError, match=r"nn\.Module class"):
        rt.mark_static(int)


def advance_after_a_break(x, cfg):
    y = x[:, : cfg["pos"]] * 2
    if y.sum() > -1e9:  # a graph break: the advance happens in the resumed segment
        y = y + 1
    cfg["pos"] += 1
    return y.sum(1) + x[:, cfg["pos"]]


def test_a_dict_item_advanced_after_a_graph_break_is_symbolic():
    compiled = rt.compile(advance_after_a_break, codegen="eager")
    cfg, reference = {"pos": 2}, {"pos": 2}
    for _ in range(STEPS):
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x, cfg), advance_after_a_break(x, reference))
        assert cfg == reference
    assert len(compiled.cache) == 2
    # the resumed segment: static at its first value, then one symbolic segment (was a
    # static segment per value: 8 + 1 segments)
    program = compiled.cache.entries[-1].run.func
    assert [len(segments) for segments in program.segments.values()] == [2]


class Heads(torch.nn.Module):
    """Attention's split into heads: ``view(b, t, self.n_heads, c // self.n_heads)``."""

    def __init__(self) -> None:
        super().__init__()
        self.n_heads = 4
        self.proj = torch.nn.Linear(32, 96)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.proj(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_a_length_of_one_keeps_configuration_ints_static_under_dynamic_true():
    # decision 0472: the entry of length 1 (specialised) planned n_heads symbolic, and the
    # view's strides then decided Eq(s1*(32//s1), 32), refused: that length lowered per
    # size. Now its own entry, lowered once for every batch size
    model = Heads()
    compiled = rt.compile(model, dynamic=True, codegen="cpp")
    rt.reset_size_lowering_stats()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for batch, length in ((2, 16), (2, 17), (2, 1), (3, 1), (2, 5), (5, 1)):
            x = torch.randn(batch, length, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    stats = rt.size_lowering_stats()
    assert stats.get("per_size", 0) == 0 and not any(k.startswith("fallback") for k in stats), stats
    assert len(compiled.compiled_forward.cache) == 2  # symbolic lengths, and length 1
    text = str(rt.explain(compiled, torch.randn(2, 1, 32)))
    assert "L['self'].n_heads == 4" in text
