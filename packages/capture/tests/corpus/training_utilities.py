"""More training-loop code: optimizer updates written functionally (Lion, Adafactor's
factored moments, LAMB's trust ratio, SAM's ascent step, gradient centralisation), flat
parameter buffers, layer-wise learning-rate decay from parameter names, replica gradient
averaging, self-supervised objectives (MoCo queue, BYOL, DINO centring, MAE masking by
sorted noise), R-Drop, hidden-state distillation, class-balanced and multilabel losses,
and weight-standardised convolutions."""

import copy

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(43)
D = 8


def params_and_grads(n):
    shapes = [(n, D), (D,), (D, 4)]
    params = [torch.randn(s) for s in shapes]
    grads = [torch.randn(s) for s in shapes]
    return (params, grads)


@case(params_and_grads)
def lion_update_with_sign(params, grads):
    lr, beta1, beta2, wd = 1e-3, 0.9, 0.99, 0.1
    states = [torch.zeros_like(p) for p in params]
    with torch.no_grad():
        for p, g, exp_avg in zip(params, grads, states):
            p.mul_(1 - lr * wd)
            update = exp_avg.mul(beta1).add(g, alpha=1 - beta1).sign_()
            p.add_(update, alpha=-lr)
            exp_avg.mul_(beta2).add_(g, alpha=1 - beta2)
    return states


