# ruff: noqa: RUF005 - the corpus keeps the libraries' own tuple concatenation
"""Building blocks of model libraries: normalisation variants, activation registries
(ACT2FN), config dataclasses driving module construction, ModuleList / ModuleDict /
Sequential loops with layer drop off in eval, ModelOutput-like dataclasses with optional
fields, gated MLPs and mixture-of-experts routing with top-k, softmax, gather and scatter."""

import collections
import dataclasses
import math
from functools import partial

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(35)
D = 16


def seq(n):
    return (torch.randn(2, n, D),)


class GemmaRMSNorm(nn.Module):
    """RMSNorm whose weight is stored as an offset from one."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(0.1 * torch.randn(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


@case(lambda n: (GemmaRMSNorm(D), *seq(n)))
def rms_norm_weight_offset(norm, x):
    return norm(x)


class LayerNormNoBias(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim) + 0.05 * torch.randn(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


@case(lambda n: (LayerNormNoBias(D, bias=False), LayerNormNoBias(D, bias=True), *seq(n)))
def layer_norm_optional_bias(no_bias, with_bias, x):
    return no_bias(x) - with_bias(x), no_bias.bias is None


@case(lambda n: (nn.GroupNorm(4, 8), torch.randn(2, 8, n, n)))
def group_norm_on_feature_maps(norm, x):
    return norm(x), F.group_norm(x, 2)


@case(lambda n: (torch.randn(2, 8, n),))
def group_norm_by_hand(x):
    groups, eps = 4, 1e-5
    b, c, t = x.shape
    grouped = x.view(b, groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    var = grouped.var(-1, unbiased=False, keepdim=True)
    return ((grouped - mean) / (var + eps).sqrt()).view(b, c, t)


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


@case(lambda n: (T5LayerNorm(D), *seq(n)))
def t5_layer_norm_dtype_check(norm, x):
    return norm(x)


@case(lambda n: (nn.RMSNorm(D, eps=1e-5), nn.LayerNorm(D, elementwise_affine=False), *seq(n)))
def torch_rms_norm_and_plain_layer_norm(rms, plain, x):
    return rms(x) + plain(x)


@case(lambda n: (torch.randn(2, 4, n, n), torch.randn(4), torch.randn(4)))
def channels_first_layer_norm_convnext(x, weight, bias):
    u = x.mean(1, keepdim=True)
    s = (x - u).pow(2).mean(1, keepdim=True)
    x = (x - u) / torch.sqrt(s + 1e-6)
    return weight[:, None, None] * x + bias[:, None, None]


@case(lambda n: (nn.BatchNorm1d(D).eval(), torch.randn(n, D)))
def batch_norm_eval_running_stats(norm, x):
    return norm(x), norm.running_mean.shape


@case(lambda n: (nn.BatchNorm1d(D), torch.randn(n, D)))
def batch_norm_train_updates_buffers(norm, x):
    return norm(x), norm.num_batches_tracked


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return (
            0.5
            * input
            * (
                1.0
                + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0)))
            )
        )


class QuickGELUActivation(nn.Module):
    def forward(self, input):
        return input * torch.sigmoid(1.702 * input)


class ClassInstantier(collections.OrderedDict):
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT2CLS = {
    "gelu": nn.GELU,
    "gelu_new": NewGELUActivation,
    "gelu_pytorch_tanh": (nn.GELU, {"approximate": "tanh"}),
    "quick_gelu": QuickGELUActivation,
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "tanh": nn.Tanh,
    "leaky_relu": (nn.LeakyReLU, {"negative_slope": 0.1}),
}
ACT2FN = ClassInstantier(ACT2CLS)


def get_activation(name):
    if name in ACT2FN:
        return ACT2FN[name]
    raise KeyError(f"function {name} not found in ACT2FN mapping {list(ACT2FN.keys())}")


@case(seq)
def activation_registry_instantiates_in_forward(x):
    return [
        get_activation(name)(x)
        for name in ("gelu_new", "gelu_pytorch_tanh", "quick_gelu", "leaky_relu")
    ]


ACT_FUNCTIONS = {
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "mish": F.mish,
    "sigmoid": torch.sigmoid,
}


class ConfiguredMLP(nn.Module):
    def __init__(self, hidden_act):
        super().__init__()
        self.fc1 = nn.Linear(D, 2 * D)
        self.fc2 = nn.Linear(2 * D, D)
        if isinstance(hidden_act, str):
            self.act = ACT2FN[hidden_act]
        else:
            self.act = hidden_act

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


MLPS = nn.ModuleDict({name: ConfiguredMLP(name) for name in ("gelu", "swish", "relu6")})


@case(lambda n: (MLPS, *seq(n)))
def module_dict_of_activation_mlps(mlps, x):
    return {name: mlp(x) for name, mlp in mlps.items()}


@case(lambda n: (*seq(n), "mish"))
def activation_function_looked_up_by_config_string(x, name):
    fn = ACT_FUNCTIONS.get(name, F.gelu)
    fallback = ACT_FUNCTIONS.get("unknown", F.gelu)
    return fn(x) + fallback(x)


class LlamaMLP(nn.Module):
    def __init__(self, hidden_act="silu", intermediate=40):
        super().__init__()
        self.gate_proj = nn.Linear(D, intermediate, bias=False)
        self.up_proj = nn.Linear(D, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, D, bias=False)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


SWIGLU = LlamaMLP()


@case(lambda n: (SWIGLU, *seq(n)))
def gated_mlp_swiglu(mlp, x):
    return mlp(x)


@case(lambda n: (nn.Linear(D, 4 * D), *seq(n)))
def geglu_fused_projection_chunk(proj, x):
    hidden, gate = proj(x).chunk(2, dim=-1)
    return hidden * F.gelu(gate, approximate="tanh")


@dataclasses.dataclass
class TinyConfig:
    hidden_size: int = D
    num_hidden_layers: int = 3
    intermediate_size: int = 24
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-5
    layerdrop: float = 0.5
    use_return_dict: bool = True
    output_hidden_states: bool = False
    tie_word_embeddings: bool = True
    vocab_size: int = 20

    def __post_init__(self):
        if self.hidden_size % 4:
            raise ValueError("hidden_size must be divisible by 4")


class ConfigLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return hidden_states + self.fc_out(self.act(self.fc_in(self.norm(hidden_states))))


@dataclasses.dataclass
class BaseModelOutput:
    last_hidden_state: torch.Tensor = None
    hidden_states: tuple = None
    attentions: tuple = None

    def to_tuple(self):
        return tuple(
            getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        )


class ConfigModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [ConfigLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.final_norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight

    def forward(self, input_ids, output_hidden_states=None, return_dict=None):
        output_hidden_states = (
            output_hidden_states
            if output_hidden_states is not None
            else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.use_return_dict
        hidden_states = self.embed(input_ids)
        all_hidden_states = () if output_hidden_states else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden_states = all_hidden_states + (hidden_states,)
            if self.training and torch.rand([]) < self.config.layerdrop:
                continue
            hidden_states = layer(hidden_states)
        hidden_states = self.final_norm(hidden_states)
        if not return_dict:
            return tuple(v for v in [hidden_states, all_hidden_states] if v is not None)
        return BaseModelOutput(last_hidden_state=hidden_states, hidden_states=all_hidden_states)


CONFIG_MODEL = ConfigModel(TinyConfig()).eval()


@case(lambda n: (CONFIG_MODEL, torch.randint(0, 20, (2, n))))
def config_model_layerdrop_off_in_eval(model, ids):
    out = model(ids, output_hidden_states=True)
    return out.last_hidden_state, len(out.hidden_states), out.attentions is None


@case(lambda n: (CONFIG_MODEL, torch.randint(0, 20, (2, n))))
def config_model_tuple_return(model, ids):
    return model(ids, return_dict=False)


@case(lambda n: (CONFIG_MODEL, torch.randint(0, 20, (2, n))))
def tied_lm_head_logits(model, ids):
    hidden = model(ids).last_hidden_state
    logits = model.lm_head(hidden)
    return logits, model.lm_head.weight is model.embed.weight


@case(lambda n: (torch.randn(2, n, D),))
def config_replaced_and_validated(x):
    config = TinyConfig(num_hidden_layers=2)
    smaller = dataclasses.replace(config, intermediate_size=8)
    try:
        TinyConfig(hidden_size=10)
        error = ""
    except ValueError as e:
        error = str(e)
    return (
        x * smaller.intermediate_size + config.num_hidden_layers,
        error,
        dataclasses.asdict(smaller)["hidden_act"],
    )


class SequentialWithKwargs(nn.Sequential):
    def forward(self, x, scale=1.0):
        for module in self:
            x = module(x) * scale
        return x


STACK = SequentialWithKwargs(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, D))


@case(lambda n: (STACK, *seq(n)))
def sequential_subclass_forward_with_kwargs(stack, x):
    return stack(x, scale=0.5), stack[1:](x), len(stack)


class Highway(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(D, D) for _ in range(depth))
        self.gates = nn.ModuleList(nn.Linear(D, 1) for _ in range(depth))

    def forward(self, x, exit_layer=None):
        exits = []
        for i, (block, gate) in enumerate(zip(self.blocks, self.gates)):
            g = torch.sigmoid(gate(x))
            x = g * torch.relu(block(x)) + (1 - g) * x
            exits.append(x.mean(1))
            if exit_layer is not None and i == exit_layer:
                break
        return x, exits


HIGHWAY = Highway(4)


@case(lambda n: (HIGHWAY, *seq(n)))
def module_list_zip_with_early_exit(model, x):
    full, exits = model(x)
    early, early_exits = model(x, exit_layer=1)
    return full, torch.stack(exits), early, len(early_exits)


@case(lambda n: (HIGHWAY, *seq(n)))
def module_list_slicing_and_reversed(model, x):
    for block in model.blocks[::2]:
        x = block(x)
    for gate in reversed(model.gates):
        x = x * gate(x).sigmoid()
    return x, len(model.blocks[1:])


class DenseMoE(nn.Module):
    """Top-k routing computed densely: every expert runs on every token and the top-k
    weights are scattered back into a (tokens, experts) matrix: no data-dependent shape."""

    def __init__(self, num_experts=4, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(D, num_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(num_experts, D, 24) * 0.1)
        self.w2 = nn.Parameter(torch.randn(num_experts, 24, D) * 0.1)

    def forward(self, x):
        logits = self.router(x)
        probs = logits.softmax(-1)
        top_p, top_i = probs.topk(self.top_k, dim=-1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        gates = torch.zeros_like(probs).scatter(-1, top_i, top_p)
        hidden = torch.einsum("btd,edh->bteh", x, self.w1).relu()
        expert_out = torch.einsum("bteh,ehd->bted", hidden, self.w2)
        out = (gates.unsqueeze(-1) * expert_out).sum(-2)
        return out, logits


DENSE_MOE = DenseMoE()


def load_balancing_loss(router_logits, num_experts, top_k):
    routing_weights = router_logits.softmax(-1)
    _, selected = routing_weights.topk(top_k, dim=-1)
    expert_mask = F.one_hot(selected, num_experts)
    tokens_per_expert = expert_mask.float().mean(dim=0)
    router_prob_per_expert = routing_weights.mean(dim=0)
    return (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * num_experts


@case(lambda n: (DENSE_MOE, *seq(n)))
def moe_dense_scatter_gates_and_aux_losses(moe, x):
    out, logits = moe(x)
    flat = logits.reshape(-1, logits.shape[-1])
    aux = load_balancing_loss(flat, 4, 2)
    z_loss = torch.logsumexp(flat, dim=-1).pow(2).mean()
    return out, aux, z_loss


@case(lambda n: (DENSE_MOE, *seq(n)))
def moe_expert_choice_routing_gather(moe, x):
    # expert choice: each expert picks its top-c tokens (capacity fixed by the length)
    tokens = x.reshape(-1, D)
    scores = moe.router(tokens).softmax(-1)
    capacity = tokens.shape[0] // 2
    weights, token_idx = scores.t().topk(capacity, dim=-1)
    picked = tokens[token_idx]
    hidden = torch.einsum("ecd,edh->ech", picked, moe.w1).relu()
    expert_out = torch.einsum("ech,ehd->ecd", hidden, moe.w2) * weights.unsqueeze(-1)
    out = torch.zeros_like(tokens).index_add_(0, token_idx.reshape(-1), expert_out.reshape(-1, D))
    return out.view_as(x)


@case(lambda n: (DENSE_MOE, *seq(n)))
def moe_switch_top1_with_capacity_mask(moe, x):
    tokens = x.reshape(-1, D)
    probs = moe.router(tokens).softmax(-1)
    expert_index = probs.argmax(-1)
    one_hot = F.one_hot(expert_index, num_classes=4)
    position_in_expert = torch.cumsum(one_hot, dim=0) * one_hot
    capacity = 2
    keep = (position_in_expert <= capacity) & (position_in_expert > 0)
    gate = (probs * keep).sum(-1, keepdim=True)
    hidden = torch.einsum("td,edh->teh", tokens, moe.w1).relu()
    out = torch.einsum("teh,ehd->ted", hidden, moe.w2)
    chosen = out.gather(1, expert_index[:, None, None].expand(-1, 1, D)).squeeze(1)
    return (gate * chosen).view_as(x), keep.sum(0)


@dataclasses.dataclass
class MoEModelOutput:
    last_hidden_state: torch.Tensor
    router_logits: tuple = None
    aux_loss: torch.Tensor = None


@case(lambda n: (DENSE_MOE, *seq(n)))
def moe_output_dataclass_collects_router_logits(moe, x):
    all_router_logits = ()
    for _ in range(2):
        delta, logits = moe(x)
        x = x + delta
        all_router_logits += (logits.reshape(-1, 4),)
    aux = sum(load_balancing_loss(r, 4, 2) for r in all_router_logits) / len(all_router_logits)
    return MoEModelOutput(last_hidden_state=x, router_logits=all_router_logits, aux_loss=aux)


@dataclasses.dataclass
class SequenceClassifierOutput:
    loss: torch.Tensor = None
    logits: torch.Tensor = None
    hidden_states: tuple = None


class SequenceClassifier(nn.Module):
    def __init__(self, num_labels):
        super().__init__()
        self.num_labels = num_labels
        self.dense = nn.Linear(D, D)
        self.out_proj = nn.Linear(D, num_labels)

    def forward(self, hidden_states, attention_mask, labels=None, problem_type=None):
        lengths = attention_mask.sum(-1) - 1
        pooled = hidden_states[torch.arange(hidden_states.shape[0]), lengths]
        logits = self.out_proj(torch.tanh(self.dense(pooled)))
        loss = None
        if labels is not None:
            if problem_type is None:
                if self.num_labels == 1:
                    problem_type = "regression"
                elif labels.dtype == torch.long or labels.dtype == torch.int:
                    problem_type = "single_label_classification"
                else:
                    problem_type = "multi_label_classification"
            if problem_type == "regression":
                loss = F.mse_loss(logits.squeeze(), labels.squeeze())
            elif problem_type == "single_label_classification":
                loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
            else:
                loss = F.binary_cross_entropy_with_logits(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


CLASSIFIER = SequenceClassifier(3)
REGRESSOR = SequenceClassifier(1)


def classify(n):
    mask = torch.ones(2, n, dtype=torch.long)
    mask[0, -1] = 0
    return (torch.randn(2, n, D), mask)


@case(lambda n: (CLASSIFIER, REGRESSOR, *classify(n)))
def classifier_problem_type_inferred_from_labels(clf, reg, x, mask):
    single = clf(x, mask, labels=torch.tensor([0, 2]))
    multi = clf(x, mask, labels=torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]))
    regression = reg(x, mask, labels=torch.tensor([0.5, -1.0]))
    unlabeled = clf(x, mask)
    return single.loss, multi.loss, regression.loss, regression.logits, unlabeled.loss is None


class MeanPooler(nn.Module):
    def forward(self, token_embeddings, attention_mask):
        mask = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
        summed = torch.sum(token_embeddings * mask, 1)
        counts = torch.clamp(mask.sum(1), min=1e-9)
        return F.normalize(summed / counts, p=2, dim=1)


@case(lambda n: (MeanPooler(), *classify(n)))
def sentence_embedding_masked_mean_pool(pooler, x, mask):
    embeddings = pooler(x, mask)
    return embeddings @ embeddings.T


class ScaledWordEmbedding(nn.Embedding):
    """An embedding scaled by sqrt(d) (T5, Gemma, BART), its padding row kept at zero."""

    def __init__(self, num, dim, padding_idx, embed_scale=1.0):
        super().__init__(num, dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale


SCALED_EMBED = ScaledWordEmbedding(20, D, padding_idx=1, embed_scale=D**0.5)


@case(lambda n: (SCALED_EMBED, torch.randint(0, 20, (2, n))))
def scaled_word_embedding_subclass_super_forward(embed, ids):
    ids = ids.masked_fill(ids > 15, embed.padding_idx)
    out = embed(ids)
    return out, (out.abs().sum(-1) == 0).sum()


class ScaledResidual(nn.Module):
    """Pre-norm block with learnable layer scale and a residual scaled by depth."""

    def __init__(self, depth, layer_scale_init=1e-1):
        super().__init__()
        self.norm = GemmaRMSNorm(D)
        self.mlp = LlamaMLP("gelu_pytorch_tanh", 24)
        self.gamma = nn.Parameter(layer_scale_init * torch.ones(D))
        self.residual_scale = 1.0 / math.sqrt(2 * depth)

    def forward(self, x):
        return x + self.residual_scale * self.gamma * self.mlp(self.norm(x))


SCALED = nn.Sequential(*[ScaledResidual(3) for _ in range(3)])


@case(lambda n: (SCALED, *seq(n)))
def layer_scale_residual_stack(stack, x):
    return stack(x)


@case(lambda n: (CONFIG_MODEL, torch.randint(0, 20, (2, n))))
def named_modules_filtered_by_type(model, ids):
    hidden = model.embed(ids)
    norms = [name for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)]
    for name, module in model.named_children():
        if name == "layers":
            for layer in module:
                hidden = layer(hidden)
    return hidden, norms


@case(seq)
def partial_activation_with_kwargs(x):
    acts = [
        partial(F.leaky_relu, negative_slope=0.2),
        partial(F.elu, alpha=0.5),
        partial(F.gelu, approximate="tanh"),
    ]
    return sum(act(x) for act in acts)
