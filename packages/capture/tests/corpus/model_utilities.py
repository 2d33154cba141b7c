"""Utilities and heads of model libraries: shifting and position ids from token ids,
task heads with their losses (token classification, question answering, multiple choice,
masked LM), poolers, parallel-residual blocks, learned query latents, LoRA adapters
(unmerged, merged under no_grad, chosen by name), gradient checkpointing off in eval,
weight initialisation through ``Module.apply``, parameter counting and freezing, fake
quantisation, cache cropping and speculative-decoding acceptance."""

import copy
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn
from torch.utils.checkpoint import checkpoint

PROGRAMS, case = registry()


torch.manual_seed(38)
D, VOCAB, PAD = 16, 20, 1


def ids(n):
    input_ids = torch.randint(2, VOCAB, (2, n))
    input_ids[1, -2:] = PAD
    return (input_ids,)


def shift_tokens_right(input_ids, pad_token_id, decoder_start_token_id):
    shifted_input_ids = input_ids.new_zeros(input_ids.shape)
    shifted_input_ids[:, 1:] = input_ids[:, :-1].clone()
    shifted_input_ids[:, 0] = decoder_start_token_id
    shifted_input_ids.masked_fill_(shifted_input_ids == -100, pad_token_id)
    return shifted_input_ids


@case(lambda n: (torch.randint(0, VOCAB, (2, n)).index_fill(1, torch.tensor([0]), -100),))
def shift_tokens_right_for_decoder_inputs(labels):
    return shift_tokens_right(labels, PAD, 0)


def create_position_ids_from_input_ids(input_ids, padding_idx, past_key_values_length=0):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = (torch.cumsum(mask, dim=1).type_as(mask) + past_key_values_length) * mask
    return incremental_indices.long() + padding_idx


@case(ids)
def position_ids_from_input_ids_skip_padding(input_ids):
    return create_position_ids_from_input_ids(input_ids, PAD), create_position_ids_from_input_ids(
        input_ids, PAD, 3
    )


