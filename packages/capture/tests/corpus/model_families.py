"""Smaller model families with distinctive forward passes: mixture density networks,
capsule routing, neural additive models by grouped convolution, hypernetworks, FiLM,
deep sets and set-transformer pooling, slot attention with a GRU cell, a memory network
with erase/add writes, pointer-network decoding with a visited mask, NCF, DCN cross
layers, Time2Vec, N-BEATS bases, gated residual networks, JEM energies, prototypical
networks, a functional fast-weights step, knowledge tracing, siamese, style, total-variation
and center losses."""

import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(47)
D = 8


class MDNHead(nn.Module):
    def __init__(self, components=3, out=2):
        super().__init__()
        self.k, self.out = components, out
        self.proj = nn.Linear(D, components * (1 + 2 * out))

    def forward(self, h, y):
        params = self.proj(h)
        logits, mu, log_sigma = params.split([self.k, self.k * self.out, self.k * self.out], dim=-1)
        mu = mu.view(-1, self.k, self.out)
        sigma = log_sigma.view(-1, self.k, self.out).clamp(-5, 5).exp()
        log_pi = logits.log_softmax(-1)
        normal = (
            -0.5 * (((y[:, None] - mu) / sigma) ** 2) - sigma.log() - 0.5 * math.log(2 * math.pi)
        )
        return -(torch.logsumexp(log_pi + normal.sum(-1), dim=-1)).mean()


MDN = MDNHead()


@case(lambda n: (MDN, torch.randn(n, D), torch.randn(n, 2)))
def mixture_density_network_nll(head, h, y):
    return head(h, y)


def squash(s, dim=-1):
    squared_norm = (s**2).sum(dim, keepdim=True)
    return squared_norm / (1 + squared_norm) * s / torch.sqrt(squared_norm + 1e-8)


@case(lambda n: (torch.randn(2, 3 * n, 4, 6),))
def capsule_dynamic_routing_by_agreement(u_hat):
    b = torch.zeros(u_hat.shape[:3])
    for iteration in range(3):
        c = b.softmax(dim=2)
        s = (c.unsqueeze(-1) * u_hat).sum(1)
        v = squash(s)
        if iteration < 2:
            b = b + (u_hat * v.unsqueeze(1)).sum(-1)
    return v, v.norm(dim=-1)


class NeuralAdditiveModel(nn.Module):
    def __init__(self, features=5, hidden=6):
        super().__init__()
        self.features = features
        self.first = nn.Conv1d(features, features * hidden, 1, groups=features)
        self.second = nn.Conv1d(features * hidden, features, 1, groups=features)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        contributions = self.second(F.relu(self.first(x.unsqueeze(-1)))).squeeze(-1)
        return contributions.sum(-1) + self.bias, contributions


NAM = NeuralAdditiveModel()


@case(lambda n: (NAM, torch.randn(n, 5)))
def neural_additive_model_grouped_conv(model, x):
    return model(x)


class HyperNetwork(nn.Module):
    def __init__(self, in_features=4, out_features=3):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_gen = nn.Linear(D, in_features * out_features)
        self.bias_gen = nn.Linear(D, out_features)

    def forward(self, task_embedding, x):
        w = self.weight_gen(task_embedding).view(-1, self.out_features, self.in_features)
        b = self.bias_gen(task_embedding)
        return torch.bmm(w, x.unsqueeze(-1)).squeeze(-1) + b


HYPER = HyperNetwork()


@case(lambda n: (HYPER, torch.randn(n, D), torch.randn(n, 4)))
def hypernetwork_generated_weights(hyper, task, x):
    return hyper(task, x)


@case(lambda n: (nn.Linear(6, 2 * 4), torch.randn(2, 4, n, n), torch.randn(2, 6)))
def film_conditioning(film, features, condition):
    gamma, beta = film(condition).chunk(2, dim=-1)
    return features * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]


DEEP_SETS = nn.ModuleDict(
    {"phi": nn.Sequential(nn.Linear(3, D), nn.ReLU()), "rho": nn.Linear(D, 1)}
)


@case(
    lambda n: (
        DEEP_SETS,
        torch.randn(2, n, 3),
        torch.ones(2, n).index_fill(1, torch.tensor([0]), 0),
    )
)
def deep_sets_masked_sum_pooling(model, elements, mask):
    encoded = model["phi"](elements) * mask[..., None]
    return model["rho"](encoded.sum(1)), model["rho"](encoded.max(1).values)


class PMA(nn.Module):
    def __init__(self, seeds=2):
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(1, seeds, D))
        self.mab = nn.MultiheadAttention(D, 2, batch_first=True)

    def forward(self, x):
        s = self.seeds.expand(x.shape[0], -1, -1)
        out, weights = self.mab(s, x, x)
        return out + s, weights


SET_POOL = PMA().eval()


@case(lambda n: (SET_POOL, torch.randn(2, n, D)))
def set_transformer_pooling_by_attention(pool, x):
    return pool(x)


