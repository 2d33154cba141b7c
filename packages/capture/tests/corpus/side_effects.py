"""Side effects on Python state, as model and training code makes them: lists of losses,
dicts of outputs, call counters on modules, caches kept as attributes, global logs,
closure counters. Traced without a graph break; replayed after the graph, so arguments
and modules end up as eager leaves them (the corpus test compares them)."""

import copy
import dataclasses

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def with_list(n):
    return (torch.randn(n, 8), [1, 2])


def with_tensor_list(n):
    return (torch.randn(n, 8), [torch.randn(n, 8)])


def with_losses(n):
    return (torch.randn(n, 8), [torch.randn(())])


def with_dict(n):
    return (torch.randn(n, 8), {"steps": 0, "old": torch.zeros(8)})


def with_set(n):
    return (torch.randn(n, 8), {1, 2})


torch.manual_seed(3)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x)


class Recorder(nn.Module):
    """Keeps its activations and statistics, as a probing or debugging wrapper does."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.activations = []
        self.stats = {}

    def forward(self, x):
        y = F.relu(self.fc(x))
        self.activations.append(y.detach())
        self.stats["mean"] = y.mean()
        self.stats["max"] = y.amax()
        return y


class KVCache(nn.Module):
    """A decoder layer that keeps its last keys as an attribute (``self.cache = k``)."""

    def __init__(self):
        super().__init__()
        self.k = nn.Linear(8, 8)
        self.cache = None
        self.steps = 0

    def forward(self, x):
        k = self.k(x)
        if self.cache is not None:
            k = torch.cat([self.cache, k], dim=0)
        self.cache = k
        self.steps = self.steps + 1
        return k.sum(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Counter()
        self.second = Counter()
        self.aux_losses = []

    def forward(self, x):
        y = self.second(self.first(x))
        self.aux_losses.append(y.pow(2).mean())
        return y


@dataclasses.dataclass
class TrainState:
    step: int = 0
    best: float = 1e9


class OneShotCache(nn.Module):
    """Consumes a cache attribute once: ``del self.cache`` after reading it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.cache = torch.ones(8)

    def forward(self, x):
        y = self.fc(x) + self.cache
        del self.cache
        return y, hasattr(self, "cache")


TEMPLATES = {
    "oneshot": OneShotCache(),
    "counter": Counter(),
    "recorder": Recorder(),
    "kv": KVCache(),
    "model": Model(),
}


def module(name):
    def make(n):
        return (copy.deepcopy(TEMPLATES[name]), torch.randn(n, 8))

    return make


LOG: list = []
STATE = {"calls": 0}
SEEN: set = set()
COUNTER = 0


def make_counter():
    count = 0

    def counted(x):
        nonlocal count
        count += 1
        return x * 2, count > 0

    return counted


def record(history, value):
    history.append(value)
    return value


@case(with_list)
def mutate_argument_list(x, items):
    items.append(3)
    return x * len(items)


@case(with_losses)
def append_loss_to_list(x, losses):
    loss = (x * 2).pow(2).mean()
    losses.append(loss)
    return torch.stack(losses).sum()


@case(with_tensor_list)
def extend_insert_pop(x, items):
    items.extend([x + 1, x + 2])
    items.insert(0, x * 3)
    last = items.pop()
    return last * 2, len(items)


@case(with_tensor_list)
def list_slice_and_item_assignment(x, items):
    items[0] = items[0] + x
    items[1:] = [x.relu(), x.tanh()]
    del items[-1]
    return sum(items)


@case(with_dict)
def dict_argument_outputs(x, outputs):
    h = x.softmax(-1)
    outputs["hidden"] = h
    outputs["steps"] = outputs["steps"] + 1
    outputs.update(logits=h.log())
    del outputs["old"]
    return h.sum(-1)


@case(with_dict)
def dict_setdefault_and_pop(x, outputs):
    outputs.setdefault("extra", []).append(x.mean())
    old = outputs.pop("old")
    return x + old


@case(with_set)
def set_argument_add(x, seen):
    seen.add(x.shape[0])
    seen.discard(1)
    return x * len(seen)


@case(one)
def mutate_global_list(x):
    LOG.append(1)
    return x + len(LOG) * 0


@case(one)
def mutate_global_dict(x):
    STATE["calls"] = STATE["calls"] + 0
    return x * 2


@case(one)
def global_counter_assigned(x):
    global COUNTER
    before = COUNTER
    COUNTER = before + 1
    return x * (COUNTER - before)


@case(one)
def global_set_add(x):
    SEEN.add("forward")
    return x + len(SEEN)


@case(one)
def inlined_helper_appends(x):
    history = []
    y = record(history, x * 2)
    record(LOG, 0)
    return y + len(history)


@case(one)
def closure_counter(x):
    return CLOSURE(x)


@case(module("counter"))
def set_module_attribute(module, x):
    module.flag = True
    module.calls = module.calls + 1
    return module.fc(x)


@case(module("counter"))
def counting_module_forward(module, x):
    return module(x) + module(x)


@case(module("recorder"))
def module_keeps_activations(module, x):
    return module(x) * 2


@case(module("kv"))
def module_caches_tensor_attribute(module, x):
    first = module(x)
    second = module(x * 2)
    return first, second, module.steps


@case(module("model"))
def nested_modules_count_and_collect(module, x):
    y = module(x)
    return y, len(module.aux_losses), module.first.calls + module.second.calls


@case(lambda n: (torch.randn(n, 8), TrainState()))
def dataclass_state_updated(x, state):
    loss = (x * 3).mean()
    state.step += 1
    return loss, state.step


@case(with_list)
def list_aliased_through_two_names(x, items):
    alias = items
    alias.append(9)
    return x * items[-1], len(items)


@case(with_list, expect="clean")  # printed after the graph, with the list as it was
def mutation_before_a_print(x, items):
    items.append(x.shape[0])
    print("items", items)
    items.append(0)
    return x * len(items)


@case(module("oneshot"))
def module_deletes_attribute(module, x):
    return module(x)


CLOSURE = make_counter()