class SinusoidalPositionalEmbedding(nn.Embedding):
    """Marian's fixed sinusoidal table, built once and read by position."""

    def __init__(self, num_positions, embedding_dim):
        super().__init__(num_positions, embedding_dim)
        self.weight = self._init_weight(self.weight)

    @staticmethod
    def _init_weight(out):
        n_pos, dim = out.shape
        position_enc = torch.tensor(
            [
                [pos / math.pow(10000, 2 * (j // 2) / dim) for j in range(dim)]
                for pos in range(n_pos)
            ]
        )
        out.requires_grad = False
        sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
        with torch.no_grad():
            out[:, 0:sentinel] = torch.sin(position_enc[:, 0::2])
            out[:, sentinel:] = torch.cos(position_enc[:, 1::2])
        out.detach_()
        return nn.Parameter(out, requires_grad=False)

    @torch.no_grad()
    def forward(self, input_ids_shape, past_key_values_length=0):
        _, seq_len = input_ids_shape[:2]
        positions = torch.arange(
            past_key_values_length, past_key_values_length + seq_len, dtype=torch.long
        )
        return super().forward(positions)


SINUSOIDAL = SinusoidalPositionalEmbedding(16, D)


@case(lambda n: (SINUSOIDAL, torch.randn(2, n, D)))
def sinusoidal_positions_by_shape_under_no_grad(embed, x):
    return x + embed(x.shape), embed(x.shape, past_key_values_length=2)[0]


class TokenClassificationHead(nn.Module):
    def __init__(self, num_labels=5):
        super().__init__()
        self.num_labels = num_labels
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(D, num_labels)

    def forward(self, sequence_output, attention_mask, labels):
        logits = self.classifier(self.dropout(sequence_output))
        active_loss = attention_mask.view(-1) == 1
        active_logits = logits.view(-1, self.num_labels)
        active_labels = torch.where(
            active_loss, labels.view(-1), torch.tensor(-100).type_as(labels)
        )
        return F.cross_entropy(active_logits, active_labels), logits


TOKEN_HEAD = TokenClassificationHead().eval()


@case(
    lambda n: (
        TOKEN_HEAD,
        torch.randn(2, n, D),
        (ids(n)[0] != PAD).long(),
        torch.randint(0, 5, (2, n)),
    )
)
def token_classification_active_loss(head, hidden, attention_mask, labels):
    return head(hidden, attention_mask, labels)


class QAHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.qa_outputs = nn.Linear(D, 2)

    def forward(self, sequence_output, start_positions=None, end_positions=None):
        logits = self.qa_outputs(sequence_output)
        start_logits, end_logits = logits.split(1, dim=-1)
        start_logits = start_logits.squeeze(-1).contiguous()
        end_logits = end_logits.squeeze(-1).contiguous()
        total_loss = None
        if start_positions is not None and end_positions is not None:
            if len(start_positions.size()) > 1:
                start_positions = start_positions.squeeze(-1)
            if len(end_positions.size()) > 1:
                end_positions = end_positions.squeeze(-1)
            ignored_index = start_logits.size(1)
            start_positions = start_positions.clamp(0, ignored_index)
            end_positions = end_positions.clamp(0, ignored_index)
            loss_fct = nn.CrossEntropyLoss(ignore_index=ignored_index)
            total_loss = (
                loss_fct(start_logits, start_positions) + loss_fct(end_logits, end_positions)
            ) / 2
        return total_loss, start_logits, end_logits


QA = QAHead()


@case(lambda n: (QA, torch.randn(2, n, D), torch.tensor([[1], [50]]), torch.tensor([[2], [n - 1]])))
def question_answering_span_loss_clamped_positions(head, hidden, start, end):
    loss, start_logits, end_logits = head(hidden, start, end)
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    valid = torch.ones_like(scores, dtype=torch.bool).triu()
    best = scores.masked_fill(~valid, -1e4).flatten(1).argmax(-1)
    return loss, best // scores.shape[-1], best % scores.shape[-1]


@case(lambda n: (nn.Linear(D, 1), torch.randn(2, 3, n, D), torch.tensor([2, 0])))
def multiple_choice_flatten_and_reshape(scorer, choices, labels):
    num_choices = choices.shape[1]
    flat = choices.view(-1, choices.size(-2), choices.size(-1))
    pooled = torch.tanh(flat[:, 0])
    reshaped_logits = scorer(pooled).view(-1, num_choices)
    return F.cross_entropy(reshaped_logits, labels), reshaped_logits


class MLMHead(nn.Module):
    def __init__(self, embeddings):
        super().__init__()
        self.dense = nn.Linear(D, D)
        self.layer_norm = nn.LayerNorm(D)
        self.decoder = nn.Linear(D, VOCAB)
        self.decoder.weight = embeddings.weight
        self.bias = nn.Parameter(torch.zeros(VOCAB))
        self.decoder.bias = self.bias

    def forward(self, features):
        x = self.layer_norm(F.gelu(self.dense(features)))
        return self.decoder(x)


MLM_EMBED = nn.Embedding(VOCAB, D)
MLM = MLMHead(MLM_EMBED)


@case(lambda n: (MLM_EMBED, MLM, *ids(n), torch.rand(2, n), torch.rand(2, n)))
def masked_lm_collator_masking_and_loss(embed, head, input_ids, draw_mask, draw_replace):
    # the collator's draws come in as tensors (the loader made them): 15% masked, of
    # which 80% become the mask token
    labels = input_ids.clone()
    special = input_ids == PAD
    masked = (draw_mask < 0.15 + 0.3) & ~special
    labels[~masked] = -100
    replaced = masked & (draw_replace < 0.8)
    inputs = input_ids.masked_fill(replaced, 3)
    logits = head(embed(inputs))
    return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1)), masked.sum()


class Pooler(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(D, D)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


@case(lambda n: (Pooler(), torch.randn(2, n, D)))
def first_token_pooler(pooler, hidden):
    return pooler(hidden)


class ParallelBlock(nn.Module):
    """GPT-J / NeoX / Falcon: attention and MLP read the same normed input."""

    def __init__(self, use_parallel_residual=True):
        super().__init__()
        self.use_parallel_residual = use_parallel_residual
        self.input_layernorm = nn.LayerNorm(D)
        self.post_attention_layernorm = nn.LayerNorm(D)
        self.attn = nn.Linear(D, D)
        self.mlp = nn.Sequential(
            nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D)
        )

    def forward(self, hidden_states):
        attn_output = (
            self.attn(self.input_layernorm(hidden_states)).cumsum(1) / hidden_states.shape[1]
        )
        if self.use_parallel_residual:
            mlp_output = self.mlp(self.post_attention_layernorm(hidden_states))
            return mlp_output + attn_output + hidden_states
        attn_output = attn_output + hidden_states
        return self.mlp(self.post_attention_layernorm(attn_output)) + attn_output


PARALLEL = nn.ModuleList([ParallelBlock(True), ParallelBlock(False)])


@case(lambda n: (PARALLEL, torch.randn(2, n, D)))
def parallel_and_sequential_residual_blocks(blocks, x):
    for block in blocks:
        x = block(x)
    return x


class LatentQueries(nn.Module):
    """Perceiver / Q-Former: learned query tokens attend to the inputs."""

    def __init__(self, num_latents=4):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, D))
        self.to_kv = nn.Linear(D, 2 * D, bias=False)

    def forward(self, inputs, mask):
        q = self.latents.expand(inputs.shape[0], -1, -1)
        k, v = self.to_kv(inputs).chunk(2, dim=-1)
        bias = torch.zeros_like(mask, dtype=q.dtype).masked_fill(~mask, float("-inf"))[:, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


LATENTS = LatentQueries()


@case(
    lambda n: (
        LATENTS,
        torch.randn(2, n, D),
        torch.arange(n)[None].expand(2, n) < torch.tensor([[n], [n - 1]]),
    )
)
def learned_latent_queries_cross_attend(module, inputs, mask):
    return module(inputs, mask)


class LoraLinear(nn.Module):
    def __init__(self, base, r=4, alpha=8, adapters=("default",)):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.ModuleDict(
            {name: nn.Linear(base.in_features, r, bias=False) for name in adapters}
        )
        self.lora_B = nn.ModuleDict(
            {name: nn.Linear(r, base.out_features, bias=False) for name in adapters}
        )
        for name in adapters:
            nn.init.normal_(self.lora_B[name].weight, std=0.1)
        self.lora_dropout = nn.ModuleDict({name: nn.Dropout(0.1) for name in adapters})
        self.scaling = {name: alpha / r for name in adapters}
        self.active_adapters = [adapters[0]]
        self.merged = False

    def get_delta_weight(self, adapter):
        return (self.lora_B[adapter].weight @ self.lora_A[adapter].weight) * self.scaling[adapter]

    def merge(self):
        with torch.no_grad():
            for adapter in self.active_adapters:
                self.base_layer.weight.data += self.get_delta_weight(adapter)
        self.merged = True

    def forward(self, x):
        result = self.base_layer(x)
        if self.merged:
            return result
        for active_adapter in self.active_adapters:
            if active_adapter not in self.lora_A:
                continue
            lora_A = self.lora_A[active_adapter]
            lora_B = self.lora_B[active_adapter]
            dropout = self.lora_dropout[active_adapter]
            x = x.to(lora_A.weight.dtype)
            result = result + lora_B(lora_A(dropout(x))) * self.scaling[active_adapter]
        return result


LORA = LoraLinear(nn.Linear(D, D), adapters=("default", "style")).eval()


@case(lambda n: (LORA, torch.randn(2, n, D)))
def lora_unmerged_adapters_chosen_by_name(lora, x):
    lora.active_adapters = ["style", "missing", "default"]
    out = lora(x)
    lora.active_adapters = ["default"]
    return out, lora(x)


@case(lambda n: (copy.deepcopy(LORA), torch.randn(2, n, D)))
def lora_merge_into_base_weight_under_no_grad(lora, x):
    unmerged = lora(x)
    lora.merge()
    return unmerged, lora(x), lora.merged


class CheckpointedStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.GELU()) for _ in range(3))
        self.gradient_checkpointing = True

    def forward(self, x):
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x


