"""Generation utilities and training-loop pieces of model libraries: logits processors
(temperature, top-k, top-p with sort/cumsum/scatter, repetition and presence penalties,
min-length and bad-words masks), greedy and beam bookkeeping over fixed steps, losses
(label smoothing, ignore_index, z-loss, focal, distillation, contrastive), and training
steps: gradient-norm clipping computed by hand, EMA weights under no_grad, weight-decay
parameter groups from named_parameters, warmup/cosine schedules, AdamW updates."""

import dataclasses
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(36)
VOCAB = 12


def logits(n):
    return (torch.randn(n, VOCAB),)


def logits_and_ids(n):
    return (torch.randn(n, VOCAB), torch.randint(0, VOCAB, (n, 5)))


class TemperatureLogitsWarper:
    def __init__(self, temperature):
        if not isinstance(temperature, float) or not (temperature > 0):
            raise ValueError(
                f"`temperature` has to be a strictly positive float, but is {temperature}"
            )
        self.temperature = temperature

    def __call__(self, input_ids, scores):
        return scores / self.temperature


class TopKLogitsWarper:
    def __init__(self, top_k, filter_value=-float("Inf"), min_tokens_to_keep=1):
        self.top_k = max(top_k, min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids, scores):
        top_k = min(self.top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        return scores.masked_fill(indices_to_remove, self.filter_value)


class TopPLogitsWarper:
    def __init__(self, top_p, filter_value=-float("Inf"), min_tokens_to_keep=1):
        self.top_p = top_p
        self.filter_value = filter_value
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, input_ids, scores):
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)
        sorted_indices_to_remove[..., -self.min_tokens_to_keep :] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(
            1, sorted_indices, sorted_indices_to_remove
        )
        return scores.masked_fill(indices_to_remove, self.filter_value)


class RepetitionPenaltyLogitsProcessor:
    def __init__(self, penalty):
        self.penalty = penalty

    def __call__(self, input_ids, scores):
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        return scores.scatter(1, input_ids, score)


class LogitsProcessorList(list):
    def __call__(self, input_ids, scores, **kwargs):
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


PROCESSORS = LogitsProcessorList(
    [
        RepetitionPenaltyLogitsProcessor(1.3),
        TemperatureLogitsWarper(0.7),
        TopKLogitsWarper(5),
        TopPLogitsWarper(0.9),
    ]
)


# (built once, as generate() builds it before its loop: a list subclass constructed in
# the trace is a known capture limitation, "call to LogitsProcessorList (type)")
@case(lambda n: (PROCESSORS, *logits_and_ids(n)))
def logits_processor_list_chain(processors, scores, input_ids):
    out = processors(input_ids, scores)
    return out, len(processors)


@case(logits_and_ids)
def top_p_filtering_keeps_min_tokens(scores, input_ids):
    warped = TopPLogitsWarper(0.3, min_tokens_to_keep=2)(input_ids, scores)
    return warped.softmax(-1), torch.isinf(warped).sum(-1)


@case(logits)
def top_k_top_p_filtering_in_place_descending(scores):
    top_k, top_p, filter_value = 4, 0.8, -float("inf")
    scores = scores.clone()
    indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
    scores[indices_to_remove] = filter_value
    sorted_logits, sorted_indices = torch.sort(scores, descending=True)
    cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    sorted_indices_to_remove = cumulative_probs > top_p
    sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
    sorted_indices_to_remove[..., 0] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(
        1, sorted_indices, sorted_indices_to_remove
    )
    scores[indices_to_remove] = filter_value
    return scores


