"""Whole small architectures and the distinctive pieces of model families: a Llama-style
decoder with a legacy tuple cache, BERT, T5 position-bias reuse, ALBERT's shared layers,
CLIP's end-of-text pooling, Whisper's conv stem, state-space and linear-attention
recurrences (Mamba's reference scan, RWKV token shift, RetNet decay, FFT long convolution),
diffusion pieces (timestep embeddings, adaLN modulation, a UNet with skip lists, scheduler
steps, classifier-free guidance), VAE and VQ bottlenecks, detection box utilities,
soft-argmax keypoints, a text CNN, a bidirectional GRU, a pointer-generator and a CRF."""

import copy
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(39)
D, H = 16, 4
HD = D // H


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(D)
        self.post_attention_layernorm = RMSNorm(D)
        self.q_proj = nn.Linear(D, D, bias=False)
        self.kv_proj = nn.Linear(D, 2 * HD * 2, bias=False)
        self.o_proj = nn.Linear(D, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * 24, bias=False)
        self.down = nn.Linear(24, D, bias=False)

    def forward(self, x, cos, sin, mask, past_key_value=None):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, H, HD).transpose(1, 2)
        k, v = self.kv_proj(h).view(b, t, 2, 2, HD).permute(2, 0, 3, 1, 4)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)
            v = torch.cat([past_key_value[1], v], dim=2)
        present = (k, v)
        k = k.repeat_interleave(2, dim=1)
        v = v.repeat_interleave(2, dim=1)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, D))
        gate, up = self.gate_up(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up), present


class TinyLlama(nn.Module):
    def __init__(self, vocab=24, layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, D)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(layers))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, vocab, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        t = input_ids.shape[1]
        past_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        position_ids = torch.arange(past_length, past_length + t)
        freqs = position_ids[:, None].float() * self.inv_freq[None]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        total = past_length + t
        mask = torch.ones(t, total, dtype=torch.bool).tril(diagonal=past_length)
        x = self.embed_tokens(input_ids)
        next_cache = () if use_cache else None
        for i, layer in enumerate(self.layers):
            past = past_key_values[i] if past_key_values is not None else None
            x, present = layer(x, cos, sin, mask, past)
            if use_cache:
                next_cache += (present,)
        return self.lm_head(self.norm(x)), next_cache


LLAMA = TinyLlama()


@case(lambda n: (LLAMA, torch.randint(0, 24, (2, n))))
def llama_prefill_then_decode_with_tuple_cache(model, input_ids):
    logits, cache = model(input_ids[:, :-1])
    step_logits, cache = model(input_ids[:, -1:], past_key_values=cache)
    full, _ = model(input_ids, use_cache=False)
    return logits, step_logits, full[:, -1:], len(cache), cache[0][0].shape


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.attention_output = nn.Linear(D, D)
        self.attention_norm = nn.LayerNorm(D, eps=1e-12)
        self.intermediate = nn.Linear(D, 4 * D)
        self.output = nn.Linear(4 * D, D)
        self.output_norm = nn.LayerNorm(D, eps=1e-12)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (H, HD)).permute(0, 2, 1, 3)  # noqa: RUF005 - BERT's form

    def forward(self, hidden_states, extended_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HD) + extended_mask
        context = torch.matmul(nn.functional.softmax(scores, dim=-1), v)
        context = context.permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size()[:-2] + (D,))  # noqa: RUF005
        attention = self.attention_norm(self.attention_output(context) + hidden_states)
        return self.output_norm(self.output(F.gelu(self.intermediate(attention))) + attention)


BERT = nn.ModuleList(BertLayer() for _ in range(2))


@case(lambda n: (BERT, torch.randn(2, n, D), torch.tensor([[1] * 8, [1] * 3 + [0] * 5])))
def bert_encoder_with_extended_mask(layers, x, attention_mask):
    mask = attention_mask[:, : x.shape[1]]
    extended = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
    all_hidden = (x,)
    for layer in layers:
        x = layer(x, extended)
        all_hidden = all_hidden + (x,)  # noqa: RUF005 - Hugging Face's form
    return x, all_hidden


