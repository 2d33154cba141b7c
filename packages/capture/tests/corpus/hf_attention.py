# ruff: noqa: RUF005 - the corpus keeps the libraries' own tuple concatenation
"""Attention as Hugging Face-like model libraries write it: causal, padding, sliding-window
and prefix masks built from sizes and from an ``attention_mask`` argument, rotary embeddings
with cached cos/sin buffers, grouped-query attention, ALiBi and T5 relative biases, KV
caches (dynamic and static), GPT-2's Conv1D and causal buffer, soft-capping and QK norm."""

import dataclasses
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(34)

HIDDEN, HEADS = 16, 4
HEAD_DIM = HIDDEN // HEADS


def qkv(n):
    return tuple(torch.randn(2, HEADS, n, HEAD_DIM) for _ in range(3))


def hidden(n):
    return (torch.randn(2, n, HIDDEN),)


def padded_batch(n):
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, n - 2 :] = 0
    return (torch.randn(2, n, HIDDEN), mask)


def left_padded(n):
    mask = torch.ones(2, n, dtype=torch.long)
    mask[0, :2] = 0
    return (torch.randn(2, HEADS, n, HEAD_DIM), torch.randn(2, HEADS, n, HEAD_DIM), mask)


def attend(q, k, v, mask=None):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores + mask
    return scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype) @ v


@case(qkv)
def causal_mask_from_sizes(q, k, v):
    length = q.shape[-2]
    mask = torch.full((length, length), float("-inf")).triu(1)
    return attend(q, k, v, mask[None, None])


@case(padded_batch)
def extended_attention_mask_bert(x, attention_mask):
    dtype = x.dtype
    extended = attention_mask[:, None, None, :].to(dtype=dtype)
    extended = (1.0 - extended) * torch.finfo(dtype).min
    q = x.view(2, -1, HEADS, HEAD_DIM).transpose(1, 2)
    return attend(q, q, q, extended)


def make_causal_4d(attention_mask, dtype, past=0):
    batch, total = attention_mask.shape
    length = total - past
    minimum = torch.finfo(dtype).min
    causal = torch.full((length, length), minimum, dtype=dtype)
    cond = torch.arange(causal.size(-1))
    causal.masked_fill_(cond < (cond + 1).view(causal.size(-1), 1), 0)
    if past > 0:
        causal = torch.cat([torch.zeros(length, past, dtype=dtype), causal], dim=-1)
    causal = causal[None, None, :, :].expand(batch, 1, length, total)
    expanded = attention_mask[:, None, None, :].expand(batch, 1, length, total).to(dtype)
    inverted = 1.0 - expanded
    padding = inverted.masked_fill(inverted.to(torch.bool), minimum)
    return causal.masked_fill(padding.bool(), minimum)


@case(left_padded)
def combined_causal_and_padding_mask(k, v, attention_mask):
    mask = make_causal_4d(attention_mask, k.dtype)
    return attend(k, k, v, mask), mask


@case(lambda n: (torch.randn(2, HEADS, n, HEAD_DIM), torch.randn(2, HEADS, n + 3, HEAD_DIM)))
def causal_mask_with_past_length(q, kv):
    past = kv.shape[-2] - q.shape[-2]
    mask = make_causal_4d(torch.ones(2, kv.shape[-2], dtype=torch.long), q.dtype, past=past)
    return attend(q, kv, kv, mask)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position=32, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_seq_len_cached = max_position
        self._set_cos_sin_cache(max_position)

    def _set_cos_sin_cache(self, length):
        self.max_seq_len_cached = length
        t = torch.arange(length, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len=None):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:seq_len].to(x.dtype), self.sin_cached[:seq_len].to(x.dtype)


ROTARY = RotaryEmbedding(HEAD_DIM)


@case(lambda n: (ROTARY, *qkv(n)[:2]))
def rotary_cached_cos_sin_buffers(rotary, q, k):
    cos, sin = rotary(q, seq_len=q.shape[-2])
    return apply_rotary_pos_emb(q, k, cos[None], sin[None])


@case(lambda n: (ROTARY, *qkv(n)[:2], torch.arange(n).flip(0)[None].expand(2, n) + 1))
def rotary_indexed_by_position_ids(rotary, q, k, position_ids):
    cos, sin = rotary(q, seq_len=rotary.max_seq_len_cached)
    return apply_rotary_pos_emb(q, k, cos[position_ids], sin[position_ids])


