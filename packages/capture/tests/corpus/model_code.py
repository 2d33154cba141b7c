"""Whole pieces of model code in the style of Hugging Face-like libraries and training
loops, each mixing what capture traces now: output dataclasses, caches in dicts and
attributes, masks written by item assignment, counters, hooks, helper objects,
``try``/``except`` fallbacks and context managers."""

import collections
import contextlib
import copy
import dataclasses
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(13)


@dataclasses.dataclass
class ModelOutput:
    last_hidden_state: torch.Tensor
    hidden_states: tuple = None
    attentions: tuple = None
    loss: torch.Tensor = None


@dataclasses.dataclass
class AttentionConfig:
    hidden: int = 8
    heads: int = 2
    dropout: float = 0.0
    causal: bool = True


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.out = nn.Linear(config.hidden, config.hidden)

    def _shape(self, t, batch, length):
        return t.view(batch, length, self.config.heads, -1).transpose(1, 2)

    def forward(self, x, cache=None, output_attentions=False):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (self._shape(t, batch, length) for t in (q, k, v))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if self.config.causal:
            mask = torch.zeros(length, k.shape[2])
            mask[torch.ones(length, k.shape[2]).triu(k.shape[2] - length + 1).bool()] = -1e9
            scores = scores + mask
        probs = scores.softmax(-1)
        out = (probs @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.out(out), (probs if output_attentions else None)


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden)
        self.attn = SelfAttention(config)
        self.norm2 = nn.LayerNorm(config.hidden)
        self.mlp = nn.Sequential(
            nn.Linear(config.hidden, 2 * config.hidden),
            nn.GELU(),
            nn.Linear(2 * config.hidden, config.hidden),
        )

    def forward(self, x, cache=None, output_attentions=False):
        attended, probs = self.attn(self.norm1(x), cache, output_attentions)
        x = x + attended
        return x + self.mlp(self.norm2(x)), probs


class Encoder(nn.Module):
    def __init__(self, config, depth=1):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([Layer(config) for _ in range(depth)])
        self.final = nn.LayerNorm(config.hidden)

    def forward(self, x, output_hidden_states=False, output_attentions=False, caches=None):
        hidden_states = [] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for index, layer in enumerate(self.layers):
            if hidden_states is not None:
                hidden_states.append(x)
            cache = caches.setdefault(index, {}) if caches is not None else None
            x, probs = layer(x, cache, output_attentions)
            if attentions is not None:
                attentions.append(probs)
        x = self.final(x)
        return ModelOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )


class CountingAttention(SelfAttention):
    def __init__(self, config):
        super().__init__(config)
        self.calls = 0

    def forward(self, x, cache=None, output_attentions=False):
        self.calls += 1
        return super().forward(x, cache, output_attentions)


ENCODER = Encoder(AttentionConfig())
COUNTING = Encoder(AttentionConfig())
COUNTING.layers[0].attn = CountingAttention(COUNTING.config)
PROBED = Encoder(AttentionConfig(causal=False))
ACTIVATIONS: dict = {}


def _probe(name):
    def hook(module, args, output):
        ACTIVATIONS[name] = output.detach()

    return hook


for _name, _module in PROBED.named_modules():
    if isinstance(_module, nn.LayerNorm):
        _module.register_forward_hook(_probe(_name))


def sequence(n):
    # the same model on every call (the corpus test compares a deep copy run eagerly):
    # its attributes keep their identity, so only a new shape re-captures
    return (ENCODER, torch.randn(2, n, 8))


def counting(n):
    return (copy.deepcopy(COUNTING), torch.randn(2, n, 8))


def probed(n):
    return (PROBED, torch.randn(2, n, 8))


def with_caches(n):
    return (ENCODER, torch.randn(1, n, 8), {})


def rows(n):
    return (torch.randn(n, 16),)


@case(sequence)
def encoder_last_hidden_state(model, x):
    return model(x).last_hidden_state


@case(sequence)
def encoder_all_outputs(model, x):
    out = model(x, output_hidden_states=True, output_attentions=True)
    return out.last_hidden_state, out.hidden_states, out.attentions


@case(sequence)
def encoder_output_dataclass_returned(model, x):
    return model(x)