@case(params_and_grads)
def adafactor_factored_second_moment(params, grads):
    eps, beta2t, lr = 1e-30, 0.8, 1e-2
    updates = []
    for p, grad in zip(params, grads):
        update = grad**2 + eps
        if grad.dim() >= 2:
            exp_avg_sq_row = update.mean(dim=-1) * (1 - beta2t)
            exp_avg_sq_col = update.mean(dim=-2) * (1 - beta2t)
            r_factor = (
                (exp_avg_sq_row / exp_avg_sq_row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
            )
            c_factor = exp_avg_sq_col.unsqueeze(-2).rsqrt()
            update = torch.mul(r_factor, c_factor) * grad
        else:
            update = update.mul(1 - beta2t).rsqrt() * grad
        rms = update.norm(2) / (update.numel() ** 0.5)
        update = update / (rms / 1.0).clamp_(min=1.0)
        p.sub_(update * lr)
        updates.append(update)
    return updates


@case(params_and_grads)
def lamb_trust_ratio(params, grads):
    lr, wd = 1e-2, 0.01
    ratios = []
    with torch.no_grad():
        for p, g in zip(params, grads):
            adam_step = g / (g.pow(2).sqrt() + 1e-6) + wd * p
            weight_norm = p.norm(2).clamp(0, 10)
            adam_norm = adam_step.norm(2)
            trust_ratio = torch.where(
                (weight_norm > 0) & (adam_norm > 0), weight_norm / adam_norm, torch.ones(())
            )
            p.add_(adam_step * trust_ratio, alpha=-lr)
            ratios.append(trust_ratio)
    return torch.stack(ratios)


@case(params_and_grads)
def sam_ascent_step_with_state(params, grads):
    rho = 0.05
    state = {}
    grad_norm = torch.norm(torch.stack([g.norm(p=2) for g in grads]), p=2)
    scale = rho / (grad_norm + 1e-12)
    with torch.no_grad():
        for i, (p, g) in enumerate(zip(params, grads)):
            e_w = g * scale
            p.add_(e_w)
            state[i] = {"e_w": e_w}
    return grad_norm, len(state)


@case(params_and_grads)
def gradient_centralisation(params, grads):
    out = []
    for g in grads:
        if g.dim() > 1:
            g = g - g.mean(dim=tuple(range(1, g.dim())), keepdim=True)
        out.append(g)
    return out


@case(params_and_grads)
def flat_parameter_buffer_and_views(params, grads):
    sizes = [p.numel() for p in params]
    flat = torch.cat([p.reshape(-1) for p in params])
    flat_grad = torch.cat([g.reshape(-1) for g in grads])
    flat.add_(flat_grad, alpha=-0.1)
    views = [chunk.view_as(p) for chunk, p in zip(flat.split(sizes), params)]
    return views, flat.numel()


class Encoder(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.layers = nn.ModuleList(nn.Linear(D, D) for _ in range(depth))
        self.head = nn.Linear(D, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return self.head(x)


ENCODER = Encoder()


def layer_id(name, num_layers):
    if name.startswith("embed"):
        return 0
    if name.startswith("layers."):
        return int(name.split(".")[1]) + 1
    return num_layers + 1


@case(lambda n: (ENCODER, torch.randn(n, 4)))
def layerwise_lr_decay_scales_from_names(model, x):
    decay, num_layers = 0.75, len(model.layers)
    scales = {}
    for name, _ in model.named_parameters():
        scales[name] = decay ** (num_layers + 1 - layer_id(name, num_layers))
    out = model(x)
    return out, scales


@case(lambda n: ([[torch.randn(n, D), torch.randn(D)] for _ in range(3)],))
def replica_gradients_averaged(replica_grads):
    world_size = len(replica_grads)
    averaged = [torch.stack(per_param).sum(0) / world_size for per_param in zip(*replica_grads)]
    for grads in replica_grads:
        for g, avg in zip(grads, averaged):
            g.copy_(avg)
    return averaged


class MoCo(nn.Module):
    def __init__(self, dim=D, queue_size=12, m=0.99, temperature=0.2):
        super().__init__()
        self.m, self.temperature = m, temperature
        self.encoder_q = nn.Linear(4, dim)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(dim, queue_size), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
        self.ptr = 0

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.mul_(self.m).add_(param_q.detach(), alpha=1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = self.ptr
        self.queue[:, ptr : ptr + batch_size] = keys.T
        self.ptr = (ptr + batch_size) % self.queue.shape[1]

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        self._momentum_update_key_encoder()
        with torch.no_grad():
            k = F.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / self.temperature
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return F.cross_entropy(logits, labels)


@case(lambda n: (copy.deepcopy(MoCo()), torch.randn(n, 4), torch.randn(n, 4)))
def moco_queue_and_momentum_encoder(model, im_q, im_k):
    return model(im_q, im_k), model.ptr, model.queue


@case(lambda n: (nn.Linear(D, D), torch.randn(n, D), torch.randn(n, D)))
def byol_simsiam_stop_gradient_loss(predictor, z1, z2):
    p1, p2 = predictor(z1), predictor(z2)

    def criterion(p, z):
        return -F.cosine_similarity(p, z.detach(), dim=-1).mean()

    return 0.5 * criterion(p1, z2) + 0.5 * criterion(p2, z1)


class DINOLoss(nn.Module):
    def __init__(self, out_dim=6, teacher_temp=0.04, student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp, self.center_momentum = (
            student_temp,
            teacher_temp,
            center_momentum,
        )
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_output, teacher_output, ncrops=2):
        student_out = (student_output / self.student_temp).chunk(ncrops)
        teacher_out = (
            F.softmax((teacher_output - self.center) / self.teacher_temp, dim=-1).detach().chunk(2)
        )
        total_loss, n_loss_terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        self.update_center(teacher_output)
        return total_loss / n_loss_terms

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


@case(lambda n: (DINOLoss(), torch.randn(2 * n, 6), torch.randn(2 * n, 6)))
def dino_loss_with_centre_buffer(loss_fn, student, teacher):
    return loss_fn(student, teacher), loss_fn.center


@case(lambda n: (torch.randn(2, n * n, D), torch.rand(2, n * n)))
def mae_random_masking_by_sorted_noise(x, noise):
    mask_ratio = 0.75
    n, length, dim = x.shape
    len_keep = int(length * (1 - mask_ratio))
    ids_shuffle = torch.argsort(noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    ids_keep = ids_shuffle[:, :len_keep]
    x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, dim))
    mask = torch.ones([n, length])
    mask[:, :len_keep] = 0
    mask = torch.gather(mask, dim=1, index=ids_restore)
    pred = x_masked.mean(1, keepdim=True).expand(-1, length, -1)
    loss = ((pred - x) ** 2).mean(dim=-1)
    return (loss * mask).sum() / mask.sum(), x_masked


@case(lambda n: (torch.randn(n, 5), torch.randn(n, 5), torch.randint(0, 5, (n,))))
def r_drop_symmetric_kl(logits1, logits2, labels):
    ce = 0.5 * (F.cross_entropy(logits1, labels) + F.cross_entropy(logits2, labels))
    p = F.log_softmax(logits1, dim=-1)
    q = F.log_softmax(logits2, dim=-1)
    kl = 0.5 * (
        F.kl_div(p, q, log_target=True, reduction="batchmean")
        + F.kl_div(q, p, log_target=True, reduction="batchmean")
    )
    return ce + 4.0 * kl


@case(
    lambda n: (
        [torch.randn(2, n, D) for _ in range(6)],
        [torch.randn(2, n, 4) for _ in range(3)],
        nn.Linear(4, D),
    )
)
def hidden_state_distillation_by_layer_map(teacher_hidden, student_hidden, projection):
    layer_map = {0: 1, 1: 3, 2: 5}
    losses = [
        F.mse_loss(projection(student_hidden[s]), teacher_hidden[t]) for s, t in layer_map.items()
    ]
    cosine = [
        1 - F.cosine_similarity(projection(student_hidden[s]), teacher_hidden[t], dim=-1).mean()
        for s, t in layer_map.items()
    ]
    return sum(losses) / len(losses), torch.stack(cosine)


@case(lambda n: (torch.randn(n, 4), torch.arange(n) % 4, torch.tensor([100.0, 20.0, 5.0, 1.0])))
def class_balanced_effective_number_weights(logits, labels, samples_per_class):
    beta = 0.999
    effective_num = 1.0 - torch.pow(beta, samples_per_class)
    weights = (1.0 - beta) / effective_num
    weights = weights / weights.sum() * len(samples_per_class)
    return F.cross_entropy(logits, labels, weight=weights), weights


@case(lambda n: (torch.randn(n, 6), (torch.arange(n * 6).view(n, 6) % 3 == 0).float()))
def multilabel_smoothed_bce_with_pos_weight(logits, targets):
    smoothing = 0.1
    targets = targets * (1 - smoothing) + 0.5 * smoothing
    pos_weight = torch.full((6,), 2.0)
    return F.binary_cross_entropy_with_logits(logits, targets, pos_weight=pos_weight)


class WSConv2d(nn.Conv2d):
    def forward(self, x):
        weight = self.weight
        mean = weight.mean(dim=(1, 2, 3), keepdim=True)
        std = weight.std(dim=(1, 2, 3), keepdim=True, unbiased=False) + 1e-5
        return F.conv2d(
            x,
            (weight - mean) / std,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )


WS_CONV = WSConv2d(3, 4, 3, padding=1)


@case(lambda n: (WS_CONV, torch.randn(2, 3, n, n)))
def weight_standardised_conv(conv, x):
    return F.group_norm(conv(x), 2)


@case(lambda n: (torch.randn(n, 3), torch.tensor(float(n)), torch.randn(n, 3)))
def swa_running_average_update(swa_params, n_averaged, model_params):
    with torch.no_grad():
        swa_params.add_((model_params - swa_params) / (n_averaged + 1))
        n_averaged += 1
    return swa_params, n_averaged


@case(lambda n: (torch.randn(n, 5), torch.randint(0, 5, (n,)), torch.rand(n)))
def per_sample_weighted_loss_over_valid(logits, labels, weights):
    losses = F.cross_entropy(logits, labels, reduction="none")
    valid = weights > 0.2
    weighted = losses * weights * valid
    return weighted.sum() / (weights * valid).sum().clamp(min=1e-6), valid.sum()