@case(logits)
def min_p_and_typical_filtering(scores):
    probs = scores.softmax(-1)
    top_probs, _ = probs.max(dim=-1, keepdim=True)
    min_p_removed = probs < 0.2 * top_probs
    normalized = F.log_softmax(scores, dim=-1)
    p = torch.exp(normalized)
    ent = -(normalized * p).nansum(-1, keepdim=True)
    shifted = torch.abs((-normalized) - ent)
    sorted_scores, sorted_indices = torch.sort(shifted, descending=False)
    cumulative = scores.gather(-1, sorted_indices).softmax(dim=-1).cumsum(dim=-1)
    last_ind = (cumulative < 0.9).sum(dim=1)
    last_ind.clamp_(max=sorted_scores.shape[-1] - 1)
    typical_removed = sorted_scores > sorted_scores.gather(1, last_ind.view(-1, 1))
    typical_removed = typical_removed.scatter(1, sorted_indices, typical_removed)
    return scores.masked_fill(min_p_removed | typical_removed, -float("inf"))


@case(lambda n: (torch.randn(2, VOCAB), torch.randint(0, VOCAB, (2, n))))
def presence_and_frequency_penalties(scores, generated):
    counts = torch.zeros_like(scores).scatter_add_(
        1, generated, torch.ones_like(generated, dtype=scores.dtype)
    )
    presence = (counts > 0).to(scores.dtype)
    return scores - 0.5 * counts - 0.3 * presence


@case(lambda n: (torch.randn(2, VOCAB), torch.randint(1, VOCAB, (2, n))))
def min_length_and_suppressed_tokens(scores, input_ids):
    eos_token_id, min_length = 0, 5
    suppress = torch.tensor([3, 7])
    vocab = torch.arange(scores.shape[-1])
    scores = scores.clone()
    if input_ids.shape[-1] < min_length:
        scores = torch.where(vocab == eos_token_id, -math.inf, scores)
    scores[:, suppress] = -float("inf")
    return scores


@case(lambda n: (torch.randn(2, VOCAB), torch.randint(0, 4, (2, n))))
def no_repeat_ngram_banned_by_comparison(scores, input_ids):
    # the banned next tokens of 2-grams: any token that followed the last token before
    last = input_ids[:, -1:]
    previous, following = input_ids[:, :-1], input_ids[:, 1:]
    match = previous == last
    banned = torch.zeros_like(scores, dtype=torch.bool)
    banned.scatter_(1, following, match)
    return scores.masked_fill(banned, -float("inf"))


@dataclasses.dataclass
class GenerationConfig:
    max_new_tokens: int = 3
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    eos_token_id: int = 0
    pad_token_id: int = 1


class TinyCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.rnn = nn.Linear(8, 8)
        self.head = nn.Linear(8, VOCAB)

    def forward(self, input_ids):
        hidden = torch.tanh(self.rnn(self.embed(input_ids))).cumsum(1)
        return self.head(hidden)


LM = TinyCausalLM()


@case(lambda n: (LM, torch.randint(2, VOCAB, (2, n))))
def greedy_decode_fixed_steps_with_finished_mask(model, input_ids):
    config = GenerationConfig()
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long)
    for _ in range(config.max_new_tokens):
        next_token_logits = model(input_ids)[:, -1, :]
        next_tokens = torch.argmax(next_token_logits, dim=-1)
        next_tokens = next_tokens * unfinished + config.pad_token_id * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished = unfinished & ~(next_tokens == config.eos_token_id)
    return input_ids, unfinished


@case(lambda n: (LM, torch.randint(2, VOCAB, (1, n))))
def beam_search_scores_fixed_beams(model, input_ids):
    num_beams, steps = 3, 2
    beams = input_ids.repeat(num_beams, 1)
    beam_scores = torch.zeros(num_beams)
    beam_scores[1:] = -1e9
    for _ in range(steps):
        log_probs = F.log_softmax(model(beams)[:, -1, :], dim=-1)
        next_scores = (log_probs + beam_scores[:, None]).view(-1)
        top_scores, top_idx = torch.topk(next_scores, num_beams)
        beam_idx = torch.div(top_idx, VOCAB, rounding_mode="floor")
        token_idx = top_idx % VOCAB
        beams = torch.cat([beams[beam_idx], token_idx[:, None]], dim=-1)
        beam_scores = top_scores
    length_penalty = 1.0
    normalized = beam_scores / (beams.shape[-1] ** length_penalty)
    return beams, normalized