@case(with_caches)
def encoder_fills_kv_caches(model, x, caches):
    first = model(x, caches=caches).last_hidden_state
    second = model(x[:, -1:], caches=caches).last_hidden_state
    return first, second, [cache["k"].shape[2] for cache in caches.values()]


@case(counting)
def attention_call_counters(model, x):
    model(x)
    return model.layers[0].attn.calls


@case(probed)
def forward_hooks_record_activations(model, x):
    ACTIVATIONS.clear()
    out = model(x).last_hidden_state
    # (not ``out`` itself beside its detached copy: the runtime then returns both
    # without grad, a bug of its own outside capture)
    return out.sum(-1), sorted(ACTIVATIONS), ACTIVATIONS["final"]


@case(sequence)
def training_step_collects_losses(model, x):
    losses = []
    out = model(x).last_hidden_state
    losses.append(out.pow(2).mean())
    losses.append(out.abs().mean() * 0.1)
    metrics = {"loss": sum(losses)}
    metrics["aux"] = losses[-1]
    return metrics


@case(rows)
def label_smoothing_targets(logits):
    classes = logits.shape[-1]
    targets = torch.full_like(logits, 0.1 / (classes - 1))
    labels = torch.arange(logits.shape[0]) % classes
    targets[torch.arange(logits.shape[0]), labels] = 0.9
    return -(targets * logits.log_softmax(-1)).sum(-1).mean()


@case(rows)
def ignore_index_loss(logits):
    labels = torch.arange(logits.shape[0]) % logits.shape[1]
    labels[0] = -100
    return F.cross_entropy(logits, labels, ignore_index=-100)


@case(rows)
def clip_and_mask_logits(logits):
    out = logits.clone()
    out[..., 0] = -math.inf
    out[out > 2.0] = 2.0
    top = out.topk(3, dim=-1).values[..., -1:]
    out[out < top] = -math.inf
    return out.softmax(-1)


@contextlib.contextmanager
def eval_mode_scope(model):
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@case(sequence)
def config_fallbacks_and_scopes(model, x):
    try:
        scale = model.config.residual_scale
    except AttributeError:
        scale = 1.0
    options = {"eps": 1e-6}
    try:
        temperature = options["temperature"]
    except KeyError:
        temperature = 2.0
    with torch.no_grad():
        hidden = model(x).last_hidden_state
    return hidden * scale / temperature + options["eps"]


@case(rows)
def rotary_embedding_in_place(x):
    half = x.shape[-1] // 2
    freqs = torch.arange(half, dtype=torch.float32) / half
    angles = torch.arange(x.shape[0], dtype=torch.float32)[:, None] * freqs[None]
    cos, sin = angles.cos(), angles.sin()
    out = torch.empty_like(x)
    out[:, :half] = x[:, :half] * cos - x[:, half:] * sin
    out[:, half:] = x[:, :half] * sin + x[:, half:] * cos
    return out


class EMA:
    def __init__(self, decay):
        self.decay = decay
        self.value = None

    def update(self, x):
        if self.value is None:
            self.value = x
        else:
            self.value = self.decay * self.value + (1 - self.decay) * x
        return self.value


@case(rows)
def helper_object_running_average(x):
    ema = EMA(0.9)
    for row in x.unbind(0):
        ema.update(row)
    return ema.value


@case(lambda n: (torch.randn(n, 16), {"step": 0, "history": []}))
def optimizer_state_dict_updates(grad, state):
    state["step"] += 1
    state["history"].append(grad.norm())
    state.setdefault("exp_avg", torch.zeros_like(grad))
    state["exp_avg"] = 0.9 * state["exp_avg"] + 0.1 * grad
    bias = 1 - 0.9 ** state["step"]
    return state["exp_avg"] / bias