CHECKPOINTED = CheckpointedStack().eval()


@case(lambda n: (CHECKPOINTED, torch.randn(2, n, D)))
def gradient_checkpointing_skipped_in_eval(model, x):
    return model(x)


def init_weights(module, std=0.02):
    if isinstance(module, nn.Linear):
        module.weight.data.fill_(std)
        if module.bias is not None:
            module.bias.data.zero_()
    elif isinstance(module, nn.Embedding):
        module.weight.data.fill_(-std)
        if module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        module.bias.data.zero_()
        module.weight.data.fill_(1.0)


class SmallModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.norm = nn.LayerNorm(D)
        self.proj = nn.Linear(D, D)

    def forward(self, input_ids):
        return self.proj(self.norm(self.embed(input_ids)))


SMALL = SmallModel()


@case(lambda n: (copy.deepcopy(SMALL), *ids(n)))
def init_weights_through_module_apply(model, input_ids):
    with torch.no_grad():  # as Hugging Face's _init_weights runs
        model.apply(init_weights)
    return model(input_ids)


@case(lambda n: (SMALL, *ids(n)))
def count_trainable_parameters_and_forward(model, input_ids):
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    embedding_share = model.embed.weight.numel() / total
    return model(input_ids), total, trainable, round(embedding_share, 4)


