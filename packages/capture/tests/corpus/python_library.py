# ruff: noqa: UP031 - the corpus exercises this form on purpose
"""The Python model libraries are written in: functools, itertools, operator, dataclass
outputs with tensor fields, enums, helper objects and user context managers, classes
defined in a function, exceptions raised and caught, torch's own context managers,
``has_torch_function`` checks, profiler ranges, forward hooks."""

import collections
import contextlib
import copy
import dataclasses
import enum
import functools
import itertools
import operator
from collections import namedtuple

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def needs_grad(n):
    return (torch.randn(n, 8, requires_grad=True),)


torch.manual_seed(7)


class Activation(enum.Enum):
    RELU = "relu"
    GELU = "gelu"


@dataclasses.dataclass
class BlockOutput:
    hidden: torch.Tensor
    attention: torch.Tensor = None
    layer: int = 0

    @property
    def norm(self):
        return self.hidden.norm(dim=-1)

    def scaled(self, k):
        return self.hidden * k


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: torch.Tensor
    weight: float = 1.0


Cache = namedtuple("Cache", ["keys", "values", "length"])


class Timer:
    """A user context manager, as profiling or tracing utilities write them."""

    def __init__(self, name):
        self.name = name
        self.depth = 0

    def __enter__(self):
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        return False


class Accumulator:
    def __init__(self, start):
        self.total = start
        self.count = 0

    def add(self, value):
        self.total = self.total + value
        self.count += 1
        return self


@functools.cache
def head_dims(width, heads):
    return width // heads, tuple(range(heads))


def with_suffix(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs) + 1

    return wrapper


@with_suffix
def decorated(x):
    return x * 2


def checked(x, limit):
    if limit < 0:
        raise ValueError(f"limit must be non-negative, got {limit}")
    return x.clamp(max=limit)


class Config:
    hidden = 8


@contextlib.contextmanager
def maybe_autocast(enabled):
    if enabled:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    else:
        yield


@contextlib.contextmanager
def traced_region(name):
    try:
        yield len(name)
    finally:
        EVENTS.append(name)


EVENTS: list = []


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


SCALE = Scaler(0.5)


class Scaled:
    """A descriptor of user code: reads ``_<name>`` of the object, scaled."""

    def __init__(self, factor):
        self.factor = factor

    def __set_name__(self, owner, name):
        self.private = "_" + name

    def __get__(self, obj, cls):
        if obj is None:
            return self
        return getattr(obj, self.private) * self.factor


class Holder:
    doubled = Scaled(2)

    def __init__(self, value):
        self._doubled = value


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x, scale=1.0):
        return self.fc2(F.gelu(self.fc1(x))) * scale


def _scale_output(module, args, output):
    return output * 0.5


def _shift_input(module, args):
    return (args[0] + 1,)


def _with_kwargs(module, args, kwargs):
    return args, {**kwargs, "scale": 2.0}


def hooked(kind):
    def make(n):
        torch.manual_seed(11)
        block = Block()
        if kind == "post":
            block.fc1.register_forward_hook(_scale_output)
        elif kind == "pre":
            block.fc2.register_forward_pre_hook(_shift_input)
        else:
            block.register_forward_pre_hook(_with_kwargs, with_kwargs=True)
        return (block, torch.randn(n, 8))

    return make


@case(one)
def reduce_sum_of_layers(x):
    return functools.reduce(operator.add, [x, x * 2, x * 3])


@case(one)
def reduce_with_lambda_and_initial(x):
    return functools.reduce(lambda acc, k: acc * k, [1, 2, 3], x)


@case(one)
def lru_cached_shape_helper(x):
    head, heads = head_dims(x.shape[-1], 2)
    return x.view(x.shape[0], len(heads), head).sum(-1)


@case(one)
def wraps_decorated_function(x):
    return decorated(x)


@case(one)
def partial_of_torch_function(x):
    act = functools.partial(F.leaky_relu, negative_slope=0.2)
    return act(x)


@case(one)
def itertools_chain_and_product(x):
    total = sum(itertools.chain([x], [x * 2]))
    for a, b in itertools.product([1, 2], [3]):
        total = total + a * b
    return total


@case(one)
def itertools_pairwise_accumulate_islice(x):
    widths = list(itertools.accumulate([1, 2, 3]))
    diffs = [b - a for a, b in itertools.pairwise(widths)]
    first = list(itertools.islice([x, x + 1, x + 2], 2))
    return first[1] * diffs[-1]


@case(one)
def itertools_zip_longest_and_starmap(x):
    rows = list(itertools.zip_longest([x, x], [1], fillvalue=2))
    return sum(itertools.starmap(operator.mul, rows))


@case(one)
def operator_helpers(x):
    getter = operator.itemgetter(0, 2)
    pick = operator.methodcaller("relu")
    return pick(x) + sum(getter([x, x * 2, x * 3]))


