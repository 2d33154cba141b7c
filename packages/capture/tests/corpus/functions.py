# ruff: noqa: B009, RUF007 - the corpus exercises these forms on purpose
"""Inlined Python calls: functions, closures, defaults, keywords, *args/**kwargs,
lambdas, methods, recursion on constants, containers, unpacking, f-strings."""

import dataclasses
import functools

import attrs
import torch
from _registry import registry

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def two(n):
    return (torch.randn(n, 8), torch.randn(n, 8))


def helper(x, scale=2.0, *, shift=0.0):
    return x * scale + shift


def varargs_helper(*args, **kwargs):
    total = args[0]
    for item in args[1:]:
        total = total + item
    for key in sorted(kwargs):
        total = total * kwargs[key]
    return total


def make_scaler(factor):
    def scale(x):
        return x * factor

    return scale


SCALER = make_scaler(3.0)
TENSOR_BIAS = torch.randn(8)


def make_biaser():
    bias = torch.randn(8)

    def add_bias(x):
        return x + bias

    return add_bias


ADD_BIAS = make_biaser()


@dataclasses.dataclass
class Config:
    hidden: int = 8
    scale: float = 0.5
    use_bias: bool = True
    name: str = "cfg"


@attrs.define
class AttrsConfig:
    depth: int = 2
    gain: float = 1.5


CONFIG = Config()
ATTRS_CONFIG = AttrsConfig()


@case(one)
def call_with_defaults(x):
    return helper(x) + helper(x, 3.0) + helper(x, shift=1.0)


@case(two)
def call_with_varargs(x, y):
    return varargs_helper(x, y, x, a=2.0, b=0.5)


@case(two)
def star_call(x, y):
    args = (x, y)
    kwargs = {"a": 3.0}
    return varargs_helper(*args, **kwargs)


@case(one)
def closure_constant(x):
    return SCALER(x)


@case(one)
def closure_tensor(x):
    return ADD_BIAS(x)


@case(one)
def local_closure(x):
    k = 4

    def inner(y):
        return y * k

    return inner(x) + inner(x + 1)


@case(one)
def nonlocal_counter(x):
    count = 0

    def bump(y):
        nonlocal count
        count += 1
        return y + count

    return bump(bump(x)), count


@case(one)
def lambda_map(x):
    f = lambda t: t.sin() * 2  # noqa: E731
    return f(x) + f(-x)


@case(one)
def functools_partial(x):
    f = functools.partial(helper, scale=4.0)
    return f(x)


@case(two)
def keyword_arguments(x, y):
    return torch.add(x, y, alpha=2.0), torch.sum(input=x, dim=0)


def recursive_sum(x, depth):
    if depth == 0:
        return x
    return recursive_sum(x * 0.5, depth - 1) + x


@case(one)
def recursion_on_constants(x):
    return recursive_sum(x, 3)


@case(one)
def dataclass_config(x):
    cfg = CONFIG
    y = x * cfg.scale
    if cfg.use_bias:
        y = y + 1
    return y[:, : cfg.hidden]


@case(one)
def dataclass_created_inside(x):
    cfg = Config(hidden=4, scale=2.0)
    return x[:, : cfg.hidden] * cfg.scale


@case(one)
def attrs_config(x):
    for _ in range(ATTRS_CONFIG.depth):
        x = x * ATTRS_CONFIG.gain
    return x


@case(two)
def tuple_unpacking(x, y):
    a, (b, c) = x, (y, x + y)
    first, *rest = [a, b, c]
    return first + sum(rest)


@case(two)
def list_building(x, y):
    items = []
    items.append(x)
    items.extend([y, x * y])
    items.insert(0, y - x)
    items.reverse()
    return items, len(items)


@case(one)
def dict_building(x):
    d = {"a": x, "b": x * 2}
    d["c"] = d["a"] + d["b"]
    d.update(e=x - 1)
    return {k: v.sum() for k, v in d.items()}, list(d.keys())


@case(one)
def dict_methods(x):
    d = dict(a=x, b=x + 1)
    out = d.get("a") + d.get("z", x)
    popped = d.pop("b")
    return out, popped, d.setdefault("q", 3)


@case(one)
def set_operations(x):
    names = {"a", "b"}
    names.add("c")
    extra = {"c", "d"}
    keys = sorted(names | extra)
    return x * len(keys), keys, "a" in names


@case(one)
def slices_of_lists(x):
    items = [x * i for i in range(6)]
    return items[1:4], items[::2], items[-1]


@case(one)
def fstring_and_strings(x):
    name = f"layer_{x.shape[0]}_{x.dtype}"
    tag = "-".join(["a", "b", str(x.ndim)])
    return x * len(name), name.upper(), tag


@case(one)
def list_comprehension(x):
    return [x * i for i in range(3) if i != 1]


@case(one)
def nested_comprehension(x):
    return sum(x * i * j for i in range(3) for j in range(2))


@case(one)
def dict_and_set_comprehension(x):
    d = {i: x + i for i in range(3)}
    s = {i % 2 for i in range(5)}
    return d, sorted(s)


@case(one)
def generator_expression_sum(x):
    return sum(x.pow(i) for i in range(1, 4))


@case(one)
def zip_enumerate(x):
    cols = x.unbind(1)
    out = x.new_zeros(x.shape[0])
    for i, (a, b) in enumerate(zip(cols, cols[1:])):
        out = out + a * b * i
    return out


@case(one)
def min_max_on_python(x):
    return x[:, : min(3, x.shape[1])] * max(1, 2, 3), abs(-2), round(2.6)


@case(one)
def getattr_hasattr(x):
    scale = getattr(CONFIG, "scale")
    extra = getattr(CONFIG, "missing", 1.0)
    return x * scale * extra, hasattr(CONFIG, "hidden"), hasattr(CONFIG, "nope")


@case(one)
def isinstance_checks(x):
    parts = []
    for item in (x, 2, 3.0, "s", None, (1,)):
        parts.append(isinstance(item, torch.Tensor))
        parts.append(isinstance(item, int | float))
    return x * sum(parts), parts


class Helper:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k

    @staticmethod
    def static(x):
        return x + 1

    @classmethod
    def cls_method(cls, x):
        return x - 1


HELPER = Helper(5.0)


@case(one)
def methods_of_objects(x):
    return HELPER.apply(x) + Helper.static(x) + Helper.cls_method(x)


@case(two)
def conditional_expression(x, y):
    flag = x.shape[0] > 2
    return x if flag else y, (y * 2 if not flag else y / 2)


@case(one)
def early_return(x):
    if x.shape[0] > 3:
        return x * 2
    return x


@case(one)
def boolean_logic(x):
    a = x.shape[0] > 1 and x.shape[1] == 8
    b = x.shape[0] < 0 or x.ndim == 2
    return x * (a + b), not a