class DictOutput(collections.OrderedDict):
    """Hugging Face's ``ModelOutput``: a dataclass over OrderedDict whose fields that are
    not None are also its items, indexable by name or position."""

    def __post_init__(self):
        class_fields = dataclasses.fields(self)
        first = getattr(self, class_fields[0].name)
        others_none = all(getattr(self, field.name) is None for field in class_fields[1:])
        if others_none and not isinstance(first, torch.Tensor) and isinstance(first, dict):
            for key, value in first.items():
                self[key] = value
        else:
            for field in class_fields:
                value = getattr(self, field.name)
                if value is not None:
                    self[field.name] = value

    def __getitem__(self, k):
        if isinstance(k, str):
            inner_dict = dict(self.items())
            return inner_dict[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class CausalLMOutput(DictOutput):
    loss: torch.Tensor = None
    logits: torch.Tensor = None
    hidden_states: tuple = None


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 16)

    def forward(self, ids, labels=None, return_dict=True):
        hidden = self.embed(ids)
        logits = self.proj(hidden)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, 16), labels.view(-1))
        if not return_dict:
            return (loss, logits) if loss is not None else (logits,)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=(hidden,))


TINY_LM = TinyLM()


def with_tiny_lm(n):
    ids = torch.randint(0, 16, (2, n))
    return (copy.deepcopy(TINY_LM), ids, torch.randint(0, 16, (2, n)))


@case(with_tiny_lm)
def model_output_returned(model, ids, labels):
    return model(ids, labels=labels)


@case(with_tiny_lm)
def model_output_used(model, ids, labels):
    out = model(ids, labels=labels)
    logits = out["logits"] + out.logits
    first, second = out[0], out.to_tuple()[1]
    out.logits = logits * 0.5  # __setattr__ keeps the item in step
    return (
        first + second.sum(),
        out["logits"],
        list(out.keys()),
        len(out),
        "loss" in out,
        out.hidden_states[0].shape,
    )


@case(with_tiny_lm)
def model_output_without_loss(model, ids, labels):
    out = model(ids)
    return out.loss is None, list(out), dict(out)["logits"].softmax(-1)


@dataclasses.dataclass
class BaseModelOutputWithPast(DictOutput):
    last_hidden_state: torch.Tensor = None
    past_key_values: tuple = None
    attentions: tuple = None


class TinyDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = nn.Linear(8, 8)
        self.v = nn.Linear(8, 8)
        self.steps = 0

    def forward(self, hidden, past=None, use_cache=True):
        self.steps += 1  # a counter: replayed, not guarded
        k, v = self.k(hidden), self.v(hidden)
        if past is not None:
            k = torch.cat([past[0], k], dim=1)
            v = torch.cat([past[1], v], dim=1)
        scores = (hidden @ k.transpose(1, 2)).softmax(-1)
        out = scores @ v
        return BaseModelOutputWithPast(
            last_hidden_state=out, past_key_values=(k, v) if use_cache else None
        )


TINY_DECODER = TinyDecoder()


def with_decoder(n):
    return (copy.deepcopy(TINY_DECODER), torch.randn(2, n, 8))


@case(with_decoder)
def decoder_two_steps_with_cache(decoder, hidden):
    first = decoder(hidden)
    second = decoder(hidden[:, -1:], past=first.past_key_values)
    return second.last_hidden_state, second[1][0].shape, "attentions" in second, decoder.steps


@case(with_decoder)
def decoder_outputs_iterated(decoder, hidden):
    out = decoder(hidden, use_cache=False)
    total = 0
    for key, value in out.items():
        total = total + value.sum() * len(key)
    return total, list(out.keys()), out.to_tuple()[0].shape


def with_lm_and_scale(n):
    return (copy.deepcopy(TINY_LM), torch.randint(0, 16, (2, n)))


@case(with_lm_and_scale)
def scaled_parameters_in_ordered_dict(model, ids):
    scaled = collections.OrderedDict((name, p * 0.5) for name, p in model.named_parameters())
    logits = F.embedding(ids, scaled["embed.weight"]) @ scaled["proj.weight"].t()
    return logits + scaled["proj.bias"], list(scaled)


class Trainer:
    def __init__(self, model):
        self.model = model
        self.global_step = 0
        self.history = collections.OrderedDict()

    def step(self, ids, labels):
        out = self.model(ids, labels=labels)
        self.global_step += 1
        self.history["loss"] = out.loss.detach()
        return out.loss


def with_trainer(n):
    return (
        Trainer(copy.deepcopy(TINY_LM)),
        torch.randint(0, 16, (2, n)),
        torch.randint(0, 16, (2, n)),
    )


@case(with_trainer)
def trainer_step_counts_and_logs(trainer, ids, labels):
    loss = trainer.step(ids, labels)
    return loss, trainer.global_step, dict(trainer.history)
