"""Compiled functions return the Python types eager returns: ``torch.return_types``
structseqs, namedtuples, dataclasses and dicts, in the forward, in training, through
graph breaks, and when such a value flows between ops inside the captured graph."""

from __future__ import annotations

import collections
import dataclasses
import warnings
from typing import Any

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.capture import graph_break

Pair = collections.namedtuple("Pair", "low high")


@dataclasses.dataclass
class Stats:
    mean: torch.Tensor
    spread: torch.Tensor


@pytest.fixture(autouse=True)
def _fresh():
    rt.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        yield
    rt.reset()


def assert_same_structure(actual: Any, expected: Any) -> None:
    """Same types (exactly), field names, keys and values, recursively."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)
    elif dataclasses.is_dataclass(expected):
        for field in dataclasses.fields(expected):
            assert_same_structure(getattr(actual, field.name), getattr(expected, field.name))
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same_structure(actual[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected, strict=True):
            assert_same_structure(got, want)
        for name in getattr(type(expected), "_fields", ()):
            assert_same_structure(getattr(actual, name), getattr(expected, name))
    else:
        assert actual == expected


def max_of_rows(x):
    return x.max(1)


def sort_rows(x):
    return torch.sort(x, 1, descending=True)


def top_two(x):
    return x.topk(2, dim=-1)


def kth(x):
    return torch.kthvalue(x, 2, 1)


def cumulative(x):
    return torch.cummax(x, 0), torch.cummin(x, 1)


def median_mode(x):
    return x.median(1), torch.mode(x, 0)


def mantissa(x):
    return torch.frexp(x)


def extremes(x):
    return torch.aminmax(x, dim=0)


def decompositions(x):
    sym = x @ x.mT + torch.eye(x.shape[-1])
    return torch.linalg.eigh(sym), torch.linalg.qr(x), torch.linalg.slogdet(sym)


def uses_fields(x):
    result = x.max(1)
    return result.values * 2 + result.indices, result


def unpacked(x):
    values, indices = x.min(0)
    return values, indices


def in_dict(x):
    return {"max": x.max(0), "sum": x.sum(), "pair": Pair(x.min(), x.max())}


def in_namedtuple(x):
    return Pair(x - 1, x + 1)


def in_dataclass(x):
    return Stats(x.mean(0), x.std(0))


def nested(x):
    return [Pair(x.max(1), {"sorted": x.sort(0)}), (x.aminmax(),)]


SQUARE = torch.randn(4, 4)
CASES = [
    max_of_rows,
    sort_rows,
    top_two,
    kth,
    cumulative,
    median_mode,
    mantissa,
    extremes,
    decompositions,
    uses_fields,
    unpacked,
    in_dict,
    in_namedtuple,
    in_dataclass,
    nested,
]


@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__)
def test_forward_returns_eager_types(fn):
    compiled = rt.compile(fn)
    for _ in range(2):  # the first call compiles; the second runs the cached program
        x = torch.randn(4, 4)
        assert_same_structure(compiled(x), fn(x))


@pytest.mark.parametrize(
    "fn",
    [max_of_rows, sort_rows, uses_fields, in_dict, nested, in_dataclass],
    ids=lambda fn: fn.__name__,
)
def test_training_returns_eager_types_and_gradients(fn):
    compiled = rt.compile(fn)
    base = torch.randn(4, 4)
    x, y = base.clone().requires_grad_(), base.clone().requires_grad_()
    actual, expected = compiled(x), fn(y)
    assert_same_structure(actual, expected)
    assert any(t.grad_fn is not None for t in _float_tensors(actual))

    def total(value: Any) -> torch.Tensor:
        return sum(t.sum() for t in _float_tensors(value))

    total(actual).backward()
    total(expected).backward()
    torch.testing.assert_close(x.grad, y.grad)


def _float_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.dtype.is_floating_point else []
    if dataclasses.is_dataclass(value):
        value = [getattr(value, field.name) for field in dataclasses.fields(value)]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [t for item in value for t in _float_tensors(item)]
    return []


def break_between(x):
    result = x.max(1)
    stats = Stats(result.values, x.std(1))
    graph_break()
    return result, result.indices + 1, stats


def fields_after_break(x):
    result = torch.sort(x, 0)
    graph_break()
    return result.values - result.indices


def test_structseqs_live_across_a_graph_break(capsys):
    for fn in (break_between, fields_after_break):
        compiled = rt.compile(fn)
        for _ in range(2):
            x = torch.randn(3, 5)
            assert_same_structure(compiled(x), fn(x))
        assert rt.explain(compiled, torch.randn(3, 5)).graph_break_count == 1
    capsys.readouterr()


def values_of(result, x):
    return result.values * x, result


def test_structseq_argument_keeps_its_type_and_fields():
    compiled = rt.compile(values_of)
    for _ in range(2):
        x = torch.randn(3, 4)
        result = torch.randn(3, 4).max(0)
        assert_same_structure(compiled(result, x), values_of(result, x))


def test_structseq_fields_inside_the_graph_need_no_break():
    report = rt.explain(uses_fields, torch.randn(3, 4))
    assert report.graph_break_count == 0 and report.graph_count == 1


@dataclasses.dataclass(frozen=True)
class Frozen:
    scale: torch.Tensor
    shift: float = 1.0

    def apply(self, x):
        return x * self.scale + self.shift


def dataclass_fields_in_graph(x):
    stats = Stats(x.mean(0), x.std(0))
    frozen = Frozen(stats.spread, shift=2.0)
    return frozen.apply(x - stats.mean), stats, isinstance(frozen, Frozen)


def test_dataclass_values_flow_through_the_graph_without_a_break():
    compiled = rt.compile(dataclass_fields_in_graph)
    for _ in range(2):
        x = torch.randn(4, 3)
        assert_same_structure(compiled(x), dataclass_fields_in_graph(x))
    report = rt.explain(compiled, torch.randn(4, 3))
    assert report.graph_break_count == 0 and report.graph_count == 1


@dataclasses.dataclass
class WithPostInit:
    value: torch.Tensor

    def __post_init__(self):
        self.value = self.value * 2


def post_init(x):
    return WithPostInit(x + 1)


def test_dataclass_with_post_init_is_traced_through_its_init():
    compiled = rt.compile(post_init)
    x = torch.randn(3)
    assert_same_structure(compiled(x), post_init(x))
    report = rt.explain(compiled, x)
    assert report.graph_break_count == 0 and report.graph_count == 1
