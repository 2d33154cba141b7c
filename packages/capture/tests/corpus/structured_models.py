"""Model code outside language and vision: graph neural networks over a fixed edge list
(GCN normalisation, GAT edge softmax, mean aggregation), recommendation (factorisation
machines, DLRM interactions, two-tower scoring), tabular feature tokenisers, knowledge-graph
scores with complex embeddings, optimal transport (Sinkhorn), spectral-norm power iteration,
pixel shuffle super-resolution, neural ODE steps, normalising-flow couplings, and
reinforcement-learning losses (GAE, PPO clipping, discounted returns, soft target updates)."""

import copy
import math

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


torch.manual_seed(41)
D = 8


def graph(n):
    num_nodes = 2 * n
    src = torch.arange(num_nodes)
    edge_index = torch.stack(
        [torch.cat([src, src]), torch.cat([(src + 1) % num_nodes, (src + 3) % num_nodes])]
    )
    return (torch.randn(num_nodes, D), edge_index)


class GCNConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x, edge_index):
        num_nodes = x.size(0)
        loops = torch.arange(num_nodes)
        edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        row, col = edge_index
        deg = torch.zeros(num_nodes).index_add_(0, col, torch.ones(col.size(0)))
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0)
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        x = self.lin(x)
        out = torch.zeros_like(x).index_add_(0, col, x[row] * norm[:, None])
        return out + self.bias


GCN = nn.ModuleList([GCNConv(D, D), GCNConv(D, 4)])


@case(lambda n: (GCN, *graph(n)))
def gcn_symmetric_normalisation(layers, x, edge_index):
    x = F.relu(layers[0](x, edge_index))
    return layers[1](x, edge_index).log_softmax(-1)


class GATConv(nn.Module):
    def __init__(self, heads=2):
        super().__init__()
        self.heads = heads
        self.lin = nn.Linear(D, heads * D, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, D))
        self.att_dst = nn.Parameter(torch.randn(1, heads, D))

    def forward(self, x, edge_index):
        n = x.size(0)
        src, dst = edge_index
        h = self.lin(x).view(n, self.heads, D)
        alpha = ((h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst]).sigmoid()
        alpha = F.leaky_relu(alpha, 0.2)
        index = dst[:, None].expand(-1, self.heads)
        alpha_max = torch.full((n, self.heads), float("-inf")).scatter_reduce(
            0, index, alpha, reduce="amax", include_self=True
        )
        alpha = (alpha - alpha_max[dst]).exp()
        denom = torch.zeros(n, self.heads).scatter_add(0, index, alpha)
        alpha = alpha / (denom[dst] + 1e-16)
        out = torch.zeros(n, self.heads, D).index_add_(0, dst, h[src] * alpha[..., None])
        return out.mean(1)


GAT = GATConv()


@case(lambda n: (GAT, *graph(n)))
def gat_edge_softmax_by_scatter(conv, x, edge_index):
    return conv(x, edge_index)


@case(graph)
def graphsage_mean_aggregation_and_pooling(x, edge_index):
    src, dst = edge_index
    summed = torch.zeros_like(x).index_add_(0, dst, x[src])
    count = torch.zeros(x.size(0)).index_add_(0, dst, torch.ones(dst.size(0))).clamp(min=1)
    h = torch.cat([x, summed / count[:, None]], dim=-1)
    batch = torch.arange(x.size(0)) % 2
    graph_sizes = torch.zeros(2).index_add_(0, batch, torch.ones(batch.size(0)))
    pooled = torch.zeros(2, h.size(1)).index_add_(0, batch, h) / graph_sizes[:, None]
    return F.normalize(h, dim=-1), pooled


@case(lambda n: (torch.randn(n, 6, 4),))
def factorisation_machine_second_order(embeddings):
    square_of_sum = embeddings.sum(1).pow(2)
    sum_of_square = embeddings.pow(2).sum(1)
    return 0.5 * (square_of_sum - sum_of_square).sum(1, keepdim=True)