class T5Attention(nn.Module):
    def __init__(self, has_relative_attention_bias):
        super().__init__()
        self.has_relative_attention_bias = has_relative_attention_bias
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(8, H)

    def compute_bias(self, length):
        pos = torch.arange(length)
        relative = (pos[None, :] - pos[:, None]).clamp(-4, 3) + 4
        return self.relative_attention_bias(relative).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x, position_bias=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, HD).permute(2, 0, 3, 1, 4)
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, H, t, t), dtype=x.dtype)
            else:
                position_bias = self.compute_bias(t)
        scores = q @ k.transpose(-1, -2) + position_bias  # T5: no 1/sqrt(d) scaling
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, D)
        return self.o(out), position_bias


T5_LAYERS = nn.ModuleList([T5Attention(i == 0) for i in range(3)])


@case(lambda n: (T5_LAYERS, torch.randn(2, n, D)))
def t5_position_bias_computed_once_and_reused(layers, x):
    position_bias = None
    for layer in layers:
        out, position_bias = layer(x, position_bias)
        x = x + out
    return x, position_bias


class AlbertTransformer(nn.Module):
    def __init__(self, num_hidden_layers=4, num_hidden_groups=2):
        super().__init__()
        self.num_hidden_layers = num_hidden_layers
        self.num_hidden_groups = num_hidden_groups
        self.embedding_hidden_mapping_in = nn.Linear(8, D)
        self.groups = nn.ModuleList(
            nn.Sequential(nn.Linear(D, D), nn.GELU()) for _ in range(num_hidden_groups)
        )

    def forward(self, x):
        x = self.embedding_hidden_mapping_in(x)
        for i in range(self.num_hidden_layers):
            group_idx = int(i / (self.num_hidden_layers / self.num_hidden_groups))
            x = x + self.groups[group_idx](x)
        return x


ALBERT = AlbertTransformer()


@case(lambda n: (ALBERT, torch.randn(2, n, 8)))
def albert_shared_layer_groups(model, x):
    return model(x)


@case(
    lambda n: (
        nn.Embedding(30, D),
        torch.randint(1, 28, (2, n)).index_fill(1, torch.tensor([2]), 29),
    )
)
def clip_text_pooled_at_end_of_text_token(embed, input_ids):
    hidden = embed(input_ids)
    t = input_ids.shape[1]
    causal = torch.full((t, t), float("-inf")).triu(1)
    scores = (hidden @ hidden.transpose(1, 2)) / math.sqrt(D) + causal
    hidden = scores.softmax(-1) @ hidden
    pooled = hidden[torch.arange(hidden.shape[0]), input_ids.to(dtype=torch.int).argmax(dim=-1)]
    return pooled


class WhisperStem(nn.Module):
    def __init__(self, num_mel_bins=6, max_source_positions=32):
        super().__init__()
        self.conv1 = nn.Conv1d(num_mel_bins, D, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(D, D, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(max_source_positions, D)
        self.embed_positions.requires_grad_(False)

    def forward(self, input_features):
        inputs_embeds = F.gelu(self.conv1(input_features))
        inputs_embeds = F.gelu(self.conv2(inputs_embeds)).permute(0, 2, 1)
        embed_pos = self.embed_positions.weight[: inputs_embeds.shape[1]]
        return inputs_embeds + embed_pos


WHISPER = WhisperStem()


@case(lambda n: (WHISPER, torch.randn(2, 6, 4 * n)))
def whisper_conv_stem_and_positions(stem, features):
    return stem(features)


@case(
    lambda n: (
        torch.randn(2, n, 4),
        torch.randn(4, 3),
        torch.randn(2, n, 3),
        torch.randn(2, n, 3),
        torch.rand(2, n, 4),
    )
)
def mamba_selective_scan_reference(u, A, B, C_, delta):
    # selective_scan_ref: a recurrence over the (fixed) sequence length
    deltaA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
    deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
    x = A.new_zeros((u.shape[0], u.shape[2], A.shape[1]))
    ys = []
    for i in range(u.shape[1]):
        x = deltaA[:, i] * x + deltaB_u[:, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C_[:, i]))
    return torch.stack(ys, dim=1), x


class RWKVTimeMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_mix_k = nn.Parameter(torch.rand(1, 1, D))
        self.time_mix_r = nn.Parameter(torch.rand(1, 1, D))
        self.key = nn.Linear(D, D, bias=False)
        self.receptance = nn.Linear(D, D, bias=False)

    def forward(self, x):
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)
        k = self.key(xk).clamp(max=30).exp()
        wkv = k.cumsum(1) / (k.cumsum(1) + 1)
        return torch.sigmoid(self.receptance(xr)) * wkv