@case(lambda n: (copy.deepcopy(SMALL), *ids(n)))
def freeze_embeddings_by_name_then_forward(model, input_ids):
    for name, param in model.named_parameters():
        if name.startswith("embed"):
            param.requires_grad_(False)
    out = model(input_ids)
    return out, [name for name, p in model.named_parameters() if p.requires_grad]


# known capture limitation: Module.state_dict() sets ``_metadata`` on the OrderedDict it
# builds, an attribute of a dict capture does not store (a graph break)
@case(lambda n: (SMALL, *ids(n)), expect="any")
def state_dict_keys_remapped(model, input_ids):
    remapped = {}
    for key, value in model.state_dict().items():
        new_key = key.replace("embed.", "embeddings.word_embeddings.").replace(
            "norm.", "LayerNorm."
        )
        remapped[new_key] = value
    return sorted(remapped), remapped["embeddings.word_embeddings.weight"][input_ids].sum()


@case(lambda n: (torch.randn(n, D) * 3,))
def fake_quantize_per_channel_absmax_int8(weight):
    absmax = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-8)
    scale = absmax / 127.0
    q = torch.clamp(torch.round(weight / scale), -128, 127).to(torch.int8)
    dequant = q.float() * scale
    # straight-through estimator: forward quantised, backward identity
    ste = weight + (dequant - weight).detach()
    return q, dequant, ste, (dequant - weight).abs().max()


@case(lambda n: (torch.randn(2, 4, 3 * n, 4), torch.randn(2, 4, 3 * n, 4)))
def sliding_window_cache_cropped(keys, values):
    window = 4
    if keys.shape[-2] > window:
        keys = keys[:, :, -window:]
        values = values[:, :, -window:]
    return keys.contiguous(), values.contiguous()


@case(
    lambda n: (
        torch.randn(n, VOCAB),
        torch.randn(n, VOCAB),
        torch.randint(0, VOCAB, (n,)),
        torch.rand(n),
    )
)
def speculative_decoding_acceptance(target_logits, draft_logits, draft_tokens, uniform):
    p = target_logits.softmax(-1)
    q = draft_logits.softmax(-1)
    p_tok = p.gather(-1, draft_tokens[:, None]).squeeze(-1)
    q_tok = q.gather(-1, draft_tokens[:, None]).squeeze(-1)
    accept = uniform <= torch.clamp(p_tok / q_tok, max=1.0)
    first_reject = (~accept).long().cumprod(0).logical_not().long().argmax()
    residual = torch.clamp(p - q, min=0)
    residual = residual / residual.sum(-1, keepdim=True)
    return accept, first_reject, residual


@case(lambda n: (torch.randn(n, 5), torch.randint(0, 5, (n,))))
def top_k_accuracy_metric(logits_, targets):
    maxk = 3
    _, pred = logits_.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(targets.reshape(1, -1).expand_as(pred))
    return [correct[:k].reshape(-1).float().sum(0) * 100.0 / targets.size(0) for k in (1, 3)]


@case(lambda n: (torch.randn(2, n, D).to(torch.bfloat16), torch.ones(D), torch.zeros(D)))
def layer_norm_upcast_to_float32_and_back(x, weight, bias):
    out = F.layer_norm(x.float(), (D,), weight, bias, 1e-5)
    return out.type_as(x), out.dtype, x.dtype


@case(lambda n: (torch.randn(2, n, D),))
def bloom_gelu_and_t5_fp16_clamp(x):
    y = x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))
    if y.dtype == torch.float16:
        clamp_value = torch.finfo(y.dtype).max - 1000
        y = torch.clamp(y, min=-clamp_value, max=clamp_value)
    return y


def apply_chunking_to_forward(forward_fn, chunk_size, chunk_dim, *input_tensors):
    if chunk_size > 0:
        tensor_shape = input_tensors[0].shape[chunk_dim]
        if input_tensors[0].shape[chunk_dim] % chunk_size != 0:
            raise ValueError(
                f"The dimension to be chunked {tensor_shape} has to be a multiple of the chunk size {chunk_size}"
            )
        num_chunks = input_tensors[0].shape[chunk_dim] // chunk_size
        input_tensors_chunks = tuple(t.chunk(num_chunks, dim=chunk_dim) for t in input_tensors)
        output_chunks = tuple(forward_fn(*chunk) for chunk in zip(*input_tensors_chunks))
        return torch.cat(output_chunks, dim=chunk_dim)
    return forward_fn(*input_tensors)


FEED_FORWARD = nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D))


@case(lambda n: (FEED_FORWARD, torch.randn(2, 2 * n, D)))
def chunked_feed_forward(ff, x):
    return apply_chunking_to_forward(ff, 2, 1, x), apply_chunking_to_forward(ff, 0, 1, x)