@case(lambda n: (LM, torch.randint(2, VOCAB, (2, n))))
def contrastive_style_candidate_rescoring(model, input_ids):
    logits_last = model(input_ids)[:, -1]
    probs = logits_last.softmax(-1)
    top_p, top_ids = probs.topk(3, dim=-1)
    candidates = torch.cat([input_ids.repeat_interleave(3, dim=0), top_ids.reshape(-1, 1)], dim=1)
    hidden = model.embed(candidates).mean(1).view(2, 3, -1)
    context = model.embed(input_ids).mean(1, keepdim=True)
    degeneration = F.cosine_similarity(hidden, context, dim=-1)
    score = 0.6 * top_p - 0.4 * degeneration
    best = score.argmax(-1)
    return top_ids.gather(1, best[:, None])


@case(lambda n: (torch.randn(2, n, VOCAB), torch.randint(0, VOCAB, (2, n))))
def sequence_log_probs_gathered_with_shift(logits_, labels):
    shift_logits = logits_[:, :-1, :].contiguous()
    shift_labels = labels[:, 1:].contiguous()
    log_probs = shift_logits.log_softmax(-1)
    token_log_probs = log_probs.gather(-1, shift_labels.unsqueeze(-1)).squeeze(-1)
    return token_log_probs.sum(-1), token_log_probs.exp().mean()