RWKV = RWKVTimeMix()


@case(lambda n: (RWKV, torch.randn(2, n, D)))
def rwkv_token_shift_time_mixing(block, x):
    return block(x)


@case(lambda n: (torch.randn(2, H, n, HD), torch.randn(2, H, n, HD), torch.randn(2, H, n, HD)))
def retnet_decay_mask_retention(q, k, v):
    t = q.shape[2]
    decay = torch.log(1 - 2 ** (-5 - torch.arange(H, dtype=torch.float)))
    index = torch.arange(t).float()
    mask = torch.tril(torch.ones(t, t))
    mask = torch.masked_fill(index[:, None] - index[None, :], ~mask.bool(), float("inf"))
    mask = torch.exp(mask * decay[:, None, None])
    mask = torch.nan_to_num(mask)
    mask = mask / mask.sum(dim=-1, keepdim=True).sqrt()
    retention = (q @ k.transpose(-1, -2)) * mask
    retention = retention / retention.detach().abs().sum(dim=-1, keepdim=True).clamp(min=1)
    return retention @ v


@case(lambda n: (torch.randn(2, D, 3 * n), torch.randn(D, 3 * n)))
def long_convolution_by_fft(u, k):
    seqlen = u.shape[-1]
    fft_size = 2 * seqlen
    k_f = torch.fft.rfft(k, n=fft_size) / fft_size
    u_f = torch.fft.rfft(u, n=fft_size)
    y = torch.fft.irfft(u_f * k_f, n=fft_size, norm="forward")[..., :seqlen]
    return y + u


@case(lambda n: (torch.randn(2, n, D), torch.randn(2, n, D), torch.randn(2, n, D)))
def causal_linear_attention_elu_feature_map(q, k, v):
    q, k = F.elu(q) + 1, F.elu(k) + 1
    kv = torch.einsum("bnd,bne->bnde", k, v).cumsum(1)
    z = 1 / (torch.einsum("bnd,bnd->bn", q, k.cumsum(1)) + 1e-6)
    return torch.einsum("bnd,bnde,bn->bne", q, kv, z)


