"""Inference and serving code of model libraries: paged, rolling, quantised and
attention-sink KV caches written by slot indices, rotary scaling schemes (linear, dynamic
NTK, YaRN, Llama 3), weight-only int8 and packed int4 matmuls, simulated tensor-parallel
splits, expert batching with a fixed capacity, Medusa heads, tree-attention masks from
parent indices, logit biases, stop sequences and returned log-probabilities."""

import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(42)
H, HD, BLOCK = 2, 4, 4


@case(
    lambda n: (
        torch.randn(8, BLOCK, H, HD),
        torch.tensor([[3, 1, 6], [0, 5, 2]]),
        torch.randn(2, H, HD),
        torch.tensor([n + 2, n]),
    )
)
def paged_kv_cache_gather_by_block_table(key_blocks, block_tables, query, context_lens):
    max_blocks = block_tables.shape[1]
    keys = key_blocks[block_tables].reshape(2, max_blocks * BLOCK, H, HD)
    scores = torch.einsum("bhd,bthd->bht", query, keys) / math.sqrt(HD)
    positions = torch.arange(max_blocks * BLOCK)
    scores = scores.masked_fill(
        positions[None, None, :] >= context_lens[:, None, None], float("-inf")
    )
    return scores.softmax(-1)


@case(lambda n: (torch.zeros(32, H, HD), torch.randn(n, H, HD), torch.arange(n) * 3 % 32))
def slot_mapping_writes_into_flat_cache(cache, new_keys, slot_mapping):
    cache.index_copy_(0, slot_mapping, new_keys)
    return cache.sum(), cache[slot_mapping[:2]]


@case(lambda n: (torch.zeros(2, H, 4, HD), torch.randn(2, H, 1, HD), n + 5))
def rolling_buffer_cache_write(cache, key, position):
    window = cache.shape[2]
    slot = torch.tensor([position % window])
    cache.index_copy_(2, slot, key)
    order = (torch.arange(window) + position + 1) % window
    return cache[:, :, order]


@case(lambda n: (torch.randn(2, H, 3 * n, HD),))
def attention_sink_cache_eviction(keys):
    sink, recent = 2, 4
    if keys.shape[2] > sink + recent:
        keys = torch.cat([keys[:, :, :sink], keys[:, :, -recent:]], dim=2)
    return keys


@case(lambda n: (torch.randn(2, H, n, HD),))
def int8_kv_cache_quantise_and_read(keys):
    scale = keys.abs().amax(dim=-1, keepdim=True) / 127.0
    quantised = torch.round(keys / scale.clamp(min=1e-8)).clamp(-128, 127).to(torch.int8)
    restored = quantised.to(torch.float32) * scale
    return quantised, (restored - keys).abs().max()


def rope_inv_freq(dim, base):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


@case(lambda n: (torch.randn(2, n, 8), 2.0))
def rope_linear_position_interpolation(x, factor):
    positions = torch.arange(x.shape[1]).float() / factor
    freqs = torch.outer(positions, rope_inv_freq(8, 10000.0))
    emb = torch.cat([freqs, freqs], dim=-1)
    x1, x2 = x.chunk(2, -1)
    return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