@case(lambda n: (RotaryEmbedding(HEAD_DIM, max_position=5), torch.randn(2, HEADS, n, HEAD_DIM)))
def rotary_cache_grows_past_max_position(rotary, q):
    cos, sin = rotary(q, seq_len=q.shape[-2])
    out, _ = apply_rotary_pos_emb(q, q, cos[None], sin[None])
    return out, rotary.max_seq_len_cached


class LlamaRotary(nn.Module):
    """The newer form: the cos/sin computed from position ids in float32 on each call."""

    def __init__(self, dim, base=10000.0, scaling=1.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq / scaling, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = (
            self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        )
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type="cpu", enabled=False):
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


LLAMA_ROTARY = LlamaRotary(HEAD_DIM, scaling=2.0)


@case(lambda n: (LLAMA_ROTARY, *qkv(n)[:2], torch.arange(n)[None].expand(2, n)))
def rotary_from_position_ids_no_grad(rotary, q, k, position_ids):
    cos, sin = rotary(q, position_ids)
    return apply_rotary_pos_emb(q, k, cos, sin)


@case(lambda n: (torch.randn(2, n, HEADS, 8),))
def rotary_interleaved_gptj(x):
    dim = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    sinusoid = torch.einsum("i,j->ij", torch.arange(x.shape[1], dtype=torch.float), inv_freq)
    sin = torch.repeat_interleave(sinusoid.sin()[None, :, None, :], 2, 3)
    cos = torch.repeat_interleave(sinusoid.cos()[None, :, None, :], 2, 3)
    x1, x2 = x[:, :, :, ::2], x[:, :, :, 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return (x * cos) + (rotated * sin)


@case(lambda n: (torch.randn(2, HEADS, n, 8),))
def partial_rotary_neox(x):
    rotary_ndims = int(x.shape[-1] * 0.5)
    x_rot, x_pass = x[..., :rotary_ndims], x[..., rotary_ndims:]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_ndims, 2).float() / rotary_ndims))
    freqs = torch.arange(x.shape[-2]).float()[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    x_rot = x_rot * emb.cos() + rotate_half(x_rot) * emb.sin()
    return torch.cat((x_rot, x_pass), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim
    )
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


@dataclasses.dataclass
class GQAConfig:
    hidden_size: int = HIDDEN
    num_attention_heads: int = HEADS
    num_key_value_heads: int = 2
    attention_bias: bool = False


class GroupedQueryAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.q_proj = nn.Linear(
            config.hidden_size, self.num_heads * self.head_dim, bias=config.attention_bias
        )
        kv_out = self.num_key_value_heads * self.head_dim
        self.k_proj = nn.Linear(config.hidden_size, kv_out, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_out, bias=config.attention_bias)
        self.o_proj = nn.Linear(
            self.num_heads * self.head_dim, config.hidden_size, bias=config.attention_bias
        )
        self.rotary = LlamaRotary(self.head_dim)

    def forward(self, hidden_states, attention_mask=None, use_interleave=False):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        position_ids = torch.arange(q_len).unsqueeze(0).expand(bsz, -1)
        cos, sin = self.rotary(v, position_ids)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if use_interleave:
            k = k.repeat_interleave(self.num_key_value_groups, dim=1)
            v = v.repeat_interleave(self.num_key_value_groups, dim=1)
        else:
            k = repeat_kv(k, self.num_key_value_groups)
            v = repeat_kv(v, self.num_key_value_groups)
        weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            weights = weights + attention_mask[:, :, :, : k.shape[-2]]
        weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v).transpose(1, 2).contiguous().reshape(bsz, q_len, -1)
        return self.o_proj(out)


GQA = GroupedQueryAttention(GQAConfig())
MQA = GroupedQueryAttention(GQAConfig(num_key_value_heads=1, attention_bias=True))


@case(lambda n: (GQA, *padded_batch(n)))
def grouped_query_attention_repeat_kv(attn, x, attention_mask):
    return attn(x, make_causal_4d(attention_mask, x.dtype))


@case(lambda n: (GQA, torch.randn(2, n, HIDDEN)))
def grouped_query_attention_repeat_interleave(attn, x):
    return attn(x, use_interleave=True)


@case(lambda n: (MQA, torch.randn(2, n, HIDDEN)))
def multi_query_attention_one_kv_head(attn, x):
    causal = torch.full((x.shape[1], x.shape[1]), torch.finfo(x.dtype).min).triu(1)
    return attn(x, causal[None, None])