def causal_lm_loss(logits_, labels, ignore_index=-100, label_smoothing=0.0):
    shift_logits = logits_[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(
        shift_logits.view(-1, shift_logits.size(-1)),
        shift_labels.view(-1),
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )


def labels_with_padding(n):
    labels = torch.randint(0, VOCAB, (2, n))
    labels[1, -2:] = -100
    return (torch.randn(2, n, VOCAB), labels)


@case(labels_with_padding)
def causal_lm_loss_shifted_ignore_index_smoothing(logits_, labels):
    return causal_lm_loss(logits_, labels), causal_lm_loss(logits_, labels, label_smoothing=0.1)


@case(labels_with_padding)
def loss_normalised_by_token_count(logits_, labels):
    flat = F.cross_entropy(
        logits_.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    num_items = (labels != -100).sum()
    return flat / num_items


@case(labels_with_padding)
def label_smoothing_by_hand_with_padding_mask(logits_, labels):
    epsilon, ignore_index = 0.1, -100
    log_probs = -F.log_softmax(logits_, dim=-1)
    labels = labels.unsqueeze(-1)
    padding_mask = labels.eq(ignore_index)
    labels = torch.clamp(labels, min=0)
    nll_loss = log_probs.gather(dim=-1, index=labels)
    smoothed_loss = log_probs.sum(dim=-1, keepdim=True, dtype=torch.float32)
    nll_loss.masked_fill_(padding_mask, 0.0)
    smoothed_loss.masked_fill_(padding_mask, 0.0)
    num_active = padding_mask.numel() - padding_mask.long().sum()
    nll_loss = nll_loss.sum() / num_active
    smoothed_loss = smoothed_loss.sum() / (num_active * log_probs.shape[-1])
    return (1 - epsilon) * nll_loss + epsilon * smoothed_loss


@case(labels_with_padding)
def z_loss_and_cross_entropy(logits_, labels):
    z = torch.logsumexp(logits_, dim=-1)
    mask = (labels != -100).float()
    z_loss = 1e-4 * ((z**2) * mask).sum() / mask.sum()
    ce = F.cross_entropy(logits_.transpose(1, 2), labels, ignore_index=-100)
    return ce + z_loss, {"ce": ce.detach(), "z_loss": z_loss.detach()}


@case(lambda n: (torch.randn(n, 5), torch.randint(0, 5, (n,))))
def focal_loss_with_class_weights(logits_, targets):
    gamma = 2.0
    alpha = torch.tensor([0.25, 0.5, 1.0, 1.0, 0.75])
    ce = F.cross_entropy(logits_, targets, reduction="none")
    pt = torch.exp(-ce)
    return (alpha[targets] * (1 - pt) ** gamma * ce).mean()


@case(lambda n: (torch.randn(n, 5), torch.rand(n, 5).round()))
def sigmoid_focal_loss_multilabel(inputs, targets):
    alpha, gamma = 0.25, 2
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * loss).sum() / max(1, inputs.shape[0])


@case(lambda n: (torch.randn(n, VOCAB), torch.randn(n, VOCAB), torch.randint(0, VOCAB, (n,))))
def knowledge_distillation_loss(student, teacher, labels):
    temperature, alpha = 2.0, 0.5
    soft = F.kl_div(
        F.log_softmax(student / temperature, dim=-1),
        F.softmax(teacher / temperature, dim=-1),
        reduction="batchmean",
    ) * (temperature**2)
    hard = F.cross_entropy(student, labels)
    return alpha * soft + (1 - alpha) * hard


@case(lambda n: (torch.randn(n, 8), torch.randn(n, 8), torch.tensor(2.6592)))
def clip_contrastive_loss_with_logit_scale(image_embeds, text_embeds, logit_scale):
    image_embeds = image_embeds / image_embeds.norm(p=2, dim=-1, keepdim=True)
    text_embeds = text_embeds / text_embeds.norm(p=2, dim=-1, keepdim=True)
    logits_per_text = torch.matmul(text_embeds, image_embeds.t()) * logit_scale.exp()
    logits_per_image = logits_per_text.t()
    labels = torch.arange(len(logits_per_text))
    caption_loss = F.cross_entropy(logits_per_text, labels)
    image_loss = F.cross_entropy(logits_per_image, labels)
    return (caption_loss + image_loss) / 2.0


@case(lambda n: (torch.randn(n, 8), torch.randn(n, 8)))
def siglip_pairwise_sigmoid_loss(image_embeds, text_embeds):
    logit_scale, logit_bias = 10.0, -10.0
    logits_ = (
        F.normalize(text_embeds, dim=-1) @ F.normalize(image_embeds, dim=-1).t() * logit_scale
        + logit_bias
    )
    eye = torch.eye(logits_.size(0))
    m1_diag1 = -torch.ones_like(logits_) + 2 * eye
    return -F.logsigmoid(m1_diag1 * logits_).sum(-1).mean()


@case(lambda n: (torch.randn(n, 8), torch.randint(0, 3, (n,))))
def triplet_margin_from_batch_hard_mining(embeddings, labels):
    distances = torch.cdist(embeddings, embeddings)
    same = labels[:, None] == labels[None, :]
    hardest_positive = (distances * same).max(1).values
    hardest_negative = (distances + same * 1e6).min(1).values
    return F.relu(hardest_positive - hardest_negative + 0.2).mean()


@case(lambda n: (torch.randn(n, 3, requires_grad=True), torch.randn(n, 3)))
def smooth_l1_and_huber_box_regression(pred, target):
    beta = 1.0 / 9
    diff = torch.abs(pred - target)
    manual = torch.where(diff < beta, 0.5 * diff**2 / beta, diff - 0.5 * beta).sum() / pred.shape[0]
    return manual, F.smooth_l1_loss(pred, target, beta=beta), F.huber_loss(pred, target, delta=0.5)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 1))
        self.embedding = nn.Embedding(5, 6)


REGRESSOR = Regressor()


def with_grads(n):
    """The (name, parameter) pairs of a model after a backward, and their gradients,
    as optimizer and clipping utilities receive them (torch.optim's functional API)."""
    model = Regressor()
    model.load_state_dict(REGRESSOR.state_dict())
    x = torch.randn(n, 6)
    loss = model.body(x).pow(2).mean() + model.embedding.weight.pow(2).sum() * 1e-3
    loss.backward()
    named = [(name, p.detach().clone()) for name, p in model.named_parameters()]
    return (named, [p.grad for p in model.parameters()])


