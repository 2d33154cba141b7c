"""Control flow on Python values: loops, while, early returns, branches on shapes and
constants, try/except that does not raise, ``with`` grad mode and autocast."""

import contextlib

import torch
import torch.nn.functional as F
from _registry import registry

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def grad(n):
    return (torch.randn(n, 8, requires_grad=True),)


def with_int(n):
    return (torch.randn(n, 8), n % 3 + 1)


def with_flag(n):
    return (torch.randn(n, 8), n > 4)


DEBUG = False
WEIGHT = torch.randn(8, 8)


@case(one)
def for_range(x):
    for i in range(4):
        x = x * 0.5 + i
    return x


@case(with_int)
def loop_over_argument_int(x, steps):
    for _ in range(steps):
        x = torch.tanh(x)
    return x, steps


@case(one)
def while_loop(x):
    i = 0
    while i < 3:
        x = x + i
        i += 1
    return x


@case(one)
def loop_with_break_continue(x):
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        x = x * i
    return x


@case(one)
def nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


@case(one)
def for_else(x):
    for i in range(3):
        if i == 5:
            break
    else:
        x = x * 2
    return x


@case(with_flag)
def branch_on_bool_argument(x, flag):
    if flag:
        return x.relu()
    return x.sigmoid()


@case(one)
def branch_on_shape(x):
    if x.shape[0] > 4:
        y = x.sum(0)
    else:
        y = x.mean(0)
    return y


@case(one)
def branch_on_dtype(x):
    if x.dtype == torch.float32:
        x = x.double()
    return x * 2


@case(one)
def branch_on_global_flag(x):
    if DEBUG:
        x = x * 100
    return x + 1


@case(one)
def early_return_in_loop(x):
    for i in range(5):
        x = x + 1
        if i == 2:
            return x
    return -x


@case(one)
def try_except_no_raise(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    return y + 1


@case(one)
def try_finally(x):
    try:
        y = x + 1
    finally:
        z = 3
    return y * z


@case(one)
def try_except_else(x):
    try:
        y = x.exp()
    except RuntimeError:
        y = None
    else:
        y = y + 1
    return y


@case(one)
def assert_on_shape(x):
    assert x.ndim == 2, "expects a matrix"
    return x.T


@case(grad)
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    return x * 3 + y, y.requires_grad


@case(grad)
def no_grad_then_enable(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x + 2
    return a, b


@case(one)
def autocast_block(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, WEIGHT)
        z = y + 1
    return y, z.float()


@case(one)
def autocast_disabled(x):
    with torch.autocast("cpu", enabled=False):
        y = x @ WEIGHT
    return y


@case(one)
def nullcontext_block(x):
    with contextlib.nullcontext():
        y = x - 1
    return y


@case(one)
def grad_mode_query(x):
    if torch.is_grad_enabled():
        return x * 2
    return x


@case(one)
def accumulate_in_list(x):
    outs = []
    for i in range(3):
        outs.append(x[:, i])
    return torch.stack(outs, -1)


@case(one)
def accumulate_in_dict(x):
    stats = {}
    for name, fn in (("max", torch.amax), ("min", torch.amin)):
        stats[name] = fn(x, dim=0)
    return stats


@case(one)
def loop_over_tuple_of_functions(x):
    for fn in (torch.sin, torch.cos, F.relu):
        x = fn(x)
    return x


@case(one)
def reversed_and_sorted(x):
    cols = []
    for i in reversed(range(3)):
        cols.append(x[:, i])
    order = sorted([3, 1, 2], reverse=True)
    return cols, order


@case(one)
def chained_comparisons(x):
    n = x.shape[0]
    return x * (0 < n <= 10), 1 < n < 2


@case(one)
def none_checks(x, bias=None):
    if bias is not None:
        x = x + bias
    return x if bias is None else -x


@case(one)
def default_argument_tensor_none(x, scale=None):
    scale = 2.0 if scale is None else scale
    return x * scale


@case(one)
def walrus_and_ternary(x):
    if (n := x.shape[0]) > 2:
        x = x[: n - 1]
    return x
