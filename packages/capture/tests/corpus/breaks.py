"""Graph breaks: constructs capture does not trace. The function is split there; results,
printed text and mutations must be those of eager, in the same order.

The programs marked ``PRINTS`` broke at ``print`` until capture learned to log it with
the other side effects and print after the graph (decision 0066): they now check that the
text comes out as eager prints it, in order with the rest, with no break."""

import collections
import copy
import itertools

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

try:  # numpy is optional for torch; its programs are left out without it
    import numpy as np
except ImportError:
    np = None

PROGRAMS, case = registry("break")

#: The expectation of a program whose only former break was a ``print``.
PRINTS = "clean"


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


# Model-library code that breaks for a real reason: a shape or a loop that depends on
# tensor values, or an operator with no shape-only (meta) implementation.


class SparseMoE(nn.Module):
    """Mixtral's top-2 routing: the tokens of each expert are found with torch.where."""

    def __init__(self, dim=8, num_experts=4, top_k=2):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 16), nn.SiLU(), nn.Linear(16, dim))
            for _ in range(num_experts)
        )

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        final = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current = self.experts[expert_idx](current_state) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current)
        return final.reshape(batch_size, sequence_length, hidden_dim), router_logits


SPARSE_MOE = SparseMoE()


@case(lambda n: (SPARSE_MOE, torch.randn(2, n, 8)))
def moe_token_dispatch_by_where(moe, x):
    # the number of tokens routed to each expert depends on the router's values
    return moe(x)


class TinyDecoder(nn.Module):
    def __init__(self, vocab=12):
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)
        self.head = nn.Linear(8, vocab)

    def forward(self, input_ids):
        return self.head(torch.tanh(self.embed(input_ids)).cumsum(1))


DECODER = TinyDecoder()


@case(lambda n: (DECODER, torch.randint(2, 12, (2, n))))
def greedy_decode_stops_when_all_finished(model, input_ids):
    # the loop stops on a tensor value: every sequence has produced the end token
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long)
    for _ in range(4):
        next_tokens = model(input_ids)[:, -1, :].argmax(-1)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished = unfinished & (next_tokens != 0)
        if unfinished.max() == 0:
            break
    return input_ids


@case(
    lambda n: (
        torch.randn(n, 2, 5).log_softmax(-1),
        torch.tensor([[1, 2], [3, 3]]),
        torch.tensor([n, n - 1]),
        torch.tensor([2, 1]),
    )
)
def ctc_loss_with_lengths(log_probs, targets, input_lengths, target_lengths):
    # an opaque C call: aten::_ctc_loss has no meta (shape-only) implementation
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)


PACKED_LSTM = nn.LSTM(8, 8, batch_first=True)


@case(lambda n: (copy.deepcopy(PACKED_LSTM), torch.randn(2, n, 8), torch.tensor([n, n - 2])))
def lstm_packed_sequence(lstm, x, lengths):
    # packing reads the lengths' values (the batch sizes of each time step come from them)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    output, (h, _) = lstm(packed)
    padded, out_lengths = nn.utils.rnn.pad_packed_sequence(
        output, batch_first=True, total_length=x.shape[1]
    )
    return padded, h, out_lengths


@case(lambda n: (torch.randn(2, n, 8), torch.tensor([[1] * 3 + [0] * 9, [1] * 2 + [0] * 10])))
def unpad_tokens_by_attention_mask(hidden, attention_mask):
    # flash-attention's unpadding: the kept tokens' count depends on the mask's values
    mask = attention_mask[:, : hidden.shape[1]]
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(
        torch.cumsum(mask.sum(-1, dtype=torch.int32), dim=0, dtype=torch.int32), (1, 0)
    )
    return hidden.reshape(-1, hidden.shape[-1])[indices], cu_seqlens


@case(lambda n: (torch.randn(n, 5), torch.randint(0, 3, (n,))))
def per_class_mean_over_present_labels(features, labels):
    # the classes present are found with unique(): their count depends on the values
    classes = labels.unique()
    return torch.stack([features[labels == c].mean(0) for c in classes])
