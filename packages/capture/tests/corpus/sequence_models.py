"""Sequence-model code beyond the transformer block: generation input preparation
(position ids from the attention mask, cache slicing, mask extension), Gumbel sampling
with the noise given, Transformer-XL's relative shift, DeBERTa's disentangled attention,
sliding chunks, Conformer's convolution module, TCN blocks, weight-normed convolutions,
attention pooling, chunked LM losses, retrieval, mixup, multi-task heads, embedding bags."""

import copy
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(40)
D = 16


def left_padded(n):
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, :2] = 0
    return (torch.randint(2, 20, (2, n)), mask)


@case(left_padded)
def prepare_inputs_for_generation_position_ids(input_ids, attention_mask):
    past_length = input_ids.shape[1] - 1
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    step_ids = input_ids[:, past_length:]
    step_positions = position_ids[:, -step_ids.shape[1] :]
    model_inputs = {"input_ids": step_ids, "position_ids": step_positions, "use_cache": True}
    model_inputs["attention_mask"] = torch.cat(
        [attention_mask, attention_mask.new_ones((2, 1))], dim=-1
    )
    return model_inputs


@case(lambda n: (torch.randn(2, 20), torch.rand(2, 20).clamp(1e-6, 1 - 1e-6)))
def gumbel_max_sampling_with_given_noise(logits, uniform):
    temperature = 0.8
    gumbel = -torch.log(-torch.log(uniform))
    return torch.argmax(logits / temperature + gumbel, dim=-1)


@case(lambda n: (torch.randn(n, 6, requires_grad=True), torch.rand(n, 6).clamp(1e-6, 1 - 1e-6)))
def gumbel_softmax_hard_straight_through(logits, uniform):
    tau = 0.5
    gumbels = -torch.empty_like(logits).copy_(uniform).log().neg().log()
    y_soft = ((logits + gumbels) / tau).softmax(-1)
    index = y_soft.max(-1, keepdim=True)[1]
    y_hard = torch.zeros_like(logits).scatter_(-1, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def rel_shift(x):
    zero_pad_shape = (x.size(0), 1) + x.size()[2:]  # noqa: RUF005 - Transformer-XL's form
    zero_pad = torch.zeros(zero_pad_shape, device=x.device, dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=1)
    x_padded_shape = (x.size(1) + 1, x.size(0)) + x.size()[2:]  # noqa: RUF005
    x_padded = x_padded.view(*x_padded_shape)
    return x_padded[1:].view_as(x)


@case(lambda n: (torch.randn(n, n, 2, 4),))
def transformer_xl_relative_shift(bd):
    return rel_shift(bd)


@case(lambda n: (torch.randn(2, 4, n, 4), torch.randn(2, 4, n, 4), torch.randn(2 * 4, 4, 4)))
def deberta_disentangled_c2p_p2c(query, key, rel_embeddings):
    span = 4
    t = query.shape[2]
    q_ids = torch.arange(t)
    relative_pos = (q_ids[:, None] - q_ids[None, :]).unsqueeze(0)
    pos_key = rel_embeddings[: 2 * span].view(2 * span, 4, 4).permute(1, 0, 2)
    c2p_att = torch.matmul(query, pos_key.transpose(-1, -2).unsqueeze(0))
    c2p_pos = torch.clamp(relative_pos + span, 0, span * 2 - 1)
    c2p_att = torch.gather(c2p_att, dim=-1, index=c2p_pos.unsqueeze(0).expand(2, 4, t, t))
    p2c_att = torch.matmul(key, pos_key.transpose(-1, -2).unsqueeze(0))
    p2c_pos = torch.clamp(-relative_pos + span, 0, span * 2 - 1)
    p2c_att = torch.gather(
        p2c_att, dim=-1, index=p2c_pos.unsqueeze(0).expand(2, 4, t, t)
    ).transpose(-1, -2)
    scale = math.sqrt(query.size(-1) * 3)
    scores = torch.matmul(query, key.transpose(-1, -2)) / scale + (c2p_att + p2c_att) / scale
    return scores.softmax(-1)


@case(lambda n: (torch.randn(2, 4 * n, D),))
def sliding_chunks_overlapping_by_unfold(hidden):
    window = 4
    chunks = hidden.unfold(1, 2 * window, window).transpose(-1, -2)
    scores = chunks @ chunks.transpose(-1, -2) / math.sqrt(D)
    return (scores.softmax(-1) @ chunks).mean(2), chunks.shape[1]


class ConformerConvModule(nn.Module):
    def __init__(self, channels=D, kernel_size=3):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(
            channels, channels, kernel_size, padding=(kernel_size - 1) // 2, groups=channels
        )
        self.batch_norm = nn.BatchNorm1d(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)
        self.layer_norm = nn.LayerNorm(channels)

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = self.layer_norm(hidden_states)
        if attention_mask is not None:
            hidden_states = hidden_states.masked_fill(~attention_mask.bool().unsqueeze(-1), 0.0)
        hidden_states = hidden_states.transpose(1, 2)
        hidden_states = nn.functional.glu(self.pointwise_conv1(hidden_states), dim=1)
        hidden_states = self.depthwise_conv(hidden_states)
        hidden_states = F.silu(self.batch_norm(hidden_states))
        return self.pointwise_conv2(hidden_states).transpose(1, 2)


CONFORMER_CONV = ConformerConvModule().eval()


@case(
    lambda n: (
        CONFORMER_CONV,
        torch.randn(2, n, D),
        torch.ones(2, n).index_fill(1, torch.tensor([n - 1]), 0),
    )
)
def conformer_convolution_module_masked(module, x, mask):
    return x + module(x, mask)


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, : -self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, dilation):
        super().__init__()
        padding = (kernel_size - 1) * dilation
        self.net = nn.Sequential(
            nn.Conv1d(n_inputs, n_outputs, kernel_size, padding=padding, dilation=dilation),
            Chomp1d(padding),
            nn.ReLU(),
            nn.Dropout(0.2),
        )
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return F.relu(out + res)