@case(lambda n: (torch.randn(n, 4), torch.randn(n, 5, 4)))
def dlrm_dot_interaction_upper_triangle(dense, sparse):
    t = torch.cat([dense.unsqueeze(1), sparse], dim=1)
    z = torch.bmm(t, t.transpose(1, 2))
    li, lj = torch.triu_indices(t.shape[1], t.shape[1], offset=1)
    return torch.cat([dense, z[:, li, lj]], dim=1)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.EmbeddingBag(50, D, mode="mean")
        self.item = nn.Embedding(40, D)
        self.temperature = nn.Parameter(torch.tensor(0.05))

    def forward(self, history, offsets, items):
        u = F.normalize(self.user(history, offsets), dim=-1)
        v = F.normalize(self.item(items), dim=-1)
        logits = u @ v.T / self.temperature.clamp(min=0.01)
        return F.cross_entropy(logits, torch.arange(logits.shape[0])), logits


TWO_TOWER = TwoTower()


@case(
    lambda n: (
        TWO_TOWER,
        torch.randint(0, 50, (3 * n,)),
        torch.arange(n) * 3,
        torch.randint(0, 40, (n,)),
    )
)
def two_tower_in_batch_negatives(model, history, offsets, items):
    return model(history, offsets, items)


class FeatureTokenizer(nn.Module):
    def __init__(self, n_num=3, cardinalities=(4, 6)):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_num, D))
        self.bias = nn.Parameter(torch.randn(n_num, D))
        self.register_buffer("category_offsets", torch.tensor([0, *cardinalities[:-1]]).cumsum(0))
        self.category_embeddings = nn.Embedding(sum(cardinalities), D)
        self.cls = nn.Parameter(torch.randn(1, 1, D))

    def forward(self, x_num, x_cat):
        num_tokens = self.weight[None] * x_num[:, :, None] + self.bias[None]
        cat_tokens = self.category_embeddings(x_cat + self.category_offsets[None])
        tokens = torch.cat([num_tokens, cat_tokens], dim=1)
        return torch.cat([self.cls.expand(tokens.shape[0], -1, -1), tokens], dim=1)


TOKENIZER = FeatureTokenizer()


@case(
    lambda n: (
        TOKENIZER,
        torch.randn(n, 3),
        torch.stack([torch.arange(n) % 4, torch.arange(n) % 6], 1),
    )
)
def tabular_feature_tokenizer_with_offsets(tokenizer, x_num, x_cat):
    return tokenizer(x_num, x_cat)


@case(lambda n: (torch.randn(n, 4, 2), torch.randn(n, 4, 2), torch.randn(n, 4, 2)))
def complex_knowledge_graph_scores(head, relation, tail):
    h = torch.view_as_complex(head.contiguous())
    r = torch.view_as_complex(relation.contiguous())
    t = torch.view_as_complex(tail.contiguous())
    complex_score = torch.real(h * r * torch.conj(t)).sum(-1)
    transe = -(head + relation - tail).flatten(1).norm(p=1, dim=-1)
    return complex_score, transe


@case(lambda n: (torch.rand(n, n + 1),))
def sinkhorn_iterations_fixed_count(cost):
    epsilon, iterations = 0.1, 20
    log_k = -cost / epsilon
    log_u = torch.zeros(cost.shape[0])
    log_v = torch.zeros(cost.shape[1])
    log_a = torch.full((cost.shape[0],), -math.log(cost.shape[0]))
    log_b = torch.full((cost.shape[1],), -math.log(cost.shape[1]))
    for _ in range(iterations):
        log_u = log_a - torch.logsumexp(log_k + log_v[None, :], dim=1)
        log_v = log_b - torch.logsumexp(log_k + log_u[:, None], dim=0)
    plan = torch.exp(log_u[:, None] + log_k + log_v[None, :])
    return plan, (plan * cost).sum(), plan.sum(0)


class SpectralNormLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(D, D))
        self.register_buffer("u", F.normalize(torch.randn(D), dim=0))

    def forward(self, x, power_iterations=1):
        with torch.no_grad():
            u = self.u
            for _ in range(power_iterations):
                v = F.normalize(self.weight.t() @ u, dim=0)
                u = F.normalize(self.weight @ v, dim=0)
            self.u.copy_(u)
        sigma = u @ self.weight @ v
        return x @ (self.weight / sigma).t()


@case(lambda n: (copy.deepcopy(SpectralNormLinear()), torch.randn(n, D)))
def spectral_norm_power_iteration_updates_buffer(layer, x):
    return layer(x, power_iterations=2), layer.u


