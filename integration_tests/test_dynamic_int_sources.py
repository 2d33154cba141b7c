"""Python ``int`` values as sizes beyond plain arguments (decisions 0365-0367): a select
index, ints inside tuple/list/dict arguments, module attributes and globals become
symbolic on their second value; chunk/split counts stay specialised (they change the
number of outputs); ``dynamic_sources`` marks an int symbolic from the first call.
Every call is compared with eager and the compiled entries are counted."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt

VALUES = (2, 3, 5, 7, 4, 9, 11, 13, 6)


def column(x, n):
    return x[:, n].sin()


def row(x, n):
    return x[n].cos() * 2


def from_the_end(x, n):
    return x[:, -n] + 1


def zeros_of(x, n):
    return torch.zeros(n, 3) + x[:n, :3]


def new_zeros_of(x, n):
    return x.new_zeros(n) + x.sum()


def rows_of(x, n):
    return x.reshape(n, -1).softmax(-1)


@pytest.mark.parametrize(
    ("fn", "negatives"),
    [
        (column, (-1, -7)),
        (row, (-2, -20)),
        (from_the_end, (-3,)),
        (zeros_of, ()),  # a negative size is an error in eager too
        (new_zeros_of, ()),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_an_int_as_an_index_or_a_factory_size_is_symbolic(fn, negatives):
    compiled = rt.compile(fn, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in (*VALUES, 0, 1, *negatives):
            x = torch.randn(20, 20)
            torch.testing.assert_close(compiled(x, n), fn(x, n))
    # the first value static, one symbolic entry for the other eight; 0, 1 and the
    # negatives (-1 specialised, a first negative static: decision 0385) an entry each
    assert len(compiled.cache) == 4 + len(negatives)
    assert "int argument L['n'] becomes symbolic" in compiled.recompile_reasons[0]


def test_a_reshape_size_from_an_int_is_symbolic():
    compiled = rt.compile(rows_of, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in VALUES:
            x = torch.randn(6 * n)
            torch.testing.assert_close(compiled(x, n), rows_of(x, n))
    assert len(compiled.cache) == 2


def test_a_select_index_with_generated_kernels_zero_one_and_negatives():
    compiled = rt.compile(column)
    values = (*VALUES, 0, 1, 19, -1, -20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in values:
            x = torch.randn(20, 20)
            torch.testing.assert_close(compiled(x, n), column(x, n))
    # static 2, symbolic (3 .. 19), 0, 1, -1 (specialised) and -20 (the first negative
    # value: static, decision 0385)
    assert len(compiled.cache) == 6
    # the symbolic entry relied on n < 20: 20 fails its size check and recompiles,
    # where capture sees the out-of-bounds index and eager raises it
    assert any(
        "L['n'] <= 19" in f or "L['n'] < 20" in f
        for f in compiled.guard_failures((torch.randn(20, 20), 20), {})
    )
    with pytest.raises(IndexError):
        compiled(torch.randn(20, 20), 20)


def in_chunks(x, n):
    return [part.sum(0) for part in x.chunk(n, 1)]


def in_pieces(x, n):
    return [part.sum(0) for part in x.split(n, 1)]


@pytest.mark.parametrize("fn", [in_chunks, in_pieces], ids=lambda f: f.__name__)
def test_chunk_and_split_counts_stay_specialised(fn):
    # the count or size decides how many tensors come out: one entry per value
    compiled = rt.compile(fn, codegen="eager", options={"recompile_limit": 16})
    for n in VALUES:
        x = torch.randn(4, 20)
        got, expected = compiled(x, n), fn(x, n)
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b)
    assert len(compiled.cache) == len(VALUES)
    assert "L['n']" in compiled.recompile_reasons[-1]


def pair(x, sizes):
    return x[:, : sizes[0]].sum(1) + x[:, : sizes[1]].mean(1)


def configured(x, cfg):
    return x[:, : cfg["len"]].sin() * cfg["scale"]


@pytest.mark.parametrize("as_list", [False, True])
def test_ints_in_a_tuple_or_list_argument_are_symbolic(as_list):
    compiled = rt.compile(pair, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in (*VALUES, 0, 1):
            sizes = [n, n + 2] if as_list else (n, n + 2)
            x = torch.randn(3, 20)
            torch.testing.assert_close(compiled(x, sizes), pair(x, sizes))
    # static, symbolic, then 0 (as item 0) and 1 (as item 0) each specialised
    assert len(compiled.cache) == 4
    assert "int L['sizes'][0] becomes symbolic" in compiled.recompile_reasons[0]
    assert "int L['sizes'][1] becomes symbolic" in compiled.recompile_reasons[0]


def test_an_int_in_a_dict_argument_is_symbolic_and_named():
    compiled = rt.compile(configured, codegen="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for n in VALUES:
            cfg = {"len": n, "scale": 2.0}
            x = torch.randn(3, 20)
            torch.testing.assert_close(compiled(x, cfg), configured(x, cfg))
    assert len(compiled.cache) == 2
    assert "int L['cfg']['len'] becomes symbolic" in compiled.recompile_reasons[0]
    text = str(rt.explain(compiled, torch.randn(3, 20), {"len": 8, "scale": 2.0}))
    assert "type(L['cfg']['len']) is int" in text
    assert "L['cfg']['len'] >= 2" in text
    # the float beside it stays a constant: another scale is a new entry, not a wrong one
    x = torch.randn(3, 20)
    cfg = {"len": 5, "scale": 3.0}
    torch.testing.assert_close(compiled(x, cfg), configured(x, cfg))
    assert len(compiled.cache) == 3


class Decoder(torch.nn.Module):
    """A cache read up to a position the caller advances between calls."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = 2
        self.register_buffer("cache", torch.randn(2, 32))

    def forward(self, x):
        return (self.cache[:, : self.pos] * x[:, None]).sum(1) + self.cache[:, self.pos]