TCN = nn.Sequential(TemporalBlock(4, 8, 3, 1), TemporalBlock(8, 8, 3, 2)).eval()


@case(lambda n: (TCN, torch.randn(2, 4, 3 * n)))
def temporal_conv_network_chomped_residuals(tcn, x):
    return tcn(x)


WEIGHT_NORMED = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1))


@case(lambda n: (WEIGHT_NORMED, torch.randn(2, 4, n)))
def weight_norm_parametrized_conv(conv, x):
    return F.leaky_relu(conv(x), 0.1)


class AttentionPooling(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Parameter(torch.randn(D))
        self.proj = nn.Linear(D, D)

    def forward(self, hidden, mask):
        scores = torch.tanh(self.proj(hidden)) @ self.query
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        return torch.einsum("bt,btd->bd", weights, hidden), weights


ATTN_POOL = AttentionPooling()


@case(lambda n: (ATTN_POOL, *left_padded(n)[1:], torch.randn(2, n, D)))
def attention_pooling_with_mask(pool, mask, hidden):
    return pool(hidden, mask)


@case(
    lambda n: (
        nn.Linear(D, 30, bias=False),
        torch.randn(2, 2 * n, D),
        torch.randint(0, 30, (2, 2 * n)),
    )
)
def chunked_lm_head_cross_entropy(head, hidden, labels):
    chunk = 4
    hidden = hidden.reshape(-1, D)
    labels = labels.reshape(-1)
    total = hidden.new_zeros(())
    for start in range(0, hidden.shape[0], chunk):
        logits = head(hidden[start : start + chunk]).float()
        total = total + F.cross_entropy(logits, labels[start : start + chunk], reduction="sum")
    return total / labels.numel()


@case(lambda n: (torch.randn(3, D), torch.randn(4 * n, D), torch.arange(4 * n) * 10))
def dense_retrieval_top_k_passages(queries, passages, passage_ids):
    q = F.normalize(queries, dim=-1)
    p = F.normalize(passages, dim=-1)
    scores = q @ p.T
    top_scores, top_idx = scores.topk(3, dim=-1)
    return top_scores, passage_ids[top_idx], passages[top_idx].mean(1)


@case(lambda n: (torch.randn(n, 3, 8, 8), F.one_hot(torch.arange(n) % 4, 4).float(), 0.3))
def mixup_and_cutmix_with_given_lambda(images, targets, lam):
    index = torch.arange(images.shape[0]).flip(0)
    mixed = lam * images + (1 - lam) * images[index]
    mixed_targets = lam * targets + (1 - lam) * targets[index]
    cut = int(8 * math.sqrt(1 - lam))
    cutmix = images.clone()
    cutmix[:, :, :cut, :cut] = images[index, :, :cut, :cut]
    area = 1 - cut * cut / 64
    return mixed, mixed_targets, cutmix, area * targets + (1 - area) * targets[index]


class MultiTaskModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, D), nn.ReLU())
        self.heads = nn.ModuleDict(
            {"sentiment": nn.Linear(D, 3), "topic": nn.Linear(D, 5), "score": nn.Linear(D, 1)}
        )
        self.loss_weights = {"sentiment": 1.0, "topic": 0.5, "score": 0.1}

    def forward(self, x, labels):
        shared = self.encoder(x)
        outputs = {task: head(shared) for task, head in self.heads.items()}
        losses = {}
        for task, logits in outputs.items():
            if task not in labels:
                continue
            if task == "score":
                losses[task] = F.mse_loss(logits.squeeze(-1), labels[task])
            else:
                losses[task] = F.cross_entropy(logits, labels[task])
        total = sum(self.loss_weights[t] * loss for t, loss in losses.items())
        return outputs, losses, total


