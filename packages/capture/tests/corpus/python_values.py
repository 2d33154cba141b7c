# ruff: noqa: UP003, UP031, UP032 - the corpus exercises these forms on purpose
"""Python values around tensors: strings, slices, builtins over constants, operator and
math helpers, map/filter, nested containers, namedtuples, globals and class attributes."""

import collections
import math
import operator
from typing import NamedTuple

import torch
from _registry import registry

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def with_dict(n):
    return ({"a": torch.randn(n, 8), "b": torch.randn(n, 8), "scale": 0.5},)


def with_tuple(n):
    return ((torch.randn(n, 8), torch.randn(n, 8)), [1.0, 2.0])


def with_string(n):
    return (torch.randn(n, 8), "relu" if n == 4 else "tanh")


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


class Settings:
    factor = 3
    names = ("a", "b")


ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}
DIMS = [0, 1]


@case(one)
def string_methods(x):
    name = "Layer_Norm"
    parts = name.lower().split("_")
    return x * len(parts), "-".join(parts), name.startswith("Layer"), name.replace("_", "")


@case(one)
def slice_objects(x):
    s = slice(1, 3)
    return x[s], x[:, slice(None, None, 2)], s.start + s.stop


@case(one)
def enumerate_with_start(x):
    out = x
    for i, d in enumerate(DIMS, start=1):
        out = out + out.sum(d, keepdim=True) * i
    return out


@case(one)
def any_all_divmod(x):
    q, r = divmod(17, 5)
    return x * q + r, any([0, 1]), all([1, 1])


@case(one)
def min_max_abs_pow(x):
    return x * min(2, 3) - max([1.5, 0.5]), pow(2, 3), abs(-3.5)


@case(one)
def operator_helpers(x):
    get = operator.itemgetter(1)
    return operator.truediv(x, 2), get((1, 2, 3)), operator.getitem([x, -x], 1)


@case(one)
def math_helpers(x):
    return x * math.prod([1, 2, 3]) + math.log2(8), math.isclose(0.1 + 0.2, 0.3), math.ceil(1.2)


@case(one)
def map_and_filter(x):
    sizes = list(map(lambda d: d * 2, [1, 2, 3]))
    evens = list(filter(lambda d: d % 2 == 0, range(6)))
    return x * sum(sizes), evens


@case(one)
def sorted_with_key(x):
    items = sorted([(2, "b"), (1, "a")], key=lambda p: p[0])
    return x * items[0][0], items


@case(with_dict)
def dict_argument(batch):
    return batch["a"] * batch["scale"] + batch["b"], sorted(batch)


@case(with_tuple)
def tuple_and_list_arguments(pair, weights):
    a, b = pair
    return a * weights[0] + b * weights[1], len(weights)


@case(with_string)
def string_argument_selects_function(x, name):
    return ACTIVATIONS[name](x), name


@case(one)
def namedtuple_creation(x):
    pair = Pair(x, x * 2)
    return pair.left + pair.right, pair[0] - pair[1]


@case(one)
def class_attributes(x):
    return x * Settings.factor, Settings.names


@case(one)
def type_checks(x):
    return x * (type(x) is torch.Tensor), type(3) is int, isinstance(x, (list, torch.Tensor))


@case(one)
def nested_containers(x):
    data = {"layers": [{"w": x, "b": 1.0}, {"w": x * 2, "b": 2.0}]}
    total = 0
    for layer in data["layers"]:
        total = total + layer["w"] * layer["b"]
    return total, data["layers"][1]["b"]


@case(one)
def tensor_size_objects(x):
    shape = x.shape
    new = torch.Size([shape[0], 2, 4])
    return x.view(new), shape.numel(), list(shape), shape == new


@case(one)
def finfo_iinfo(x):
    return x.clamp(min=torch.finfo(x.dtype).min), torch.iinfo(torch.int32).max


@case(one)
def zip_three_and_unpack(x):
    total = 0
    for a, b, c in zip([1, 2], [3, 4], [x, -x]):
        total = total + a * b * c
    return total


@case(one)
def string_formatting(x):
    text = "%d-%s" % (x.shape[0], "n")
    return x, text, "{}:{}".format(1, 2), repr(3.5)


@case(one)
def chained_methods_on_lists(x):
    items = [3, 1, 2]
    items.sort()
    return x * items.index(3), items.count(1), items[::-1]


@case(one)
def ordered_dict_built(x):
    state = collections.OrderedDict()
    state["h"] = x.relu()
    state["g"] = x.sigmoid()
    state.update(out=state["h"] * state["g"])
    return state, list(state.keys()), type(state) is collections.OrderedDict


def with_ordered_dict(n):
    return (torch.randn(n, 8), collections.OrderedDict(w=torch.randn(8), b=torch.randn(8)))


@case(with_ordered_dict)
def ordered_dict_argument_updated(x, params):
    y = x * params["w"] + params["b"]
    params["last"] = y.detach()
    return y, isinstance(params, collections.OrderedDict)


@case(one)
def counter_of_constants(x):
    counts = collections.Counter(["a", "b", "a"])
    return x * counts["a"], counts.most_common()


def with_lru(n):
    cache = collections.OrderedDict((f"k{i}", torch.randn(8)) for i in range(3))
    return (torch.randn(n, 8), cache)


@case(with_lru)
def lru_cache_in_ordered_dict(x, cache):
    hit = cache["k0"]
    cache.move_to_end("k0")  # most recently used last
    cache["new"] = x.mean(0)
    while len(cache) > 3:
        cache.popitem(last=False)  # evict the least recently used
    cache.move_to_end("new", last=False)
    return x + hit, list(cache)