@case(lambda n: (nn.Conv2d(3, 3 * 4, 3, padding=1), torch.randn(1, 3, n, n)))
def pixel_shuffle_super_resolution(conv, x):
    up = F.pixel_shuffle(conv(x), 2)
    return up, F.pixel_unshuffle(up, 2).shape


@case(lambda n: (nn.Sequential(nn.Linear(D, D), nn.Tanh()), torch.randn(n, D)))
def neural_ode_rk4_fixed_steps(func, y0):
    t0, t1, steps = 0.0, 1.0, 4
    h = (t1 - t0) / steps
    y = y0
    for _ in range(steps):
        k1 = func(y)
        k2 = func(y + 0.5 * h * k1)
        k3 = func(y + 0.5 * h * k2)
        k4 = func(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


class AffineCoupling(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D // 2, D), nn.ReLU(), nn.Linear(D, D))
        self.register_buffer("mask_flip", torch.tensor(False))

    def forward(self, x, reverse=False):
        x_a, x_b = x.chunk(2, dim=-1)
        log_s, t = self.net(x_a).chunk(2, dim=-1)
        log_s = torch.tanh(log_s)
        if not reverse:
            y_b = x_b * log_s.exp() + t
            return torch.cat([x_a, y_b], dim=-1), log_s.sum(-1)
        y_b = (x_b - t) * (-log_s).exp()
        return torch.cat([x_a, y_b], dim=-1), -log_s.sum(-1)


COUPLING = AffineCoupling()


@case(lambda n: (COUPLING, torch.randn(n, D)))
def affine_coupling_forward_and_inverse(coupling, x):
    y, logdet = coupling(x)
    x_back, inv_logdet = coupling(y, reverse=True)
    log_prob = -0.5 * (y**2).sum(-1) - 0.5 * D * torch.log(torch.tensor(2 * torch.pi)) + logdet
    return x_back, logdet + inv_logdet, log_prob


@case(
    lambda n: (
        torch.randn(2, n),
        torch.randn(2, n + 1),
        torch.tensor([[0.0] * (n - 1) + [1.0], [0.0] * n]),
    )
)
def generalised_advantage_estimation(rewards, values, dones):
    gamma, lam = 0.99, 0.95
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        next_non_terminal = 1.0 - dones[:, t]
        delta = rewards[:, t] + gamma * values[:, t + 1] * next_non_terminal - values[:, t]
        last_gae = delta + gamma * lam * next_non_terminal * last_gae
        advantages[:, t] = last_gae
    returns = advantages + values[:, :-1]
    return advantages, returns


@case(
    lambda n: (
        torch.randn(n, requires_grad=True),
        torch.randn(n),
        torch.randn(n),
        torch.randn(n, requires_grad=True),
        torch.randn(n),
    )
)
def ppo_clipped_objective(new_log_probs, old_log_probs, advantages, values, returns):
    clip_eps, vf_coef = 0.2, 0.5
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    ratio = torch.exp(new_log_probs - old_log_probs)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
    policy_loss = -torch.min(surr1, surr2).mean()
    value_loss = F.mse_loss(values, returns)
    approx_kl = ((ratio - 1) - (new_log_probs - old_log_probs)).mean().detach()
    clip_fraction = ((ratio - 1).abs() > clip_eps).float().mean()
    return policy_loss + vf_coef * value_loss, approx_kl, clip_fraction


def critics(n):
    online = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, 1))
    target = copy.deepcopy(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(0.1)
    return (online, target, torch.randn(n, D), torch.randn(n), torch.rand(n).round())


@case(critics)
def td_target_and_polyak_soft_update(online, target, next_states, rewards, dones):
    gamma, tau = 0.99, 0.005
    with torch.no_grad():
        td_target = rewards + gamma * (1 - dones) * target(next_states).squeeze(-1)
    loss = F.smooth_l1_loss(online(next_states).squeeze(-1), td_target)
    with torch.no_grad():
        for p_target, p in zip(target.parameters(), online.parameters()):
            p_target.mul_(1 - tau).add_(p, alpha=tau)
    return loss, td_target


@case(lambda n: (torch.randn(2, n),))
def discounted_returns_by_reverse_cumsum(rewards):
    gamma = 0.9
    steps = torch.arange(rewards.shape[1], dtype=torch.float)
    discounts = gamma**steps
    weighted = (rewards * discounts).flip(-1).cumsum(-1).flip(-1)
    return weighted / discounts