MULTI_TASK = MultiTaskModel()


@case(
    lambda n: (
        MULTI_TASK,
        torch.randn(n, 8),
        {"sentiment": torch.arange(n) % 3, "score": torch.randn(n)},
    )
)
def multi_task_heads_with_partial_labels(model, x, labels):
    return model(x, labels)


BAG = nn.EmbeddingBag(30, D, mode="mean")


@case(lambda n: (BAG, torch.randint(0, 30, (3 * n,)), torch.tensor([0, n, 2 * n])))
def embedding_bag_with_offsets(bag, ids, offsets):
    return bag(ids, offsets), F.embedding_bag(ids, bag.weight, offsets, mode="sum")


@case(lambda n: (torch.randn(2, n, 20), torch.randint(0, 20, (2, n))))
def perplexity_entropy_and_token_accuracy(logits, labels):
    log_probs = logits.log_softmax(-1)
    nll = F.nll_loss(log_probs.transpose(1, 2), labels, reduction="none")
    perplexity = nll.mean(-1).exp()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    accuracy = (logits.argmax(-1) == labels).float().mean()
    return {"perplexity": perplexity, "entropy": entropy, "accuracy": accuracy}


@case(
    lambda n: (
        nn.Conv2d(3, 4, 3, padding=1),
        copy.deepcopy(nn.BatchNorm2d(4)).eval(),
        torch.randn(2, 3, n, n),
    )
)
def fuse_conv_and_batch_norm_for_inference(conv, bn, x):
    with torch.no_grad():
        bn_var_rsqrt = torch.rsqrt(bn.running_var + bn.eps)
        fused_w = conv.weight * (bn.weight * bn_var_rsqrt).reshape(-1, 1, 1, 1)
        fused_b = (conv.bias - bn.running_mean) * bn_var_rsqrt * bn.weight + bn.bias
    return F.conv2d(x, fused_w, fused_b, padding=1), bn(conv(x))


@case(lambda n: (torch.randn(2, 4, 3 * n), torch.randn(2, 4, 3 * n)))
def autocast_bf16_region_with_float32_softmax(q, k):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        scores = q.transpose(1, 2) @ k
        probs = scores.float().softmax(-1)
    return probs, scores.dtype


@case(lambda n: (torch.randn(2, n, 8), torch.tensor([[1.0] * 8, [1.0] * 5 + [0.0] * 3])))
def revin_instance_normalisation_and_denorm(x, mask):
    mask = mask[:, : x.shape[1], None]
    mean = (x * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
    stdev = torch.sqrt(
        ((x - mean) ** 2 * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True) + 1e-5
    )
    normed = (x - mean) / stdev
    forecast = normed[:, -1:] * 0.9
    return forecast * stdev + mean


@case(lambda n: (torch.randn(2, 3, 4 * n),))
def patchtst_patching_with_stride(series):
    patch_len, stride = 4, 2
    series = F.pad(series, (0, stride), mode="replicate")
    patches = series.unfold(dimension=-1, size=patch_len, step=stride)
    b, c, num, p = patches.shape
    return patches.reshape(b * c, num, p), num


@case(lambda n: (torch.randn(2, n), torch.randn(2, n, 3), torch.tensor([0.1, 0.5, 0.9])))
def quantile_pinball_loss(target, predictions, quantiles):
    errors = target.unsqueeze(-1) - predictions
    return torch.max((quantiles - 1) * errors, quantiles * errors).mean()