class SlotAttention(nn.Module):
    def __init__(self, num_slots=3, iters=3):
        super().__init__()
        self.num_slots, self.iters, self.scale = num_slots, iters, D**-0.5
        self.slots_mu = nn.Parameter(torch.randn(1, 1, D))
        self.to_q, self.to_k, self.to_v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.gru = nn.GRUCell(D, D)
        self.norm_input, self.norm_slots = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, inputs, noise):
        b, _, d = inputs.shape
        slots = self.slots_mu + noise
        inputs = self.norm_input(inputs)
        k, v = self.to_k(inputs), self.to_v(inputs)
        for _ in range(self.iters):
            slots_prev = slots
            q = self.to_q(self.norm_slots(slots))
            attn = torch.einsum("bid,bjd->bij", q, k).mul(self.scale).softmax(dim=1) + 1e-8
            attn = attn / attn.sum(dim=-1, keepdim=True)
            updates = torch.einsum("bjd,bij->bid", v, attn)
            slots = self.gru(updates.reshape(-1, d), slots_prev.reshape(-1, d)).reshape(b, -1, d)
        return slots


SLOTS = SlotAttention()


@case(lambda n: (SLOTS, torch.randn(2, n, D), torch.randn(2, 3, D) * 0.1))
def slot_attention_iterations_with_gru_cell(module, inputs, noise):
    return module(inputs, noise)


@case(lambda n: (torch.randn(2, 5, D), torch.randn(2, D), torch.rand(2, D), torch.randn(2, D)))
def memory_network_content_read_and_erase_add_write(memory, key, erase, add):
    weights = F.cosine_similarity(memory, key[:, None], dim=-1).mul(5.0).softmax(-1)
    read = torch.einsum("bn,bnd->bd", weights, memory)
    memory = memory * (1 - weights[..., None] * erase[:, None]) + weights[..., None] * add[:, None]
    return read, memory


@case(lambda n: (torch.randn(2, n, D), torch.randn(2, D)))
def pointer_network_decoding_with_visited_mask(encoder_states, decoder_state):
    visited = torch.zeros(encoder_states.shape[:2], dtype=torch.bool)
    tours = []
    for _ in range(encoder_states.shape[1]):
        scores = torch.einsum("bnd,bd->bn", encoder_states, decoder_state)
        scores = scores.masked_fill(visited, float("-inf"))
        choice = scores.argmax(-1)
        tours.append(choice)
        visited = visited.scatter(1, choice[:, None], True)
        decoder_state = encoder_states[torch.arange(2), choice]
    return torch.stack(tours, 1)


class NCF(nn.Module):
    def __init__(self, users=20, items=30):
        super().__init__()
        self.gmf_user, self.gmf_item = nn.Embedding(users, D), nn.Embedding(items, D)
        self.mlp_user, self.mlp_item = nn.Embedding(users, D), nn.Embedding(items, D)
        self.mlp = nn.Sequential(nn.Linear(2 * D, D), nn.ReLU())
        self.predict = nn.Linear(2 * D, 1)

    def forward(self, users, items):
        gmf = self.gmf_user(users) * self.gmf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], -1))
        return self.predict(torch.cat([gmf, mlp], -1)).squeeze(-1)


NCF_MODEL = NCF()


@case(
    lambda n: (
        NCF_MODEL,
        torch.randint(0, 20, (n,)),
        torch.randint(0, 30, (n,)),
        torch.rand(n).round(),
    )
)
def neural_collaborative_filtering_bce(model, users, items, clicked):
    logits = model(users, items)
    return F.binary_cross_entropy_with_logits(logits, clicked), logits.sigmoid()


CROSS_WEIGHTS = nn.ParameterList([nn.Parameter(torch.randn(D, 1) * 0.1) for _ in range(3)])


@case(lambda n: (CROSS_WEIGHTS, torch.randn(n, D)))
def deep_cross_network_cross_layers(weights, x0):
    x = x0
    for w in weights:
        x = x0 * (x @ w) + x
    return x


class Time2Vec(nn.Module):
    def __init__(self, k=4):
        super().__init__()
        self.linear = nn.Linear(1, 1)
        self.periodic = nn.Linear(1, k)

    def forward(self, t):
        t = t.unsqueeze(-1)
        return torch.cat([self.linear(t), torch.sin(self.periodic(t))], dim=-1)


T2V = Time2Vec()


@case(lambda n: (T2V, torch.arange(n, dtype=torch.float)[None].expand(2, n) * 0.5))
def time2vec_embedding(module, t):
    return module(t)


@case(lambda n: (nn.Linear(2 * n, 3 + 3), torch.randn(4, 2 * n), 4))
def nbeats_trend_basis_expansion(fc, history, horizon):
    degree = 3
    theta = fc(history)
    backcast_theta, forecast_theta = theta[:, :degree], theta[:, degree:]
    t_fore = torch.arange(horizon, dtype=torch.float) / horizon
    t_back = torch.arange(history.shape[1], dtype=torch.float) / history.shape[1]
    basis_fore = torch.stack([t_fore**i for i in range(degree)])
    basis_back = torch.stack([t_back**i for i in range(degree)])
    return history - backcast_theta @ basis_back, forecast_theta @ basis_fore