def get_alibi_slopes(num_heads):
    def power_of_2_slopes(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_2_slopes(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_2_slopes(closest) + get_alibi_slopes(2 * closest)[0::2][: num_heads - closest]


@case(qkv)
def alibi_relative_bias(q, k, v):
    length = q.shape[-2]
    slopes = torch.tensor(get_alibi_slopes(HEADS))
    positions = torch.arange(length)
    relative = (positions[None, :] - positions[:, None]).abs().neg().float()
    bias = slopes[:, None, None] * relative[None]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bias = bias.masked_fill(~causal, float("-inf"))
    return attend(q, k, v, bias[None])


@case(
    lambda n: (
        torch.randn(2, 6, n, 4),
        torch.ones(2, n, dtype=torch.long).index_fill(1, torch.tensor([0]), 0),
    )
)
def alibi_from_attention_mask_bloom(q, attention_mask):
    num_heads = q.shape[1]
    slopes = torch.tensor(get_alibi_slopes(num_heads), dtype=torch.float32)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    alibi = alibi.reshape(q.shape[0], num_heads, 1, q.shape[-2])
    scores = torch.baddbmm(
        alibi.flatten(0, 1).expand(-1, q.shape[-2], -1),
        q.flatten(0, 1),
        q.flatten(0, 1).transpose(-1, -2),
        beta=1.0,
        alpha=1 / math.sqrt(q.shape[-1]),
    )
    return scores.view_as(alibi.expand(-1, -1, q.shape[-2], -1)).softmax(-1)


@case(qkv)
def sliding_window_band_mask(q, k, v):
    window = 2
    length = q.shape[-2]
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    allowed = (j <= i) & (i - j < window)
    mask = torch.zeros(length, length).masked_fill(~allowed, float("-inf"))
    return attend(q, k, v, mask)


@case(lambda n: (torch.randn(2, n, HIDDEN), torch.ones(2, n, dtype=torch.long)))
def sliding_window_tril_triu_mistral(x, attention_mask):
    sliding_window = 3
    length = x.shape[1]
    minimum = torch.finfo(x.dtype).min
    causal = torch.full((length, length), fill_value=1)
    causal = causal.tril(diagonal=0)
    causal = causal.triu(diagonal=-sliding_window + 1)
    mask = torch.where(causal.bool() & attention_mask[:, None, None, :].bool(), 0.0, minimum)
    q = x.view(2, length, HEADS, HEAD_DIM).transpose(1, 2)
    return attend(q, q, q, mask)


@case(lambda n: (*qkv(n), torch.arange(n) < n - 1))
def sdpa_with_boolean_key_mask(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[None, None, None, :])


@case(qkv)
def sdpa_is_causal_with_scale(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)


@case(lambda n: (*qkv(n), torch.tensor([1.0, 0.0, 1.0, 0.5])))
def head_mask_multiplies_probabilities(q, k, v, head_mask):
    probs = (q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)).softmax(-1)
    head_mask = head_mask.unsqueeze(0).unsqueeze(-1).unsqueeze(-1)
    probs = probs * head_mask
    return probs @ v, probs


def relative_position_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class T5Bias(nn.Module):
    def __init__(self, bidirectional):
        super().__init__()
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(32, HEADS)

    def forward(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        buckets = relative_position_bucket(
            relative_position * 20,
            bidirectional=self.bidirectional,
            num_buckets=32,
            max_distance=128,
        )
        values = self.relative_attention_bias(buckets)
        return values.permute([2, 0, 1]).unsqueeze(0)


T5_ENCODER_BIAS = T5Bias(True)
T5_DECODER_BIAS = T5Bias(False)


@case(lambda n: (T5_ENCODER_BIAS, *qkv(n)))
def t5_relative_position_bias_bidirectional(bias, q, k, v):
    position_bias = bias(q.shape[-2], k.shape[-2])
    scores = q @ k.transpose(-1, -2) + position_bias
    return scores.softmax(-1) @ v, position_bias


@case(
    lambda n: (
        T5_DECODER_BIAS,
        torch.randn(2, HEADS, 1, HEAD_DIM),
        torch.randn(2, HEADS, n, HEAD_DIM),
    )
)
def t5_decoder_bias_last_query_only(bias, q, k):
    key_length = k.shape[-2]
    position_bias = bias(key_length, key_length)[:, :, -q.size(2) :, :]
    return (q @ k.transpose(-1, -2) + position_bias).softmax(-1)


class CrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.kv = nn.Linear(12, 2 * HIDDEN, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask):
        b, t, _ = hidden_states.shape
        q = self.q(hidden_states).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k, v = (
            self.kv(encoder_hidden_states)
            .view(b, -1, 2, HEADS, HEAD_DIM)
            .permute(2, 0, 3, 1, 4)
            .unbind(0)
        )
        mask = (1.0 - encoder_attention_mask[:, None, None, :].float()) * -10000.0
        return self.o(attend(q, k, v, mask).transpose(1, 2).flatten(2))


CROSS = CrossAttention()


@case(
    lambda n: (
        CROSS,
        torch.randn(2, n, HIDDEN),
        torch.randn(2, 5, 12),
        torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
    )
)
def cross_attention_over_encoder_states(attn, x, encoder_states, encoder_mask):
    return attn(x, encoder_states, encoder_mask)


@case(qkv)
def attention_logit_softcapping(q, k, v):
    softcap = 5.0
    scores = torch.matmul(q, k.transpose(2, 3)) * HEAD_DIM**-0.5
    scores = scores / softcap
    scores = torch.tanh(scores)
    scores = scores * softcap
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1) @ v


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class QKNormAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.q_norm = RMSNorm(HEAD_DIM)
        self.k_norm = RMSNorm(HEAD_DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, HEAD_DIM).unbind(2)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(k).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)


