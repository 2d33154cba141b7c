"""Numerical pieces of model and training code: stable log-sum-exp and sigmoid losses,
half-precision softmax done in float32, Gaussian, Poisson and multivariate-normal
likelihoods (Cholesky solves), sparsemax, Gumbel top-k, orthogonal parametrisations
(Cayley, Householder), Muon's Newton-Schulz orthogonalisation, SVD-initialised low-rank
adapters, Welford merges, calibration error with bucketize, and pairwise AUROC."""

import math

import torch
import torch.nn.functional as F
from _registry import registry

PROGRAMS, case = registry()


torch.manual_seed(46)
D = 6


@case(lambda n: (torch.randn(n, D), torch.arange(n * D).view(n, D) % 3 != 0))
def masked_logsumexp_with_empty_rows(scores, mask):
    mask = mask.clone()
    mask[0] = False
    masked = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(masked, dim=-1)
    return torch.nan_to_num(lse, neginf=0.0), torch.isinf(lse).sum()


@case(lambda n: (torch.randn(n, D) * 30, (torch.rand(n, D) > 0.5).float()))
def stable_sigmoid_cross_entropy_by_hand(x, z):
    manual = torch.clamp(x, min=0) - x * z + torch.log1p(torch.exp(-torch.abs(x)))
    return manual.mean(), F.binary_cross_entropy_with_logits(x, z)


@case(lambda n: (torch.randn(2, n, n).half(), torch.ones(n, n).tril().bool()))
def half_precision_softmax_in_float32(scores, mask):
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    return probs, probs.dtype


# (by hand: F.gaussian_nll_loss checks that no variance is negative, a branch on values)
@case(lambda n: (torch.randn(n, 2), torch.randn(n, 2), torch.rand(n, 2) + 0.1))
def gaussian_nll_with_clamped_variance(target, mean, var):
    var = var.clamp(min=1e-6)
    return 0.5 * (torch.log(var) + (target - mean) ** 2 / var + math.log(2 * math.pi)).mean()


@case(lambda n: (torch.randn(n, 3), torch.poisson(torch.full((n, 3), 2.0))))
def poisson_and_tweedie_count_losses(log_rate, counts):
    poisson = F.poisson_nll_loss(log_rate, counts, log_input=True)
    p = 1.5
    mu = log_rate.exp()
    tweedie = (-counts * mu.pow(1 - p) / (1 - p) + mu.pow(2 - p) / (2 - p)).mean()
    return poisson, tweedie


@case(lambda n: (torch.randn(n, 3), torch.randn(3, 3)))
def multivariate_normal_log_prob_by_cholesky(x, a):
    covariance = a @ a.T + 0.5 * torch.eye(3)
    mean = torch.zeros(3)
    scale_tril = torch.linalg.cholesky(covariance)
    diff = (x - mean).unsqueeze(-1)
    solved = torch.linalg.solve_triangular(scale_tril, diff, upper=False).squeeze(-1)
    mahalanobis = solved.pow(2).sum(-1)
    half_log_det = scale_tril.diagonal().log().sum()
    return -0.5 * (3 * math.log(2 * math.pi) + mahalanobis) - half_log_det


@case(lambda n: (torch.randn(n, D),))
def sparsemax_by_sort_and_cumsum(z):
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    z_cumsum = z_sorted.cumsum(-1)
    support = 1 + k * z_sorted > z_cumsum
    k_z = support.sum(dim=-1, keepdim=True)
    tau = (z_cumsum.gather(-1, k_z - 1) - 1) / k_z.to(z.dtype)
    return torch.clamp(z - tau, min=0)


@case(lambda n: (torch.randn(2, 10), torch.rand(2, 10).clamp(1e-6, 1 - 1e-6)))
def gumbel_top_k_without_replacement(logits, uniform):
    perturbed = logits - torch.log(-torch.log(uniform))
    return perturbed.topk(3, dim=-1).indices


@case(lambda n: (torch.randn(n, n),))
def cayley_orthogonal_parametrisation(a):
    skew = a - a.T
    eye = torch.eye(a.shape[0])
    q = torch.linalg.solve(eye + skew, eye - skew)
    return q, (q @ q.T - eye).abs().max()


@case(lambda n: (torch.randn(3, n),))
def householder_product_of_reflections(vectors):
    q = torch.eye(vectors.shape[1])
    for v in vectors:
        v = v / v.norm()
        q = q - 2 * torch.outer(q @ v, v)
    return q