class GatedResidualNetwork(nn.Module):
    def __init__(self, context_size=3):
        super().__init__()
        self.fc1 = nn.Linear(D, D)
        self.context = nn.Linear(context_size, D, bias=False)
        self.fc2 = nn.Linear(D, D)
        self.gate = nn.Linear(D, 2 * D)
        self.norm = nn.LayerNorm(D)

    def forward(self, x, context=None):
        hidden = self.fc1(x)
        if context is not None:
            hidden = hidden + self.context(context)
        hidden = self.fc2(F.elu(hidden))
        return self.norm(x + F.glu(self.gate(hidden), dim=-1))


GRN = GatedResidualNetwork()


@case(lambda n: (GRN, torch.randn(n, D), torch.randn(n, 3)))
def temporal_fusion_gated_residual_network(grn, x, context):
    return grn(x, context), grn(x)


@case(lambda n: (nn.Linear(D, 4), torch.randn(n, D), torch.arange(n) % 4))
def joint_energy_model_logsumexp_energy(classifier, x, labels):
    logits = classifier(x)
    energy = -torch.logsumexp(logits, dim=-1)
    return F.cross_entropy(logits, labels), energy.mean()


@case(lambda n: (nn.Linear(5, D), torch.randn(3 * 2, 5), torch.arange(6) % 3, torch.randn(n, 5)))
def prototypical_network_distances(encoder, support, support_labels, queries):
    embedded = encoder(support)
    one_hot = F.one_hot(support_labels, 3).float()
    prototypes = (one_hot.T @ embedded) / one_hot.sum(0)[:, None]
    distances = torch.cdist(encoder(queries), prototypes).pow(2)
    return (-distances).log_softmax(-1)


@case(lambda n: (torch.randn(3, D), torch.randn(3), torch.randn(n, D), torch.arange(n) % 3))
def functional_fast_weights_inner_step(weight, bias, x, labels):
    inner_lr = 0.4
    weight = weight.detach().requires_grad_(False)
    logits = F.linear(x, weight, bias)
    probs = logits.softmax(-1)
    grad_logits = (probs - F.one_hot(labels, 3).float()) / x.shape[0]
    fast_weight = weight - inner_lr * grad_logits.T @ x
    fast_bias = bias - inner_lr * grad_logits.sum(0)
    return F.cross_entropy(F.linear(x, fast_weight, fast_bias), labels)


@case(
    lambda n: (
        nn.Linear(2 * 5, 5),
        torch.arange(n)[None].expand(2, n) % 5,
        torch.arange(2 * n).view(2, n) % 2,
    )
)
def deep_knowledge_tracing_interaction_encoding(predictor, skills, correct):
    num_skills = 5
    interactions = F.one_hot(skills + num_skills * correct, 2 * num_skills).float()
    states = interactions.cumsum(1) / torch.arange(1, skills.shape[1] + 1)[None, :, None]
    probs = predictor(states).sigmoid()
    next_skill = skills[:, 1:]
    predicted = probs[:, :-1].gather(-1, next_skill[..., None]).squeeze(-1)
    return F.binary_cross_entropy(predicted, correct[:, 1:].float())


@case(lambda n: (torch.randn(n, D), torch.randn(n, D), torch.arange(n) % 2))
def siamese_contrastive_margin_loss(left, right, same):
    margin = 1.0
    distance = F.pairwise_distance(left, right)
    loss = same * distance.pow(2) + (1 - same) * F.relu(margin - distance).pow(2)
    return loss.mean() / 2


@case(
    lambda n: (
        [torch.randn(1, 4, 2 * n, 2 * n), torch.randn(1, 6, n, n)],
        [torch.randn(1, 4, 2 * n, 2 * n), torch.randn(1, 6, n, n)],
    )
)
def style_gram_and_perceptual_losses(features, targets):
    def gram(x):
        b, c, h, w = x.shape
        f = x.view(b, c, h * w)
        return f @ f.transpose(1, 2) / (c * h * w)

    weights = [1.0, 0.5]
    style = sum(w * F.mse_loss(gram(f), gram(t)) for w, f, t in zip(weights, features, targets))
    content = F.l1_loss(features[-1], targets[-1])
    return style, content


@case(lambda n: (torch.randn(2, 3, n, n + 1),))
def total_variation_image_prior(images):
    dh = (images[:, :, 1:, :] - images[:, :, :-1, :]).abs().mean()
    dw = (images[:, :, :, 1:] - images[:, :, :, :-1]).abs().mean()
    return dh + dw


CENTERS = nn.Parameter(torch.randn(4, D))


@case(lambda n: (CENTERS, torch.randn(n, D), torch.arange(n) % 4))
def center_loss_to_class_centers(centers, features, labels):
    batch_centers = centers.index_select(0, labels)
    return 0.5 * (features - batch_centers).pow(2).sum(-1).mean()