@case(with_grads)
def clip_grad_norm_by_hand(named, grads):
    max_norm, norm_type = 0.5, 2.0
    grads = [g for g in grads if g is not None]
    norms = [torch.linalg.vector_norm(g, norm_type) for g in grads]
    total_norm = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    for g in grads:
        g.mul_(clip_coef_clamped)
    return total_norm


@case(with_grads)
def clip_grad_value_and_inf_norm(named, grads):
    inf_norm = torch.stack([g.detach().abs().max() for g in grads]).max()
    for g in grads:
        g.clamp_(min=-0.05, max=0.05)
    return inf_norm, sum(g.abs().sum() for g in grads)


@case(with_grads)
def grad_norm_per_named_parameter_logged(named, grads):
    logs = {}
    for (name, _), grad in zip(named, grads):
        if grad is None or "norm" in name:
            continue
        logs[f"grad_norm/{name}"] = grad.norm()
    logs["grad_norm/total"] = torch.stack(list(logs.values())).norm()
    return logs


@case(with_grads)
def grads_have_nan_or_inf_check_by_flag(named, grads):
    found_inf = torch.zeros(())
    for g in grads:
        found_inf = torch.maximum(found_inf, (~torch.isfinite(g)).any().float())
    scale = torch.where(found_inf > 0, torch.tensor(0.5), torch.tensor(2.0))
    return found_inf, scale


def get_parameter_groups(named, grads, weight_decay):
    decay, no_decay = [], []
    for (name, param), grad in zip(named, grads):
        if (
            param.ndim < 2
            or "bias" in name
            or "norm" in name.lower()
            or name.startswith("embedding")
        ):
            no_decay.append((param, grad))
        else:
            decay.append((param, grad))
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


@case(with_grads)
def adamw_step_over_weight_decay_groups(named, grads):
    lr, betas, eps = 1e-2, (0.9, 0.999), 1e-8
    groups = get_parameter_groups(named, grads, 0.1)
    step = 1
    with torch.no_grad():
        for group in groups:
            for p, grad in group["params"]:
                exp_avg = torch.zeros_like(p)
                exp_avg_sq = torch.zeros_like(p)
                p.mul_(1 - lr * group["weight_decay"])
                exp_avg.lerp_(grad, 1 - betas[0])
                exp_avg_sq.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
                bias_correction1 = 1 - betas[0] ** step
                bias_correction2 = 1 - betas[1] ** step
                denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
    return [len(g["params"]) for g in groups]


@case(with_grads)
def sgd_momentum_with_nesterov_state_dict(named, grads):
    lr, momentum = 0.1, 0.9
    state = {}
    with torch.no_grad():
        for (name, p), grad in zip(named, grads):
            buf = state.setdefault(name, torch.zeros_like(p))
            buf.mul_(momentum).add_(grad)
            update = grad.add(buf, alpha=momentum)
            p.add_(update, alpha=-lr)
    return sorted(state), state["body.0.weight"]


class EMAModel:
    def __init__(
        self,
        parameters,
        decay=0.999,
        min_decay=0.0,
        update_after_step=0,
        inv_gamma=1.0,
        power=2 / 3,
    ):
        self.shadow_params = [p.clone().detach() for p in parameters]
        self.decay = decay
        self.min_decay = min_decay
        self.update_after_step = update_after_step
        self.inv_gamma = inv_gamma
        self.power = power
        self.optimization_step = 0

    def get_decay(self, optimization_step):
        step = max(0, optimization_step - self.update_after_step - 1)
        if step <= 0:
            return 0.0
        cur_decay_value = 1 - (1 + step / self.inv_gamma) ** -self.power
        cur_decay_value = min(cur_decay_value, self.decay)
        return max(cur_decay_value, self.min_decay)

    @torch.no_grad()
    def step(self, parameters):
        self.optimization_step += 1
        one_minus_decay = 1 - self.get_decay(self.optimization_step)
        for s_param, param in zip(self.shadow_params, parameters):
            if param.requires_grad:
                s_param.sub_(one_minus_decay * (s_param - param))