QK_NORM = QKNormAttention()


@case(lambda n: (QK_NORM, torch.randn(2, n, HIDDEN)))
def qk_norm_per_head(attn, x):
    return attn(x)


class StaticCache(nn.Module):
    def __init__(self, max_len=12):
        super().__init__()
        self.register_buffer("key_cache", torch.zeros(2, HEADS, max_len, HEAD_DIM))
        self.register_buffer("value_cache", torch.zeros(2, HEADS, max_len, HEAD_DIM))

    def update(self, key_states, value_states, cache_position):
        self.key_cache.index_copy_(2, cache_position, key_states)
        self.value_cache.index_copy_(2, cache_position, value_states)
        return self.key_cache, self.value_cache


@case(lambda n: (StaticCache(), *qkv(n)))
def static_kv_cache_index_copy(cache, q, k, v):
    first = torch.arange(q.shape[-2])
    keys, values = cache.update(k, v, first)
    mask = torch.full((q.shape[-2], keys.shape[-2]), float("-inf"))
    mask[:, : q.shape[-2]] = 0
    out = attend(q, keys, values, mask)
    step = torch.tensor([q.shape[-2]])
    keys, values = cache.update(k[:, :, -1:], v[:, :, -1:], step)
    return out, keys.sum(), cache.key_cache[:, :, : q.shape[-2] + 1]


class DynamicCache:
    def __init__(self):
        self.key_cache = []
        self.value_cache = []

    def get_seq_length(self, layer_idx=0):
        if len(self.key_cache) <= layer_idx:
            return 0
        return self.key_cache[layer_idx].shape[-2]

    def update(self, key_states, value_states, layer_idx):
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat(
                [self.value_cache[layer_idx], value_states], dim=-2
            )
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


@case(qkv)
def dynamic_cache_object_two_layers_two_steps(q, k, v):
    cache = DynamicCache()
    outputs = []
    for step in (slice(None, -1), slice(-1, None)):
        hidden = q[:, :, step]
        for layer_idx in range(2):
            past = cache.get_seq_length(layer_idx)
            keys, values = cache.update(k[:, :, step] * (layer_idx + 1), v[:, :, step], layer_idx)
            mask = make_causal_4d(
                torch.ones(2, keys.shape[-2], dtype=torch.long), q.dtype, past=past
            )
            hidden = attend(hidden, keys, values, mask)
        outputs.append(hidden)
    return torch.cat(outputs, dim=-2), cache.get_seq_length(1)


