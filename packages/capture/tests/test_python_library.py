"""The Python constructs of issue-level model code, each through the runtime: one graph,
no graph break (``runtime.explain``), the compiled result equal to eager's."""

from __future__ import annotations

import dataclasses
import functools
import operator
import warnings
from collections import namedtuple

import pytest
import torch
import torch.nn.functional as F

from torchstrata.capture import capture
from torchstrata.core import interpret

Pair = namedtuple("Pair", ["left", "right"])


@functools.lru_cache(maxsize=16)
def _widths(n: int) -> tuple[int, ...]:
    return tuple(range(1, n + 1))


@dataclasses.dataclass
class Output:
    hidden: torch.Tensor
    layer: int = 0


class Guarded:
    def __init__(self) -> None:
        self.entered = False

    def __enter__(self) -> Guarded:
        self.entered = True
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


class Scaler:
    def __init__(self, k: float) -> None:
        self.k = k

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


class NativeCall:
    __call__ = torch.tanh  # a builtin: no bytecode, not bound to the instance


SCALER = Scaler(3.0)
NATIVE = NativeCall()


def callable_objects(x):
    return SCALER(x) + Scaler(2.0)(x) + NATIVE(x)


def reduce_add(x):
    return functools.reduce(operator.add, [x, x * 2, x * 3])


def lru_cached(x):
    return x * sum(_widths(3))


def join_constants(x):
    return x + 1, "-".join(["a", "b", str(x.shape[0])])


def sorted_dict_keys(x):
    table = {"b": 2, "a": 1}
    return [x * table[k] for k in sorted(table.keys())]


def namedtuple_replace(x):
    return Pair(x, x)._replace(right=x * 2).right


def local_class(x):
    class Local:
        k = 2

        def apply(self, t):
            return t * self.k

    return Local().apply(x)


def threshold(x):
    return F.threshold(x, 0.0, -1.0)


def radd_directly(x):
    return torch.Tensor.__radd__(x, 3.0)


def record_function(x):
    with torch.autograd.profiler.record_function("region"):
        return x.exp()


def raise_and_catch(x):
    try:
        raise KeyError("missing")
    except KeyError as error:
        return x + len(error.args)


def dataclass_output(x):
    out = Output(x.relu(), layer=1)
    return out.hidden * out.layer


def user_context(x):
    with Guarded() as guard:
        y = x * 2 if guard.entered else x
    return y


def no_grad_and_inference(x):
    with torch.no_grad():
        a = x * 2
    with torch.inference_mode():
        b = x + 1
    return a + b


PROGRAMS = [
    reduce_add, lru_cached, join_constants, sorted_dict_keys, namedtuple_replace, local_class,
    threshold, radd_directly, record_function, raise_and_catch, dataclass_output, user_context,
    no_grad_and_inference, callable_objects,
]  # fmt: skip


def _same(actual, expected):
    if isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        assert actual == expected


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_one_graph_no_break(fn):
    x = torch.randn(3, 4)
    result = capture(fn, (x,), {})
    assert result.graph_breaks == () and len(result.graphs) == 1
    runtime = pytest.importorskip("torchstrata.runtime")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        compiled = runtime.compile(fn, fullgraph=True, codegen="eager")
        report = runtime.explain(compiled, x)
        assert report.graph_break_count == 0 and report.graph_count == 1
        _same(compiled(x), fn(x))


def test_dataclass_returned_keeps_its_type(capture_only):
    def make(x):
        return Output(x * 2, layer=3)

    runner = capture_only(make)
    x = torch.randn(2)
    out = runner(x)
    assert type(out) is Output and out.layer == 3 and runner.breaks == []
    torch.testing.assert_close(out.hidden, x * 2)


def test_uncaught_exception_is_raised_as_eager_raises(capture_only):
    def fail(x):
        y = x * 2
        if y.shape[0] > 1:
            raise ValueError("too long")
        return y

    with pytest.raises(ValueError, match="too long"):
        capture_only(fail)(torch.randn(3))


class _Processors(list):
    """A list subclass called like Hugging Face's LogitsProcessorList."""

    def __call__(self, x):
        for processor in self:
            x = processor(x)
        return x


class _Unhashable(list):
    def __call__(self, x):
        return x * len(self)

    __hash__ = None  # type: ignore[assignment]


def test_a_list_subclass_is_iterated_by_index_under_a_length_guard(against_eager):
    processors = _Processors([torch.tanh, functools.partial(torch.mul, other=2.0)])
    x = torch.randn(3)
    result = capture(lambda p, x: p(x), (processors, x), {})
    assert result.graph_breaks == ()
    against_eager(result, lambda p, x: p(x), processors, x)
    assert any(g.source == "len(L['p'])" for g in result.guards)


def test_calling_an_unhashable_callable_object_does_not_crash_capture(against_eager):
    def fn(scale, x):
        return scale(x) + 1

    scale = _Unhashable([1, 2])
    result = capture(fn, (scale, torch.ones(2)), {})
    if result.program is not None:  # traced, or split at the call: the same as eager
        against_eager(result, fn, scale, torch.ones(2))


def test_jit_is_tracing_folds_to_false(against_eager):
    def fn(x):
        if torch.jit.is_tracing():
            return x * 0
        return x + 1

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks == ()
    against_eager(result, fn, torch.ones(2))


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_pad_sequence_is_traced_as_pads_and_a_stack(against_eager, side, batch_first):
    def fn(sequences):
        return torch.nn.utils.rnn.pad_sequence(
            sequences, batch_first=batch_first, padding_value=-1.0, padding_side=side
        )

    sequences = [torch.randn(2, 3), torch.randn(4, 3), torch.randn(1, 3)]
    result = capture(fn, (sequences,), {})
    assert result.graph_breaks == ()
    against_eager(result, fn, sequences)


@dataclasses.dataclass
class _Config:
    hidden: int = 8
    act: str = "gelu"

    def __post_init__(self):
        if self.hidden % 4:
            raise ValueError("hidden must be divisible by 4")


def test_a_config_that_raises_in_post_init_is_caught_in_the_trace(against_eager):
    def fn(x):
        try:
            _Config(hidden=6)
            message = ""
        except ValueError as error:
            message = str(error)
        smaller = dataclasses.replace(_Config(), hidden=4)
        return (
            x * smaller.hidden,
            message,
            dataclasses.asdict(smaller),
            dataclasses.astuple(smaller),
        )

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks == ()
    against_eager(result, fn, torch.ones(2))


def test_a_config_error_nobody_catches_is_a_graph_break():
    def fn(x):
        return x * _Config(hidden=6).hidden

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks
    with pytest.raises(ValueError, match="divisible"):
        runners = [functools.partial(interpret, g) for g in result.graphs]
        result.program(runners, (torch.ones(2),), {})


def test_set_and_sorted_of_a_dict_holding_tensors_read_its_keys(against_eager):
    def fn(x):
        outputs = {"b": x * 2, "a": x + 1}
        return sorted(outputs), set(outputs) - {"a"}, frozenset(outputs)

    result = capture(fn, (torch.ones(2),), {})
    assert result.graph_breaks == ()
    against_eager(result, fn, torch.ones(2))


def test_parameters_to_vector_traces(against_eager):
    model = torch.nn.Linear(3, 2)

    def fn(model):
        return torch.nn.utils.parameters_to_vector(model.parameters()) * 2

    result = capture(fn, (model,), {})
    assert result.graph_breaks == ()
    against_eager(result, fn, model)