def test_a_module_attribute_advanced_by_the_caller_is_symbolic_and_guarded():
    model = Decoder()
    compiled = rt.compile(model, codegen="eager")
    forward = compiled.compiled_forward
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for pos in (*VALUES, 31, 0, 1, 17):
            model.pos = pos
            x = torch.randn(2)
            torch.testing.assert_close(compiled(x), model(x))
    assert len(forward.cache) == 4  # static 2, symbolic, 0, 1
    assert "int L['self'].pos becomes symbolic" in forward.recompile_reasons[0]
    # past the end of the cache: the symbolic entry's relation fails and names the
    # attribute; the recompile raises eager's IndexError, never a wrong number
    model.pos = 32
    assert any("L['self'].pos" in f for f in forward.guard_failures((torch.randn(2),), {}))
    with pytest.raises(IndexError):
        compiled(torch.randn(2))


class Stepper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = 2

    def forward(self, x):
        if self.pos > 8:  # a branch on the attribute: its relation is guarded
            return x[: self.pos] * 2
        return x[: self.pos] - 1


def test_a_branch_on_a_module_attribute_recompiles_once():
    model = Stepper()
    compiled = rt.compile(model, codegen="eager")
    for pos in VALUES:
        model.pos = pos
        x = torch.randn(16)
        torch.testing.assert_close(compiled(x), model(x))
    forward = compiled.compiled_forward
    # static 2, symbolic for pos <= 8, symbolic for pos > 8
    assert len(forward.cache) == 3
    assert any("L['self'].pos" in r and "8" in r for r in forward.recompile_reasons[1:])


WINDOW = 2


def windowed(x):
    return x[:, :WINDOW].sum(1)