@case(lambda n: (torch.randn(2, 3 * n, 8),))
def rope_dynamic_ntk_scaling_by_length(x):
    dim, base, max_position, factor = 8, 10000.0, 8, 2.0
    seq_len = x.shape[1]
    if seq_len > max_position:
        base = base * ((factor * seq_len / max_position) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = rope_inv_freq(dim, base)
    freqs = torch.outer(torch.arange(seq_len).float(), inv_freq)
    return torch.cat([freqs, freqs], -1).cos() * x


def yarn_find_correction_range(low_rot, high_rot, dim, base, max_position):
    def correction_dim(num_rotations):
        return (dim * math.log(max_position / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = math.floor(correction_dim(low_rot))
    high = math.ceil(correction_dim(high_rot))
    return max(low, 0), min(high, dim - 1)


def linear_ramp_factor(low, high, dim):
    if low == high:
        high += 0.001
    linear_func = (torch.arange(dim, dtype=torch.float32) - low) / (high - low)
    return torch.clamp(linear_func, 0, 1)


@case(lambda n: (torch.randn(2, n, 16),))
def rope_yarn_blended_frequencies(x):
    dim, base, factor, original_max = 16, 10000.0, 4.0, 32
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    low, high = yarn_find_correction_range(32, 1, dim, base, original_max)
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2)
    inv_freq = (
        inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
        + inv_freq_extrapolation * inv_freq_extrapolation_factor
    )
    mscale = 0.1 * math.log(factor) + 1.0
    freqs = torch.outer(torch.arange(x.shape[1]).float(), inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    return x * emb.cos() * mscale, inv_freq


@case(lambda n: (torch.randn(2, n, 16),))
def rope_llama3_wavelength_smoothing(x):
    factor, low_freq_factor, high_freq_factor, old_context_len = 8.0, 1.0, 4.0, 64
    inv_freq = rope_inv_freq(16, 500000.0)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium, smoothed, inv_freq_llama)
    freqs = torch.outer(torch.arange(x.shape[1]).float(), inv_freq_llama)
    return x * torch.cat([freqs, freqs], -1).sin()


class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, linear):
        super().__init__()
        w = linear.weight.detach()
        scale = w.abs().amax(dim=1, keepdim=True) / 127.0
        self.register_buffer("weight_int8", torch.round(w / scale).to(torch.int8))
        self.register_buffer("scale", scale.squeeze(1))
        self.bias = linear.bias

    def forward(self, x):
        return F.linear(x, self.weight_int8.to(x.dtype)) * self.scale + self.bias


INT8 = Int8WeightOnlyLinear(nn.Linear(16, 8))


@case(lambda n: (INT8, torch.randn(2, n, 16)))
def int8_weight_only_linear(layer, x):
    return layer(x)


@case(
    lambda n: (
        torch.randint(0, 256, (8, 4), dtype=torch.uint8),
        torch.rand(8, 1) * 0.1,
        torch.randn(n, 8),
    )
)
def int4_unpack_nibbles_and_matmul(packed, scales, x):
    low = (packed & 0x0F).to(torch.int8) - 8
    high = (packed >> 4).to(torch.int8) - 8
    unpacked = torch.stack([low, high], dim=-1).reshape(8, 8)
    weight = unpacked.float() * scales
    return x @ weight.t()


@case(lambda n: (torch.randn(2, n, 16), torch.randn(32, 16), torch.randn(16, 32)))
def tensor_parallel_column_then_row_split(x, w_up, w_down):
    world_size = 2
    up_shards = w_up.chunk(world_size, dim=0)
    down_shards = w_down.chunk(world_size, dim=1)
    partials = [F.gelu(x @ up.t()) @ down.t() for up, down in zip(up_shards, down_shards)]
    reduced = torch.stack(partials).sum(0)  # what the all-reduce sums
    return reduced, F.gelu(x @ w_up.t()) @ w_down.t()


@case(lambda n: (torch.randn(2 * n, 8), torch.randn(4, 8, 8), torch.randn(2 * n, 4)))
def experts_batched_with_fixed_capacity(tokens, expert_weights, router_logits):
    num_experts, capacity = 4, tokens.shape[0] // 2
    probs = router_logits.softmax(-1)
    expert_idx = probs.argmax(-1)
    one_hot = F.one_hot(expert_idx, num_experts)
    position = (one_hot.cumsum(0) - 1) * one_hot
    keep = (position < capacity) & one_hot.bool()
    slot = position.amax(-1).clamp(max=capacity - 1)
    dispatch = F.one_hot(slot, capacity)[:, None, :] * keep[..., None]
    expert_inputs = torch.einsum("tec,td->ecd", dispatch.float(), tokens)
    expert_outputs = torch.bmm(expert_inputs, expert_weights)
    combined = torch.einsum("tec,ecd->td", dispatch.float() * probs[..., None], expert_outputs)
    return combined, keep.sum(0)


class MedusaHeads(nn.Module):
    def __init__(self, num_heads=3, vocab=20):
        super().__init__()
        self.heads = nn.ModuleList(
            nn.Sequential(nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, vocab))
            for _ in range(num_heads)
        )

    def forward(self, hidden):
        return torch.stack([head(hidden + 0) for head in self.heads], dim=0)


MEDUSA = MedusaHeads()


@case(lambda n: (MEDUSA, torch.randn(2, n, 16)))
def medusa_heads_top_candidates(heads, hidden):
    logits = heads(hidden[:, -1])
    top = logits.topk(2, dim=-1).indices
    return logits, top.permute(1, 0, 2).reshape(2, -1)


@case(lambda n: (torch.tensor([-1, 0, 0, 1, 1, 2][: n + 2]),))
def tree_attention_mask_from_parents(parents):
    size = parents.shape[0]
    has_parent = parents >= 0
    adjacency = F.one_hot(parents.clamp(min=0), size).float() * has_parent[:, None]
    ancestors = torch.eye(size)
    reach = torch.eye(size)
    for _ in range(size):
        reach = reach @ adjacency
        ancestors = ancestors + reach
    return ancestors.clamp(max=1).bool()


@case(lambda n: (torch.randn(2, 20), {5: -100.0, 7: 2.5, 11: -1.0}))
def logit_bias_from_python_dict(scores, logit_bias):
    token_ids = torch.tensor(list(logit_bias.keys()))
    biases = torch.tensor(list(logit_bias.values()))
    scores = scores.clone()
    scores[:, token_ids] += biases
    return scores


@case(lambda n: (torch.randint(0, 6, (3, n + 3)), [[2, 3], [4, 1, 5]]))
def stop_sequences_matched_at_the_end(input_ids, stop_sequences):
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for stop in stop_sequences:
        stop_ids = torch.tensor(stop)
        tail = input_ids[:, -len(stop) :]
        done = done | (tail == stop_ids).all(-1)
    return done


@case(lambda n: (torch.randn(2, n, 20), torch.randint(0, 20, (2, n))))
def returned_logprobs_with_top_alternatives(logits, chosen):
    logprobs = logits.log_softmax(-1)
    chosen_logprobs = logprobs.gather(-1, chosen[..., None]).squeeze(-1)
    top_logprobs, top_ids = logprobs.topk(5, dim=-1)
    ranks = (logprobs > chosen_logprobs[..., None]).sum(-1) + 1
    return {
        "token_logprobs": chosen_logprobs,
        "top_logprobs": top_logprobs,
        "top_ids": top_ids,
        "rank": ranks,
    }