@case(one)
def string_names_of_constants(x):
    names = ", ".join(f"layer{i}" for i in range(3))
    return x, names, "{}x{}".format(*x.shape), "%s=%d" % ("n", len(names))


@case(one)
def sorted_dict_keys(x):
    weights = {"b": 2.0, "a": 1.0, "c": 3.0}
    return [x * weights[key] for key in sorted(weights)]


@case(one)
def namedtuple_replace_and_asdict(x):
    cache = Cache(x, x * 2, 1)
    cache = cache._replace(length=cache.length + 1)
    return cache.keys + cache.values, cache._asdict()["length"]


@case(one)
def enum_switches_activation(x):
    kind = Activation("gelu")
    if kind is Activation.GELU:
        return F.gelu(x), kind.name
    return F.relu(x), kind.name


@case(one)
def dataclass_output_with_tensors(x):
    out = BlockOutput(hidden=x * 2, layer=1)
    return out.norm, out.scaled(3), out.layer


@case(one)
def dataclass_output_returned(x):
    return BlockOutput(x.relu(), attention=x.softmax(-1), layer=2)


@case(one)
def frozen_dataclass_fields(x):
    frozen = Frozen(x + 1, weight=0.5)
    return frozen.value * frozen.weight


@case(one)
def helper_object_methods(x):
    acc = Accumulator(x)
    acc.add(x).add(x * 2)
    return acc.total / acc.count


@case(one)
def user_context_manager(x):
    with Timer("block") as timer:
        y = x * timer.depth
    return y, timer.depth


@case(one)
def class_defined_inside(x):
    class Scale:
        factor = 3

        def apply(self, t):
            return t * self.factor

    return Scale().apply(x)


@case(one)
def exception_raised_and_caught(x):
    try:
        y = checked(x, -1.0)
    except ValueError as error:
        y = x.abs() + len(error.args)
    return y


@case(one)
def missing_attribute_fallback(x):
    try:
        width = Config.width
    except AttributeError:
        width = Config.hidden
    return x[:, :width]


@case(one)
def missing_key_fallback(x):
    options = {"eps": 1e-5}
    try:
        momentum = options["momentum"]
    except KeyError:
        momentum = 0.1
    return x * momentum + options["eps"]


@case(one)
def try_finally_in_helper(x):
    try:
        y = x * 2
    finally:
        y = y + 1
    return y


@case(needs_grad)
def grad_mode_contexts(x):
    with torch.no_grad():
        frozen = x * 2
    with torch.enable_grad():
        live = x * 3
    with torch.inference_mode():
        scaled = x * 4
    return frozen + live, scaled


@case(one)
def profiler_range_and_nullcontext(x):
    with torch.autograd.profiler.record_function("attention"):
        y = x.softmax(-1)
    with contextlib.nullcontext():
        y = y * 2
    return y


@case(one)
def has_torch_function_checks(x):
    if torch.overrides.has_torch_function_unary(x):
        return x
    return F.threshold(x, 0.1, 20.0) + F.hardtanh(x)


@case(one)
def tensor_dunders_called_directly(x):
    return torch.Tensor.__radd__(x, 1.0) * torch.Tensor.__rsub__(x, 2.0)


@case(hooked("post"))
def forward_hook_scales_output(block, x):
    return block(x)


@case(hooked("pre"))
def forward_pre_hook_shifts_input(block, x):
    return block(x)


@case(hooked("kwargs"))
def forward_pre_hook_with_kwargs(block, x):
    return block(x, scale=1.0)


@case(lambda n: (copy.deepcopy(Block()), torch.randn(n, 8)))
def module_getattr_default(block, x):
    scale = getattr(block, "scale", 0.5)
    return block(x) * scale


@case(one)
def contextmanager_autocast_helper(x):
    with maybe_autocast(x.shape[0] > 0):
        y = x @ x.T
    with maybe_autocast(False):
        z = x @ x.T
    return y.float() + z, y.dtype


@case(one)
def contextmanager_with_finally(x):
    with traced_region("attn") as width:
        y = x * width
    return y


@case(one)
def callable_objects(x):
    return SCALE(x) + Scaler(2.0)(x)


@case(one)
def user_descriptor_on_object(x):
    holder = Holder(x + 1)
    return holder.doubled, holder is None


@case(one)
def optional_dependency_fallback(x):
    try:
        import torchstrata_no_such_kernels  # noqa: F401 - an optional fast path

        fused = True
    except ImportError:
        fused = False
    return F.silu(x) if not fused else x


@case(one)
def deque_rolling_window(x):
    window = collections.deque()
    for step in range(4):
        window.append(x * step)
        if len(window) > 2:
            window.popleft()
    window.appendleft(x)
    window.extendleft([x + 1])
    window.rotate(-1)
    return sum(window), len(window), window[-1], type(window) is collections.deque
