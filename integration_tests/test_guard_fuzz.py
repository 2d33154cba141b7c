"""Differential fuzzing of guards: a compiled function called again and again with
changing Python values must give what eager gives on every call.

Each hypothesis example builds a fresh compiled function from three choices:

* where the changing value comes from: a positional or keyword argument, a default
  (``fn.__defaults__`` rewritten, ``fn.__kwdefaults__`` changed in place, or the
  default of a function or method the compiled one calls), a module global, a closure cell, an
  ``nn.Module`` attribute (``self.s``), an attribute of a plain object passed in, or an
  item of a list or dict passed in (the same container changed in place);
* what happens before the value is read: nothing (one graph), or a graph break
  (``.item()`` feeding a Python ``range``, or a ``graph_break()``), so that the value is first
  read by a segment captured after the break and checked by that segment's guards;
* how the value is used: tensor math (``x * s``, ``x / s``), ``torch.full_like``,
  ``torch.where(x > s, ...)``, Python control flow (``if s > 0``), an index
  (``x[s]``: ``True`` is not ``1``, a list is not a tuple), a reduction dimension, a
  dtype, a tensor operand (dtype, shape, strides, ``requires_grad``), or a nested
  structure (None, bools, ints, floats, strings, lists, tuples, dicts) folded into a
  number in Python.

It then calls the compiled function and eager with fresh equal inputs for a sequence of
values that guards must tell apart (``0.0``/``-0.0``, NaN, infinities, subnormals,
``True``/``1``, ``[0, 1]``/``(0, 1)``, ...) and compares every result exactly: values
(NaN equal to NaN), the sign of zeros, dtypes, shapes and ``requires_grad``. A stale
graph reused after the value changed shows up as a wrong result; falling back to eager
is allowed. ``TORCHSTRATA_FUZZ_EXAMPLES`` raises the number of examples for a longer
local campaign.
"""

from __future__ import annotations

import math
import os
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchstrata.runtime as rt
from torchstrata.capture import graph_break

EXAMPLES = int(os.environ.get("TORCHSTRATA_FUZZ_EXAMPLES", "60"))

#: The module global that the ``global`` source reads (rewritten between calls).
FUZZ_VALUE: Any = None


# --- values -------------------------------------------------------------------------

SPECIAL_FLOATS = [
    0.0,
    -0.0,
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    1e-300,
    -1e-300,
    5e-324,
    2.5,
    -1.5,
]
SPECIAL_INTS = [0, 1, -1, 2, 2**40, -(2**62)]
numbers = st.one_of(
    st.sampled_from(SPECIAL_FLOATS + SPECIAL_INTS + [True, False]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(-(2**31), 2**31),
)
# ``torch.full_like`` of a float32 tensor: eager raises for a double beyond float32's
# range where the compiled function rounds it (not a guard matter: noted, not fuzzed).
float32_numbers = st.one_of(
    st.sampled_from(SPECIAL_FLOATS + SPECIAL_INTS + [True, False]),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.integers(-(2**31), 2**31),
)
indices = st.sampled_from(
    [0, 1, -1, True, False, None, (0, 1), [0, 1], (1, 0), [1, 0], (None, 0), (True,), [True]]
)
dims = st.sampled_from([0, 1, -1, -2, (0,), (1,), (0, 1), [0], [1, 0], (-1, 0)])
dtypes = st.sampled_from(
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
    ]
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(SPECIAL_FLOATS + SPECIAL_INTS),
    st.sampled_from(["", "a", "b", "ab"]),
)
structures = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(["a", "bb", "ccc"]), inner, max_size=2),
    ),
    max_leaves=6,
)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """A tensor that broadcasts against (3, 4): of several dtypes, shapes, strides."""
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool]))
    layout = draw(st.sampled_from(["row", "transposed", "column", "scalar", "vector"]))
    base = torch.arange(12, dtype=torch.float64).sub(5.5)
    if layout == "row":
        value = base.reshape(3, 4)
    elif layout == "transposed":
        value = base.reshape(4, 3).t()
    elif layout == "column":
        value = base[:3].reshape(3, 1)
    elif layout == "scalar":
        value = base[7]
    else:
        value = base[::3]  # four items, stride 3
    value = value.to(dtype)
    grad = dtype.is_floating_point and draw(st.booleans())
    return value.detach().requires_grad_(grad)