class Conv1D(nn.Module):
    """GPT-2's linear layer with a transposed weight."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, layer_idx, max_positions=16):
        super().__init__()
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.layer_idx = layer_idx
        self.scale_attn_by_inverse_layer_idx = True
        self.c_attn = Conv1D(3 * HIDDEN, HIDDEN)
        self.c_proj = Conv1D(HIDDEN, HIDDEN)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (HEADS, HEAD_DIM)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (HIDDEN,))

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
        )
        if self.scale_attn_by_inverse_layer_idx:
            attn_weights = attn_weights / float(self.layer_idx + 1)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full(
            [], mask_value, dtype=attn_weights.dtype, device=attn_weights.device
        )
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value), attn_weights

    def forward(self, hidden_states, layer_past=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(HIDDEN, dim=2)
        query, key, value = (
            self._split_heads(query),
            self._split_heads(key),
            self._split_heads(value),
        )
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache is True else None
        attn_output, _ = self._attn(query, key, value)
        return self.c_proj(self._merge_heads(attn_output)), present


GPT2_ATTENTION = GPT2Attention(layer_idx=1)


@case(lambda n: (GPT2_ATTENTION, torch.randn(2, n, HIDDEN)))
def gpt2_attention_conv1d_and_causal_buffer(attn, x):
    out, present = attn(x[:, :-1].contiguous(), use_cache=True)
    step, present = attn(x[:, -1:], layer_past=present, use_cache=True)
    return out, step, present[0].shape


class Embeddings(nn.Module):
    def __init__(self, vocab=20, max_positions=16, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, HIDDEN, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_positions, HIDDEN)
        self.token_type_embeddings = nn.Embedding(type_vocab, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer(
            "position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False
        )
        self.register_buffer(
            "token_type_ids",
            torch.zeros(self.position_ids.size(), dtype=torch.long),
            persistent=False,
        )

    def forward(self, input_ids, token_type_ids=None, past_key_values_length=0):
        seq_length = input_ids.size()[1]
        position_ids = self.position_ids[
            :, past_key_values_length : seq_length + past_key_values_length
        ]
        if token_type_ids is None:
            buffered = self.token_type_ids[:, :seq_length]
            token_type_ids = buffered.expand(input_ids.shape[0], seq_length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


EMBEDDINGS = Embeddings().eval()


@case(lambda n: (EMBEDDINGS, torch.randint(0, 20, (2, n))))
def bert_embeddings_buffered_ids(embeddings, input_ids):
    return embeddings(input_ids), embeddings(
        input_ids, token_type_ids=torch.ones_like(input_ids), past_key_values_length=2
    )


@case(qkv)
def prefix_lm_mask(q, k, v):
    prefix = 2
    length = q.shape[-2]
    causal = torch.tril(torch.ones(length, length, dtype=torch.bool))
    causal[:, :prefix] = True
    return attend(q, k, v, torch.zeros(length, length).masked_fill(~causal, -1e9))


@case(
    lambda n: (
        nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True).eval(),
        torch.randn(2, n, HIDDEN),
    )
)
def torch_multihead_attention_key_padding_mask(mha, x):
    pad = torch.zeros(2, x.shape[1], dtype=torch.bool)
    pad[1, -1] = True
    out, weights = mha(x, x, x, key_padding_mask=pad, need_weights=True)
    return out, weights


@case(qkv)
def chunked_attention_online_softmax(q, k, v):
    block = 2
    scale = q.shape[-1] ** -0.5
    row_max = torch.full(q.shape[:-1] + (1,), float("-inf"))
    row_sum = torch.zeros(q.shape[:-1] + (1,))
    acc = torch.zeros_like(q)
    for start in range(0, k.shape[-2], block):
        kb, vb = k[..., start : start + block, :], v[..., start : start + block, :]
        scores = (q @ kb.transpose(-1, -2)) * scale
        new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
        correction = torch.exp(row_max - new_max)
        p = torch.exp(scores - new_max)
        row_sum = row_sum * correction + p.sum(-1, keepdim=True)
        acc = acc * correction + p @ vb
        row_max = new_max
    return acc / row_sum


class EvalDropoutAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_dropout = nn.Dropout(0.2)
        self.resid_dropout = nn.Dropout(0.2)
        self.proj = nn.Linear(HEAD_DIM, HEAD_DIM)

    def forward(self, q, k, v, output_attentions=False):
        probs = self.attn_dropout((q @ k.transpose(-1, -2)).softmax(-1))
        out = self.resid_dropout(self.proj(probs @ v))
        outputs = (out, probs) if output_attentions else (out,)
        return outputs


EVAL_DROPOUT = EvalDropoutAttention().eval()


@case(lambda n: (EVAL_DROPOUT, *qkv(n)))
def dropout_in_eval_and_optional_attentions(attn, q, k, v):
    outputs = attn(q, k, v, output_attentions=True)
    plain = attn(q, k, v)
    return outputs[0] + plain[0], outputs[1:], len(plain)
