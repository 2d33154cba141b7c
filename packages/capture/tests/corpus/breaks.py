"""Graph breaks: constructs capture does not trace. The function is split there; results,
printed text and mutations must be those of eager, in the same order.

The programs marked ``PRINTS`` broke at ``print`` until capture learned to log it with
the other side effects and print after the graph (decision 0066): they now check that the
text comes out as eager prints it, in order with the rest, with no break."""

import collections
import copy
import itertools

import torch
from torch import nn

try:  # numpy is optional for torch; its programs are left out without it
    import numpy as np
except ImportError:
    np = None

PROGRAMS: list = []

#: The expectation of a program whose only former break was a ``print``.
PRINTS = "clean"


def case(make, expect="break"):
    def register(fn):
        if expect != "skip":
            PROGRAMS.append((getattr(fn, "__name__", type(fn).__name__), fn, make, expect))
        return fn

    return register


def one(n):
    return (torch.randn(n, 8),)


def with_list(n):
    return (torch.randn(n, 8), [1, 2])


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x)


class Printing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        print("printing", tuple(y.shape))
        return y.relu()


torch.manual_seed(1)
COUNTER_TEMPLATE = Counter()
PRINTING_TEMPLATE = Printing()


def with_module(n):
    return (copy.deepcopy(COUNTER_TEMPLATE), torch.randn(n, 8))


def with_printing(n):
    return (copy.deepcopy(PRINTING_TEMPLATE), torch.randn(n, 8))


LOG: list = []
STATE = {"calls": 0}


def helper_that_prints(x):
    y = x * 2
    print("helper", y.shape[0])
    return y + 1


def generator(x):
    for i in range(3):
        yield x * i


@case(one, expect=PRINTS)
def print_between_ops(x):
    y = x + 1
    print("y computed")
    return y * 2


@case(one, expect=PRINTS)
def print_tensor_value(x):
    y = x.sum(0).round(decimals=1)
    print(y.abs().sum() > -1)
    return y


@case(one, expect=PRINTS)
def two_prints(x):
    print("a")
    print("b", x.shape)
    return x


@case(one)
def item_then_compute(x):
    s = x.abs().max().item()
    return x / (s + 1)


@case(one)
def tolist_values(x):
    values = x[0, :3].tolist()
    return x * len(values), [round(v, 3) for v in values]


@case(one, expect="break" if np is not None else "skip")
def numpy_roundtrip(x):
    a = x.numpy()
    return torch.from_numpy(np.tanh(a)) + x