@case(lambda n: (torch.randn(n, 2 * n),))
def muon_newton_schulz_orthogonalisation(grad):
    a, b, c = (3.4445, -4.7750, 2.0315)
    x = grad.bfloat16()
    transposed = grad.size(0) > grad.size(1)
    if transposed:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(5):
        gram = x @ x.T
        poly = b * gram + c * gram @ gram
        x = a * x + poly @ x
    if transposed:
        x = x.T
    return x.float()


@case(lambda n: (torch.randn(n, D),))
def svd_initialised_low_rank_adapter(weight):
    rank = 2
    u, s, vh = torch.linalg.svd(weight, full_matrices=False)
    sqrt_s = s[:rank].sqrt()
    lora_a = sqrt_s[:, None] * vh[:rank]
    lora_b = u[:, :rank] * sqrt_s[None, :]
    residual = weight - lora_b @ lora_a
    return (lora_b @ lora_a + residual - weight).abs().max(), s[:rank] / s.sum()


@case(lambda n: (torch.randn(n, D), torch.randn(n + 2, D) + 1))
def welford_merge_of_two_batches(a, b):
    count_a, mean_a, m2_a = a.shape[0], a.mean(0), a.var(0, unbiased=False) * a.shape[0]
    count_b, mean_b, m2_b = b.shape[0], b.mean(0), b.var(0, unbiased=False) * b.shape[0]
    count = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * count_b / count
    m2 = m2_a + m2_b + delta**2 * count_a * count_b / count
    return mean, m2 / count, torch.cat([a, b]).var(0, unbiased=False)


@case(lambda n: (torch.randn(4 * n, 3), torch.arange(4 * n) % 3))
def expected_calibration_error_by_bucketize(logits, labels):
    n_bins = 5
    probs = logits.softmax(-1)
    confidences, predictions = probs.max(-1)
    accuracies = (predictions == labels).float()
    boundaries = torch.linspace(0, 1, n_bins + 1)[1:-1]
    bins = torch.bucketize(confidences, boundaries)
    one_hot = F.one_hot(bins, n_bins).float()
    counts = one_hot.sum(0)
    bin_conf = (one_hot * confidences[:, None]).sum(0) / counts.clamp(min=1)
    bin_acc = (one_hot * accuracies[:, None]).sum(0) / counts.clamp(min=1)
    return (counts / confidences.numel() * (bin_conf - bin_acc).abs()).sum()


@case(lambda n: (torch.randn(3 * n), torch.arange(3 * n) % 2))
def pairwise_auroc(scores, labels):
    positive = labels == 1
    pos_scores = scores[:, None]
    neg_scores = scores[None, :]
    pair_mask = positive[:, None] & ~positive[None, :]
    wins = (pos_scores > neg_scores).float() + 0.5 * (pos_scores == neg_scores).float()
    return (wins * pair_mask).sum() / pair_mask.sum()


@case(lambda n: (torch.randn(n, D).half(),))
def float64_accumulation_of_half_values(x):
    total = x.double().sum(0).to(x.dtype)
    norm = torch.sqrt(x.float().pow(2).sum(-1) + 1e-12)
    return total, norm, F.normalize(x.float(), dim=-1)


@case(lambda n: (torch.randn(n, D),))
def gelu_exact_against_tanh_and_sigmoid_approximations(x):
    exact = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    tanh = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    sigmoid = x * torch.sigmoid(1.702 * x)
    return (
        (exact - F.gelu(x)).abs().max(),
        (tanh - exact).abs().max(),
        (sigmoid - exact).abs().max(),
    )


@case(lambda n: (torch.randn(n, D), 0.3))
def cosine_annealed_temperature_applied(logits, progress):
    t_min, t_max = 0.1, 1.0
    temperature = t_min + 0.5 * (t_max - t_min) * (1 + math.cos(math.pi * progress))
    return (logits / temperature).softmax(-1), temperature


@case(lambda n: (torch.randn(n, 4), torch.randn(n, 4) * 0.5 + 1.0))
def low_rank_plus_diagonal_reparameterised_sample(mean, log_diag):
    factor = torch.linspace(-1, 1, 8).view(4, 2)
    eps_low = torch.linspace(0, 1, mean.shape[0] * 2).view(-1, 2)
    eps_diag = torch.linspace(1, -1, mean.shape[0] * 4).view(-1, 4)
    sample = mean + eps_low @ factor.T + log_diag.exp().sqrt() * eps_diag
    covariance = factor @ factor.T + torch.diag_embed(log_diag.exp())
    return sample, torch.logdet(covariance)