def test_a_global_int_is_symbolic_and_named():
    global WINDOW
    compiled = rt.compile(windowed, codegen="eager")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
            for n in VALUES:
                WINDOW = n
                x = torch.randn(3, 20)
                torch.testing.assert_close(compiled(x), windowed(x))
    finally:
        WINDOW = 2
    assert len(compiled.cache) == 2
    assert "int G['WINDOW'] becomes symbolic" in compiled.recompile_reasons[0]


def prefix(x, n):
    return x[:, :n].cos()


@pytest.mark.parametrize("named", ["L['n']", "L\\['n.*", ("L['n']",)], ids=str)
def test_dynamic_sources_make_an_int_symbolic_from_the_first_call(named):
    compiled = rt.compile(prefix, codegen="eager", options={"dynamic_sources": named})
    for n in VALUES:
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x, n), prefix(x, n))
    assert len(compiled.cache) == 1


def test_dynamic_sources_name_a_module_attribute():
    model = Decoder()
    compiled = rt.compile(model, codegen="eager", options={"dynamic_sources": "L['self'].pos"})
    for pos in VALUES:
        model.pos = pos
        x = torch.randn(2)
        torch.testing.assert_close(compiled(x), model(x))
    assert len(compiled.compiled_forward.cache) == 1


def test_dynamic_sources_give_way_to_dynamic_false_and_mark_dynamic_refuses_an_int():
    compiled = rt.compile(
        prefix, codegen="eager", dynamic=False, options={"dynamic_sources": "L['n']"}
    )
    for n in VALUES[:4]:
        x = torch.randn(3, 20)
        torch.testing.assert_close(compiled(x, n), prefix(x, n))
    assert len(compiled.cache) == 4
    with pytest.raises(TypeError, match="dynamic_sources"):
        rt.mark_dynamic(5, 0)
    with pytest.raises(TypeError, match="dynamic_sources"):
        rt.compile(prefix, options={"dynamic_sources": 3})


def broken_config(x, cfg):
    y = x[:, : cfg["len"]] * 2
    if y.sum() > -1e9:  # a graph break: cfg is handed on to the resumed segment
        y = y + 1
    return y.sum() + x[:, : cfg["len"] + 1].cos().sum(1)


def test_an_int_in_a_dict_stays_symbolic_across_a_graph_break():
    compiled = rt.compile(broken_config, codegen="eager")
    for n in VALUES:
        x, cfg = torch.randn(3, 20), {"len": n}
        torch.testing.assert_close(compiled(x, cfg), broken_config(x, cfg))
    assert len(compiled.cache) == 2
    # the resumed segment: static at its first value, then one symbolic segment
    program = compiled.cache.entries[-1].run.func
    assert [len(segments) for segments in program.segments.values()] == [2]


class KvDecoder(torch.nn.Module):
    """A decode step that writes its cache at ``self.pos`` and advances it itself."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = 2
        self.register_buffer("cache", torch.zeros(2, 32))

    def forward(self, x):
        self.cache[:, self.pos] = x
        out = self.cache[:, : self.pos + 1].softmax(-1)
        self.pos += 1
        return out


def test_a_decode_step_advancing_its_own_position_with_generated_kernels():
    model, reference = KvDecoder(), KvDecoder()
    compiled = rt.compile(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for _ in range(12):
            x = torch.randn(2)
            torch.testing.assert_close(compiled(x), reference(x))
            assert model.pos == reference.pos
    torch.testing.assert_close(model.cache, reference.cache)
    assert len(compiled.compiled_forward.cache) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_cuda_decode_step_advancing_its_own_position(mode):
    # the position's carrier is a CPU tensor the graph never reads, beside CUDA buffers
    model, reference = KvDecoder().cuda(), KvDecoder().cuda()
    reference.cache.copy_(model.cache)
    compiled = rt.compile(model, mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        for _ in range(12):
            x = torch.randn(2, device="cuda")
            torch.testing.assert_close(compiled(x), reference(x))
            assert model.pos == reference.pos
    assert len(compiled.compiled_forward.cache) == 2