@case(one)
def branch_on_tensor_value(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


@case(one)
def branch_both_sides_reconverge(x):
    y = x * 3
    if y.mean() > 0:
        y = y + 1
    else:
        y = y - 1
    return y.relu()


@case(one)
def while_on_tensor_condition(x):
    steps = 0
    while x.abs().max() > 0.1 and steps < 20:
        x = x * 0.5
        steps += 1
    return x, steps


@case(one)
def int_of_tensor(x):
    k = int(x.argmax(-1)[0])
    return x[:, : k + 1].sum(-1)


@case(one)
def float_of_tensor(x):
    return x * float(x.mean())


@case(one)
def bool_of_tensor_in_and(x):
    flag = bool((x > 0).any()) and x.shape[0] > 1
    return x * flag


@case(one)
def fstring_of_tensor(x):
    text = f"{x.sum():.0f}"
    return x + 1, len(text) > 0


@case(one)
def assert_on_values(x):
    assert (x.abs() >= 0).all(), "non-negative"
    return x.abs()


@case(one, expect=PRINTS)
def break_inside_helper(x):
    return helper_that_prints(x) * 3


@case(one, expect=PRINTS)
def break_inside_loop(x):
    for i in range(3):
        x = x + i
        print("step", i)
    return x


@case(one)
def item_inside_loop(x):
    total = 0.0
    for row in x.unbind(0)[:3]:
        total += row.sum().item()
    return x * 0 + total


@case(one, expect="any")  # inlined: the generator runs to completion at capture time
def generator_function_call(x):
    return sum(generator(x))


@case(one, expect=PRINTS)
def generator_loop_with_print(x):
    out = x
    for value in generator(x):
        print("gen")
        out = out + value
    return out


@case(with_printing, expect=PRINTS)
def printing_submodule(module, x):
    return module(x) * 2


@case(one, expect="clean")  # a Python attribute of a tensor the graph makes
def set_attribute_on_tensor(x):
    y = x * 2
    y.tag = "hello"
    return y + 1, y.tag


@case(one, expect="clean")  # ``it.__next__()`` is ``next(it)``
def unsupported_c_function(x):
    return x + itertools.accumulate([1, 2, 3]).__next__()


@case(one, expect="clean")  # a Counter of constants is counted at capture time
def collections_counter(x):
    counts = collections.Counter("abca")
    return x * counts["a"]


@case(one, expect="clean")  # a deque made in the trace, like a list
def deque_usage(x):
    queue = collections.deque([x, x * 2])
    queue.rotate(1)
    return queue[0] + queue[1]


@case(one)
def random_module_state(x):
    g = torch.Generator().manual_seed(0)
    return x + torch.rand(8, generator=g)


@case(one)
def multiple_breaks_and_values(x):
    a = (x * 2).sum().item()
    print("a")
    b = (x * 3).sum().item()
    return x * a + b


@case(one)
def break_then_branch_on_python(x):
    n = x.shape[0]
    v = x.max().item()
    if v > 100:
        return x * 0
    return x * n


@case(one)
def data_dependent_loop_count(x):
    count = int((x > 0).sum())
    for _ in range(min(count, 4)):
        x = x + 1
    return x


@case(one)
def nonzero_and_loop(x):
    idx = (x[:, 0] > 0).nonzero()
    return x.sum() + idx.numel()


@case(one, expect=PRINTS)
def print_in_comprehension(x):
    return [print(i) or x * i for i in range(2)]


@case(one, expect=PRINTS)
def print_in_dict_comprehension(x):
    return {i: print(i) or x * i for i in range(2)}


@case(one, expect=PRINTS)
def print_in_list_display(x):
    # the list is on the value stack at the break; LIST_APPEND adds to it after resuming
    return [x * 1, *[x + 1], print("last") or x * 2]


@case(one, expect=PRINTS)
def print_in_dict_merge(x):
    return {"a": x * 1, **{"b": print("merge") or x * 2}}


@case(one, expect=PRINTS)
def closure_mutated_by_break(x):
    seen = []

    def record(v):
        seen.append(v.shape[0])
        print("record")
        return v

    y = record(x * 2)
    return y, len(seen)


@case(one, expect=PRINTS)
def lambda_with_print(x):
    f = lambda t: print("lam") or t + 1  # noqa: E731
    return f(x) * 2


@case(one, expect=PRINTS)
def nested_function_then_break(x):
    k = 3

    def scale(t):
        return t * k

    print("before")
    return scale(x)


@case(one, expect=PRINTS)
def iterator_state_across_break(x):
    it = iter([x, x + 1, x + 2])
    first = next(it)
    print("mid")
    rest = list(it)
    return first, rest


@case(one, expect=PRINTS)
def dict_state_across_break(x):
    d = {"a": x, "b": x * 2}
    print(sorted(d))
    d["c"] = d["a"] + d["b"]
    return d


@case(one, expect=PRINTS)
def kwargs_call_at_break(x):
    print("sep", "x", sep="-", end="!\n")
    return x


@case(one, expect=PRINTS)
def star_call_at_break(x):
    args = ("a", "b")
    print(*args)
    return x + 1


@case(one, expect=PRINTS)
def return_value_from_break(x):
    return print("done") or x


@case(one)
def break_in_tensor_method_chain(x):
    return torch.tensor(x.sum(0).tolist()) * 2


@case(one, expect=PRINTS)
def inplace_update_after_break(x):
    y = x.clone()
    print("clone")
    y.add_(1)
    return y


@case(one, expect="any" if np is not None else "skip")
def isinstance_of_numpy(x):
    a = np.ones(3)
    return x * float(a.sum()), isinstance(a, np.ndarray)


@case(lambda n: (torch.randn(n, 8, requires_grad=True),), expect=PRINTS)
def print_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("grad enabled:", torch.is_grad_enabled())
        z = y + 1
    print("grad enabled:", torch.is_grad_enabled())
    return z


@case(one)
def raise_and_catch(x):
    try:
        if x.sum() > 1e9:
            x = x * 0
        raise ValueError("boom")
    except ValueError as error:
        message = str(error)
        y = x + 1
    return y, message


@case(one)
def exception_from_unsupported_call(x):
    try:
        value = int(x.sum()) + int("not a number")
    except ValueError:
        value = -1
    return x * value


@case(one)
def try_finally_with_break(x):
    try:
        v = x.abs().sum().item()
    finally:
        print("finally")
    return x / (v + 1)


@case(one, expect=PRINTS)
def break_inside_loop_inside_try(x):
    try:
        for i in range(3):
            print("iteration", i)
            x = x + i
    except RuntimeError:
        x = x * 0
    return x


@case(lambda n: (torch.randn(n, 8, requires_grad=True),), expect=PRINTS)
def nested_with_and_print(x):
    with torch.no_grad():
        with torch.enable_grad():
            print("inner")
            y = x * 2
        z = y + 1
    return z