class GatedCrossAttention(nn.Module):
    """Flamingo: tanh-gated cross-attention, the gate starting closed at zero."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.attn_gate = nn.Parameter(torch.tensor([0.3]))
        self.ff = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, D), nn.GELU())
        self.ff_gate = nn.Parameter(torch.tensor([-0.2]))

    def forward(self, x, media):
        attended, _ = self.attn(x, media, media, need_weights=False)
        x = x + attended * self.attn_gate.tanh()
        return x + self.ff(x) * self.ff_gate.tanh()


GATED = GatedCrossAttention().eval()


@case(lambda n: (GATED, torch.randn(2, n, D), torch.randn(2, 3, D)))
def gated_cross_attention_to_media(block, x, media):
    return block(x, media)


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
    )
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(D, 2 * D), nn.GELU(approximate="tanh"), nn.Linear(2 * D, D)
        )
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 4 * D))
        self.t_embedder = nn.Sequential(nn.Linear(D, D), nn.SiLU(), nn.Linear(D, D))

    def forward(self, x, t):
        c = self.t_embedder(timestep_embedding(t, D))
        shift_msa, scale_msa, shift_mlp, scale_mlp = self.adaLN_modulation(c).chunk(4, dim=1)
        h = modulate(self.norm1(x), shift_msa, scale_msa)
        x = x + h.softmax(1)
        return x + self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


DIT = DiTBlock()


@case(lambda n: (DIT, torch.randn(2, n, D), torch.tensor([3, 999])))
def dit_adaln_modulation_from_timestep(block, x, t):
    return block(x, t)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = nn.GroupNorm(2, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = nn.Linear(D, cout)
        self.norm2 = nn.GroupNorm(2, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(3, 4, 3, padding=1)
        self.down = nn.ModuleList([ResBlock(4, 4), ResBlock(4, 8)])
        self.mid = ResBlock(8, 8)
        self.up = nn.ModuleList([ResBlock(16, 8), ResBlock(12, 4)])
        self.conv_out = nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, sample, timesteps):
        temb = timestep_embedding(timesteps, D)
        h = self.conv_in(sample)
        skips = []
        for block in self.down:
            h = block(h, temb)
            skips.append(h)
            h = F.avg_pool2d(h, 2)
        h = self.mid(h, temb)
        for block in self.up:
            h = F.interpolate(h, scale_factor=2.0, mode="nearest")
            h = block(torch.cat([h, skips.pop()], dim=1), temb)
        return self.conv_out(h)


UNET = TinyUNet()


@case(lambda n: (UNET, torch.randn(1, 3, 4 * n, 4 * n), torch.tensor([10])))
def unet_skip_connections_popped_in_reverse(unet, sample, t):
    return unet(sample, t)


@case(lambda n: (UNET, torch.randn(1, 3, 4 * n, 4 * n), torch.tensor([500]), torch.randn(1, 8)))
def classifier_free_guidance_batched(unet, latents, t, text_embedding):
    guidance_scale = 7.5
    latent_model_input = torch.cat([latents] * 2)
    noise_pred = unet(latent_model_input, t.expand(2)) * (1 + text_embedding.mean())
    noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
    return noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond)


class DDIMScheduler(nn.Module):
    def __init__(self, num_train_timesteps=1000):
        super().__init__()
        betas = torch.linspace(0.0001, 0.02, num_train_timesteps, dtype=torch.float32)
        self.register_buffer("alphas_cumprod", torch.cumprod(1.0 - betas, dim=0))
        self.final_alpha_cumprod = torch.tensor(1.0)

    def step(self, model_output, timestep, prev_timestep, sample, eta=0.0):
        alpha_prod_t = self.alphas_cumprod[timestep]
        alpha_prod_t_prev = (
            self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod
        )
        beta_prod_t = 1 - alpha_prod_t
        pred_original_sample = (sample - beta_prod_t ** (0.5) * model_output) / alpha_prod_t ** (
            0.5
        )
        pred_original_sample = pred_original_sample.clamp(-1, 1)
        variance = (
            (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * (1 - alpha_prod_t / alpha_prod_t_prev)
        )
        std_dev_t = eta * variance ** (0.5)
        direction = (1 - alpha_prod_t_prev - std_dev_t**2) ** (0.5) * model_output
        return alpha_prod_t_prev ** (0.5) * pred_original_sample + direction


SCHEDULER = DDIMScheduler()


@case(lambda n: (SCHEDULER, torch.randn(1, 3, n, n), torch.randn(1, 3, n, n)))
def ddim_scheduler_steps_over_python_timesteps(scheduler, model_output, sample):
    for timestep, prev in ((900, 600), (600, 300), (300, -1)):
        sample = scheduler.step(model_output * (timestep / 1000), timestep, prev, sample)
    return sample


@case(lambda n: (nn.Linear(D, 2 * 4), torch.randn(n, D), torch.randn(n, 4)))
def vae_reparameterise_and_kl(encoder, x, eps):
    mean, logvar = encoder(x).chunk(2, dim=-1)
    logvar = torch.clamp(logvar, -30.0, 20.0)
    std = torch.exp(0.5 * logvar)
    z = mean + std * eps
    kl = 0.5 * torch.sum(torch.pow(mean, 2) + torch.exp(logvar) - 1.0 - logvar, dim=-1)
    return z, kl.mean()


class VectorQuantizer(nn.Module):
    def __init__(self, n_e=10, e_dim=4, beta=0.25):
        super().__init__()
        self.beta = beta
        self.embedding = nn.Embedding(n_e, e_dim)

    def forward(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()
        z_flattened = z.view(-1, z.shape[-1])
        d = (
            torch.sum(z_flattened**2, dim=1, keepdim=True)
            + torch.sum(self.embedding.weight**2, dim=1)
            - 2 * torch.einsum("bd,dn->bn", z_flattened, self.embedding.weight.t())
        )
        min_encoding_indices = torch.argmin(d, dim=1)
        z_q = self.embedding(min_encoding_indices).view(z.shape)
        loss = self.beta * torch.mean((z_q.detach() - z) ** 2) + torch.mean((z_q - z.detach()) ** 2)
        z_q = z + (z_q - z).detach()
        perplexity_probs = F.one_hot(min_encoding_indices, 10).float().mean(0)
        perplexity = torch.exp(-torch.sum(perplexity_probs * torch.log(perplexity_probs + 1e-10)))
        return z_q.permute(0, 3, 1, 2), loss, perplexity


VQ = VectorQuantizer()


@case(lambda n: (VQ, torch.randn(2, 4, n, n, requires_grad=True)))
def vector_quantizer_straight_through(vq, z):
    return vq(z)


def box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(-1)
    return torch.stack([(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)], dim=-1)


def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def generalized_box_iou(boxes1, boxes2):
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    iou = inter / union
    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    area = wh[:, :, 0] * wh[:, :, 1]
    return iou - (area - union) / area


@case(lambda n: (torch.rand(n, 4) * 0.5 + 0.25, torch.rand(3, 4) * 0.5 + 0.25, torch.randn(n, 5)))
def detr_matching_cost_matrix(pred_boxes, tgt_boxes, pred_logits):
    tgt_ids = torch.tensor([0, 3, 1])
    out_prob = pred_logits.softmax(-1)
    cost_class = -out_prob[:, tgt_ids]
    cost_bbox = torch.cdist(pred_boxes, tgt_boxes, p=1)
    cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(pred_boxes), box_cxcywh_to_xyxy(tgt_boxes))
    return 5 * cost_bbox + 1 * cost_class + 2 * cost_giou


@case(lambda n: (torch.rand(n, 4) * 10, torch.randn(n, 4)))
def box_coder_decode_with_clamped_sizes(anchors, deltas):
    weights = (10.0, 10.0, 5.0, 5.0)
    bbox_xform_clip = math.log(1000.0 / 16)
    anchors = torch.cat([anchors[:, :2], anchors[:, :2] + anchors[:, 2:] + 1], dim=1)
    widths = anchors[:, 2] - anchors[:, 0]
    heights = anchors[:, 3] - anchors[:, 1]
    ctr_x = anchors[:, 0] + 0.5 * widths
    ctr_y = anchors[:, 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx, dy = deltas[:, 0::4] / wx, deltas[:, 1::4] / wy
    dw = torch.clamp(deltas[:, 2::4] / ww, max=bbox_xform_clip)
    dh = torch.clamp(deltas[:, 3::4] / wh, max=bbox_xform_clip)
    pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
    pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
    pred_w = torch.exp(dw) * widths[:, None]
    pred_h = torch.exp(dh) * heights[:, None]
    c_to_c_h = torch.tensor(0.5) * pred_h
    c_to_c_w = torch.tensor(0.5) * pred_w
    return torch.stack(
        (
            pred_ctr_x - c_to_c_w,
            pred_ctr_y - c_to_c_h,
            pred_ctr_x + c_to_c_w,
            pred_ctr_y + c_to_c_h,
        ),
        dim=2,
    ).flatten(1)


@case(lambda n: (torch.randn(2, 5, n, n),))
def soft_argmax_keypoints_from_heatmaps(heatmaps):
    b, k, h, w = heatmaps.shape
    probs = heatmaps.flatten(2).mul(10.0).softmax(-1).view(b, k, h, w)
    xs = torch.linspace(0, w - 1, w)
    ys = torch.linspace(0, h - 1, h)
    x = (probs.sum(2) * xs).sum(-1)
    y = (probs.sum(3) * ys).sum(-1)
    confidence = heatmaps.flatten(2).amax(-1)
    return torch.stack([x, y], dim=-1), confidence


@case(lambda n: (torch.randn(2, 3, 2 * n, 2 * n), torch.randint(0, 3, (2, 4 * n, 4 * n))))
def segmentation_upsampled_logits_and_mean_iou(logits_, labels):
    upsampled = F.interpolate(logits_, size=labels.shape[-2:], mode="bilinear", align_corners=False)
    loss = F.cross_entropy(upsampled, labels, ignore_index=255)
    pred = upsampled.argmax(1)
    pred_1h = F.one_hot(pred, 3).flatten(0, 2)
    label_1h = F.one_hot(labels, 3).flatten(0, 2)
    intersection = (pred_1h & label_1h).sum(0)
    union = (pred_1h | label_1h).sum(0)
    return loss, (intersection / union.clamp(min=1)).mean()


class TextCNN(nn.Module):
    def __init__(self, vocab=30, widths=(2, 3, 4)):
        super().__init__()
        self.embedding = nn.Embedding(vocab, D)
        self.convs = nn.ModuleList(nn.Conv1d(D, 6, w) for w in widths)
        self.fc = nn.Linear(6 * len(widths), 2)

    def forward(self, ids):
        x = self.embedding(ids).transpose(1, 2)
        pooled = [F.relu(conv(x)).max(dim=2).values for conv in self.convs]
        return self.fc(torch.cat(pooled, dim=1))


TEXT_CNN = TextCNN()


@case(lambda n: (TEXT_CNN, torch.randint(0, 30, (2, n + 2))))
def text_cnn_max_over_time_pooling(model, ids):
    return model(ids)


BIGRU = nn.GRU(D, 8, batch_first=True, bidirectional=True)


# (a deep copy, as the test's eager copy is one: an RNN's deepcopy reorders its __dict__)
# known capture limitation: the RNN modules call weak references to their flat weights
# ("call to <weakref ...>"), a graph break (see vision_audio.lstm_with_initial_state)
@case(lambda n: (copy.deepcopy(BIGRU), torch.randn(2, n, D)), expect="any")
def bidirectional_gru_final_states_concatenated(gru, x):
    output, h_n = gru(x)
    final = torch.cat([h_n[-2], h_n[-1]], dim=-1)
    return output, final


@case(
    lambda n: (
        torch.randn(2, 20),
        torch.randn(2, n).softmax(-1),
        torch.randint(0, 25, (2, n)),
        torch.rand(2, 1),
    )
)
def pointer_generator_copy_distribution(vocab_logits, attention, source_ids, p_gen):
    extended_vocab = 25
    vocab_dist = p_gen * vocab_logits.softmax(-1)
    vocab_dist = F.pad(vocab_dist, (0, extended_vocab - vocab_dist.shape[-1]))
    copy_dist = torch.zeros(2, extended_vocab).scatter_add(1, source_ids, (1 - p_gen) * attention)
    final = vocab_dist + copy_dist
    return final, final.sum(-1)


@case(
    lambda n: (torch.randn(2, n, 5), torch.randn(5, 5), torch.tensor([[1] * 8, [1] * 2 + [0] * 6]))
)
def crf_forward_algorithm_log_partition(emissions, transitions, mask):
    mask = mask[:, : emissions.shape[1]].bool()
    score = emissions[:, 0]
    for i in range(1, emissions.shape[1]):
        next_score = torch.logsumexp(
            score[:, :, None] + transitions + emissions[:, i, None, :], dim=1
        )
        score = torch.where(mask[:, i, None], next_score, score)
    return torch.logsumexp(score, dim=1)


@case(lambda n: (torch.randn(2 * n, 8), torch.arange(2 * n) % 3))
def supervised_contrastive_loss(features, labels):
    temperature = 0.1
    features = F.normalize(features, dim=-1)
    mask = torch.eq(labels[:, None], labels[None, :]).float()
    logits_ = features @ features.T / temperature
    logits_max, _ = torch.max(logits_, dim=1, keepdim=True)
    logits_ = logits_ - logits_max.detach()
    logits_mask = 1 - torch.eye(features.shape[0])
    mask = mask * logits_mask
    exp_logits = torch.exp(logits_) * logits_mask
    log_prob = logits_ - torch.log(exp_logits.sum(1, keepdim=True))
    mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1).clamp(min=1)
    return -mean_log_prob_pos.mean()