# --- how the value is used -------------------------------------------------------------


def encode(value: Any) -> float:
    """A number that differs for the structures the fuzzer compares (traced in Python)."""
    if value is None:
        return 0.5
    if type(value) is bool:
        return 3.0 if value else -3.0
    if type(value) is int:
        return float(value % 1009) + 7.0
    if type(value) is float:
        return value
    if type(value) is str:
        return float(len(value)) + (0.25 if value.startswith("a") else 0.0)
    if type(value) is dict:
        total = 17.0
        for key, item in value.items():
            total = total + len(key) * encode(item)
        return total
    total = 11.0 if type(value) is tuple else 13.0
    for position, item in enumerate(value):
        total = total + (position + 2) * encode(item)
    return total


def use_scale(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x * s


def use_divide(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x / s


def use_full_like(x: torch.Tensor, s: Any) -> torch.Tensor:
    return torch.full_like(x, s) + x


def use_where(x: torch.Tensor, s: Any) -> torch.Tensor:
    return torch.where(x > s, x, -x)


def use_branch(x: torch.Tensor, s: Any) -> torch.Tensor:
    if s > 0:
        return x + 1
    if s < 0:
        return x - 1
    if s == 0:
        return x * math.copysign(2.0, s)
    return x * 3  # NaN


def use_copysign(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x * math.copysign(1.0, s)  # folded in Python: the sign of zeros and NaNs


def use_index(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x[s] * 2


def use_dim(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x.sum(s)


def use_dtype(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x.to(s) + torch.ones(2, 1, 1, dtype=s)


def use_tensor(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x + s


def use_structure(x: torch.Tensor, s: Any) -> torch.Tensor:
    return x * encode(s)


USES: dict[str, tuple[Callable[[torch.Tensor, Any], torch.Tensor], st.SearchStrategy[Any]]] = {
    "scale": (use_scale, numbers),
    "divide": (use_divide, numbers),
    "full_like": (use_full_like, float32_numbers),
    "where": (use_where, numbers),
    "branch": (use_branch, numbers),
    "copysign": (use_copysign, numbers),
    "index": (use_index, indices),
    "dim": (use_dim, dims),
    "dtype": (use_dtype, dtypes),
    "tensor": (use_tensor, tensors()),
    "structure": (use_structure, structures),
}


# --- what runs before the value is read ---------------------------------------------------


def before_nothing(x: torch.Tensor) -> torch.Tensor:
    return x + 0.5


def before_item_loop(x: torch.Tensor) -> torch.Tensor:
    y = x + 0.5
    for _ in range(int(x.abs().sum().item()) % 3 + 1):  # .item() breaks the graph
        y = y * 1.5
    return y


def before_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 0.5
    graph_break()
    return y * 1.5


BEFORE = {"nothing": before_nothing, "item_loop": before_item_loop, "graph_break": before_break}

Before = Callable[[torch.Tensor], torch.Tensor]
Use = Callable[[torch.Tensor, Any], torch.Tensor]


# --- where the value comes from ----------------------------------------------------------
# A source builds (eager callable, compiled callable, set_value): set_value(v) stores v
# where the function reads it and returns the arguments and keywords of the next call
# after ``x``.


class _Holder(torch.nn.Module):
    def __init__(self, before: Before, use: Use) -> None:
        super().__init__()
        self.before, self.use = before, use
        self.s: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.before(x)
        return self.use(y, self.s)


def source_argument(before: Before, use: Use) -> tuple[Any, Any, Any]:
    def fn(x: torch.Tensor, s: Any) -> torch.Tensor:
        y = before(x)
        return use(y, s)

    return fn, rt.compile(fn), lambda value: ((value,), {})


def source_keyword(before: Before, use: Use) -> tuple[Any, Any, Any]:
    def fn(x: torch.Tensor, *, s: Any = None) -> torch.Tensor:
        y = before(x)
        return use(y, s)

    return fn, rt.compile(fn), lambda value: ((), {"s": value})


def source_default(before: Before, use: Use) -> tuple[Any, Any, Any]:
    def fn(x: torch.Tensor, s: Any = None) -> torch.Tensor:
        y = before(x)
        return use(y, s)

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        fn.__defaults__ = (value,)
        return (), {}

    return fn, rt.compile(fn), set_value


def source_global(before: Before, use: Use) -> tuple[Any, Any, Any]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = before(x)
        return use(y, FUZZ_VALUE)

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        global FUZZ_VALUE
        FUZZ_VALUE = value
        return (), {}

    return fn, rt.compile(fn), set_value


def source_closure(before: Before, use: Use) -> tuple[Any, Any, Any]:
    s: Any = None

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = before(x)
        return use(y, s)

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        nonlocal s
        s = value
        return (), {}

    return fn, rt.compile(fn), set_value


def source_module(before: Before, use: Use) -> tuple[Any, Any, Any]:
    module = _Holder(before, use)

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        module.s = value
        return (), {}

    return module, rt.compile(module), set_value


def source_object(before: Before, use: Use) -> tuple[Any, Any, Any]:
    holder = types.SimpleNamespace(s=None)

    def fn(x: torch.Tensor, obj: Any) -> torch.Tensor:
        y = before(x)
        return use(y, obj.s)

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        holder.s = value
        return (holder,), {}

    return fn, rt.compile(fn), set_value


def source_keyword_default(before: Before, use: Use) -> tuple[Any, Any, Any]:
    def fn(x: torch.Tensor, *, s: Any = None) -> torch.Tensor:
        y = before(x)
        return use(y, s)

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        assert fn.__kwdefaults__ is not None
        fn.__kwdefaults__["s"] = value  # the same dict, changed in place
        return (), {}

    return fn, rt.compile(fn), set_value


def source_callee_default(before: Before, use: Use) -> tuple[Any, Any, Any]:
    def helper(y: torch.Tensor, s: Any = None) -> torch.Tensor:
        return use(y, s)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = before(x)
        return helper(y)  # inlined, binding its default

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        helper.__defaults__ = (value,)
        return (), {}

    return fn, rt.compile(fn), set_value


def source_list_item(before: Before, use: Use) -> tuple[Any, Any, Any]:
    items: list[Any] = [None, "unused"]

    def fn(x: torch.Tensor, values: list[Any]) -> torch.Tensor:
        y = before(x)
        return use(y, values[0])

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        items[0] = value  # the same list, changed in place
        return (items,), {}

    return fn, rt.compile(fn), set_value


def source_dict_item(before: Before, use: Use) -> tuple[Any, Any, Any]:
    table: dict[str, Any] = {"s": None, "other": 1.0}

    def fn(x: torch.Tensor, values: dict[str, Any]) -> torch.Tensor:
        y = before(x)
        return use(y, values["s"])

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        table["s"] = value  # the same dict, changed in place
        return (table,), {}

    return fn, rt.compile(fn), set_value


def source_method_default(before: Before, use: Use) -> tuple[Any, Any, Any]:
    class Scaler(torch.nn.Module):
        def apply_value(self, y: torch.Tensor, s: Any = None) -> torch.Tensor:
            return use(y, s)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = before(x)
            return self.apply_value(y)  # a method, binding its default

    module = Scaler()

    def set_value(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        Scaler.apply_value.__defaults__ = (value,)
        return (), {}

    return module, rt.compile(module), set_value


SOURCES = {
    "method_default": source_method_default,
    "list_item": source_list_item,
    "dict_item": source_dict_item,
    "argument": source_argument,
    "keyword": source_keyword,
    "default": source_default,
    "keyword_default": source_keyword_default,
    "callee_default": source_callee_default,
    "global": source_global,
    "closure": source_closure,
    "module": source_module,
    "object": source_object,
}


# --- comparing -----------------------------------------------------------------------


def fresh_input() -> torch.Tensor:
    """The same (3, 4) input for every call: no zeros, both signs."""
    return torch.arange(12, dtype=torch.float32).sub(5.5).reshape(3, 4)


def assert_same(actual: Any, expected: Any, context: str) -> None:
    """``actual`` is ``expected`` exactly: values (NaN == NaN), signs of zeros, dtypes,
    shapes and requires_grad."""
    assert type(actual) is type(expected), context
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, context
        return
    assert actual.dtype == expected.dtype, context
    assert actual.shape == expected.shape, context
    assert actual.requires_grad == expected.requires_grad, context
    actual, expected = actual.detach(), expected.detach()
    torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{context}\n{m}")
    if expected.dtype.is_floating_point:
        # The sign of a NaN computed by a kernel (``x / -nan``) is left out: IEEE 754
        # does not specify it and the compiled kernels do not reproduce eager's.
        not_nan = ~torch.isnan(expected)
        assert torch.equal(torch.signbit(actual[not_nan]), torch.signbit(expected[not_nan])), (
            context
        )


def run_sequence(source: str, before: str, use: str, values: list[Any]) -> None:
    """Call the compiled function and eager for each value in turn; compare each result."""
    rt.reset()
    eager, compiled, set_value = SOURCES[source](BEFORE[before], USES[use][0])
    for step, value in enumerate(values):
        context = f"{source}/{before}/{use}: call {step} with {value!r} (sequence {values!r})"
        args, kwargs = set_value(value)
        try:
            expected = eager(fresh_input(), *args, **kwargs)
        except Exception as error:  # noqa: BLE001 - eager refused the value: so must compiled
            with pytest.raises(type(error)):
                compiled(fresh_input(), *args, **kwargs)
            continue
        actual = compiled(fresh_input(), *args, **kwargs)
        assert_same(actual, expected, context)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, str, str, list[Any]]:
    use = draw(st.sampled_from(sorted(USES)))
    values = draw(st.lists(USES[use][1], min_size=2, max_size=5))
    if draw(st.booleans()):  # come back to the first value: a cache entry is reused
        values.append(values[0])
    return (
        draw(st.sampled_from(sorted(SOURCES))),
        draw(st.sampled_from(sorted(BEFORE))),
        use,
        values,
    )


@pytest.mark.filterwarnings("ignore::torchstrata.runtime.TorchstrataFallbackWarning")
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_compiled_calls_agree_with_eager_across_changing_values(
    scenario: tuple[str, str, str, list[Any]],
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        run_sequence(*scenario)


# --- every source and break, with values only exact guards tell apart ------------------

HARD_SEQUENCES = {
    "scale": [0.0, -0.0, math.nan, 1, True, 1.0, 0.0],
    "copysign": [math.nan, -math.nan, 0.0, -0.0, math.nan],
    "index": [1, True, [0, 1], (0, 1), None, 1],
    "structure": [(0.0, 1), (-0.0, 1), [0.0, 1], (0.0, True), {"a": 1}, {"a": True}],
}


@pytest.mark.filterwarnings("ignore::torchstrata.runtime.TorchstrataFallbackWarning")
@pytest.mark.parametrize("use", sorted(HARD_SEQUENCES))
@pytest.mark.parametrize("before", sorted(BEFORE))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_source_tells_apart_values_equal_under_eq(source: str, before: str, use: str):
    run_sequence(source, before, use, HARD_SEQUENCES[use])


# --- regressions the fuzzer found ---------------------------------------------------------


def test_rewritten_default_argument_is_not_stale():
    """The cached ``inspect.signature`` kept the defaults of the first call: after
    ``fn.__defaults__`` was rewritten the guards and the capture still bound the old
    value, and the graph traced for it ran (``x * 1.0`` for ``s=2.0``)."""

    def scale(x: torch.Tensor, s: float = 1.0) -> torch.Tensor:
        return x * s

    compiled = rt.compile(scale)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(x), x)
    scale.__defaults__ = (2.0,)
    torch.testing.assert_close(compiled(x), x * 2)
    scale.__defaults__ = (-0.0,)
    assert torch.signbit(compiled(x)).all()


def test_keyword_only_default_changed_in_place_is_not_stale():
    def scale(x: torch.Tensor, *, s: float = 1.0) -> torch.Tensor:
        y = x + 1
        graph_break()  # the default is first read after the break
        return y * s

    compiled = rt.compile(scale)
    x = torch.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        torch.testing.assert_close(compiled(x), x * 2)
        assert scale.__kwdefaults__ is not None
        scale.__kwdefaults__["s"] = 3.0
        torch.testing.assert_close(compiled(x), x * 6)


def test_rewritten_default_of_an_inlined_function_is_guarded():
    """The defaults an inlined call binds were read without a guard: a graph traced
    with ``helper``'s default ``1.0`` kept running after it became ``2.0``."""

    def helper(y: torch.Tensor, s: float = 1.0) -> torch.Tensor:
        return y * s

    def fn(x: torch.Tensor) -> torch.Tensor:
        return helper(x + 1) + helper(x, 5.0)  # the second call passes its own value

    compiled = rt.compile(fn)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(x), fn(x))
    helper.__defaults__ = (2.0,)
    torch.testing.assert_close(compiled(x), fn(x))
    helper.__defaults__ = (-0.0,)
    torch.testing.assert_close(compiled(x), fn(x))
    assert torch.equal(torch.signbit(compiled(x) - 5.0), torch.signbit(fn(x) - 5.0))


def test_nan_of_either_sign_is_guarded_apart():
    """The guard on a NaN constant took any NaN: a graph that folded
    ``math.copysign(1.0, s)`` to ``1.0`` for NaN kept running for ``-nan``."""

    def flip(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * math.copysign(1.0, s)

    compiled = rt.compile(flip)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(x, math.nan), x)
    torch.testing.assert_close(compiled(x, -math.nan), -x)


def test_replaced_or_shadowed_method_is_guarded():
    """A method read from an object (``self.helper``) was inlined without a guard on
    it: after the class's method was replaced, or shadowed by an instance attribute,
    the graph traced for the old one kept running."""

    class Model(torch.nn.Module):
        def helper(self, y: torch.Tensor) -> torch.Tensor:
            return y * 2

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.helper(x + 1)

    model = Model()
    compiled = rt.compile(model)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(x), model(x))
    Model.helper = lambda self, y: y * 10  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), model(x))
    model.helper = lambda y: y * 100  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), model(x))


def test_replaced_or_shadowed_submodule_forward_is_guarded():
    """A submodule's call inlined ``type(child).forward`` unguarded: after the class's
    ``forward`` was replaced, or one set on the instance, the old graph kept running."""

    class Child(torch.nn.Module):
        def forward(self, y: torch.Tensor) -> torch.Tensor:
            return y * 2

    class Parent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.child = Child()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.child(x + 1)

    model = Parent()
    compiled = rt.compile(model)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(x), model(x))
    Child.forward = lambda self, y: y * 10  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        model.child.forward = lambda y: y * 100  # type: ignore[method-assign]
        torch.testing.assert_close(compiled(x), model(x))


def test_hook_registered_on_a_submodule_later_is_guarded():
    """Hooks are refused at capture time, but one registered after the capture was not
    guarded: the graph traced without it kept running and the hook never ran."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    compiled = rt.compile(model)
    x = torch.randn(2, 3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        torch.testing.assert_close(compiled(x), model(x))
        handle = model[1].register_forward_hook(lambda module, inputs, output: output + 10)
        torch.testing.assert_close(compiled(x), model(x))
        handle.remove()
        torch.testing.assert_close(compiled(x), model(x))


def test_global_module_hook_registered_later_is_guarded():
    """Likewise a global hook (``register_module_forward_hook``): eager ran it on every
    submodule, the reused graph on none of them."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    compiled = rt.compile(model)
    x = torch.randn(2, 3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        torch.testing.assert_close(compiled(x), model(x))
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda module, inputs, output: output + 10
        )
        try:
            torch.testing.assert_close(compiled(x), model(x))
        finally:
            handle.remove()
        torch.testing.assert_close(compiled(x), model(x))