def ema_and_model(n):
    model = Regressor()
    model.load_state_dict(REGRESSOR.state_dict())
    ema = EMAModel(model.parameters(), decay=0.99)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return (ema, model, torch.randn(n, 6))


@case(ema_and_model)
def ema_model_steps_under_no_grad(ema, model, x):
    for _ in range(3):
        ema.step(model.parameters())
    return ema.shadow_params[0], ema.optimization_step, model.body(x)


@case(ema_and_model)
def ema_lerp_with_buffers_copied(ema, model, x):
    ema_model = model
    with torch.no_grad():
        for s, (name, p) in zip(ema.shadow_params, ema_model.named_parameters()):
            s.lerp_(p, 0.0 if name.startswith("embedding") else 0.1)
    return [s.sum() for s in ema.shadow_params]


def lr_lambda_warmup_cosine(
    current_step, num_warmup_steps=3, num_training_steps=10, num_cycles=0.5
):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(
        max(1, num_training_steps - num_warmup_steps)
    )
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


@case(lambda n: (torch.randn(n, 6), {"step": 2, "lr": 1e-3}))
def warmup_cosine_schedule_in_training_state(grad, state):
    factors = []
    for _ in range(3):
        state["step"] += 1
        factors.append(lr_lambda_warmup_cosine(state["step"]))
    state["last_lr"] = state["lr"] * factors[-1]
    return grad * state["last_lr"], factors


@case(lambda n: (REGRESSOR, torch.randn(n, 6), torch.randn(n, 1)))
def gradient_accumulation_micro_batches(model, x, y):
    accumulation_steps = 2
    losses = []
    for micro_x, micro_y in zip(x.chunk(accumulation_steps), y.chunk(accumulation_steps)):
        loss = F.mse_loss(model.body(micro_x), micro_y) / accumulation_steps
        losses.append(loss)
    total = torch.stack(losses).sum()
    return total, {"loss": total.detach(), "micro_batches": len(losses)}


@case(lambda n: (REGRESSOR, torch.randn(n, 6)))
def l2_regulariser_over_named_weights(model, x):
    reg = sum(p.pow(2).sum() for name, p in model.named_parameters() if name.endswith("weight"))
    return model.body(x).mean() + 1e-4 * reg


@case(lambda n: (torch.randn(n, 6), torch.tensor(65536.0)))
def loss_scaling_unscale_and_update(loss_input, scale):
    loss = loss_input.pow(2).mean()
    scaled = loss * scale
    unscaled = scaled / scale
    growth = torch.where(torch.isfinite(scaled), scale * 2.0, scale * 0.5)
    return unscaled, growth


@case(lambda n: (REGRESSOR, torch.randn(n, 6), torch.randn(n, 1)))
def train_eval_mode_switch_metrics(model, x, y):
    model.eval()
    with torch.no_grad():
        val = F.l1_loss(model.body(x), y)
    model.train()
    train = F.mse_loss(model.body(x), y)
    return train, val, model.training, model.body[0].training


@case(lambda n: (torch.randn(n, 4), torch.randint(0, 4, (n,))))
def accuracy_and_confusion_matrix(logits_, labels):
    preds = logits_.argmax(-1)
    accuracy = (preds == labels).float().mean()
    confusion = torch.zeros(4, 4, dtype=torch.long)
    confusion.index_put_((labels, preds), torch.ones_like(labels), accumulate=True)
    precision = confusion.diag() / confusion.sum(0).clamp(min=1)
    return accuracy, confusion, precision
