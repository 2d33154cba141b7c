"""Tensor arithmetic, torch functions, tensor methods, Python scalars and constants."""

import math
import operator

import torch
import torch.nn.functional as F
from _registry import registry

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 8),)


def two(n):
    return (torch.randn(n, 8), torch.randn(n, 8))


def vec(n):
    return (torch.randn(n),)


SCALE = 0.5


@case(two)
def add_mul(x, y):
    return x + y * 2


@case(two)
def sub_div(x, y):
    return (x - y) / (y.abs() + 1)


@case(one)
def neg_pow(x):
    return -(x**2) + x**3


@case(one)
def softmax_gelu(x):
    return torch.softmax(F.gelu(x + 1), -1)


@case(one)
def methods_chain(x):
    return x.relu().sum(dim=-1).exp().log()


@case(one)
def reductions(x):
    return x.sum(), x.mean(0), x.amax(-1), x.var(0)


@case(one)
def max_with_indices(x):
    values, indices = x.max(dim=-1)
    return values * 2, indices


@case(two)
def matmul_transpose(x, y):
    return x @ y.T


@case(one)
def matmul_mT(x):
    return x.unsqueeze(0).mT @ x.unsqueeze(0)


@case(one)
def reshape_views(x):
    return x.reshape(-1, 2).permute(1, 0).contiguous().view(-1)


@case(one)
def python_scalars(x):
    a = 3
    b = 2.5
    return x * a + b - a // 2 + a % 2


@case(one)
def global_constant(x):
    return x * SCALE


@case(one)
def comparisons(x):
    return (x > 0) & (x < 1), x == x, x != 0


@case(one)
def where_clamp(x):
    return torch.where(x > 0, x, torch.zeros_like(x)).clamp(-1, 1)


@case(one)
def cat_stack(x):
    return torch.cat([x, x * 2], dim=1), torch.stack([x, -x])


@case(one)
def split_chunk(x):
    a, b = x.chunk(2, dim=-1)
    c, d = torch.split(x, 4, dim=1)
    return a * b + c - d


@case(one)
def dtype_conversion(x):
    return x.to(torch.float64).sum(), x.double().half().float()


@case(one)
def int_tensor_ops(x):
    i = (x * 10).long()
    return i // 3, i % 3, i.float() / 2


@case(one)
def new_tensors(x):
    return x + torch.ones(x.shape[-1]), torch.zeros(2, 3), torch.arange(5) * 2


@case(one)
def full_like_and_empty(x):
    return torch.full_like(x, 3.0) + torch.ones_like(x), torch.eye(3)


@case(one)
def math_module(x):
    return x * math.sqrt(2.0) + math.pi / math.e + math.floor(2.7)


@case(two)
def operator_module(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.neg(y)


@case(one)
def shape_arithmetic(x):
    n, d = x.shape
    return x.view(n * d) / (n + d)


@case(one)
def size_dim_numel(x):
    return x.reshape(x.size(0), x.size(-1) // 2, 2), x.dim(), x.numel(), x.ndim


@case(one)
def dtype_device_attributes(x):
    y = torch.zeros(3, dtype=x.dtype, device=x.device)
    return y, str(x.dtype), x.is_floating_point()


@case(one)
def layer_norm_functional(x):
    return F.layer_norm(x, (x.shape[-1],)), F.normalize(x, dim=-1)


@case(one)
def activations(x):
    return F.silu(x) + F.elu(x) + torch.tanh(x) + torch.sigmoid(x) + F.leaky_relu(x, 0.1)


@case(one)
def cumulative(x):
    return x.cumsum(0), torch.cumprod(x[:, :2], dim=1), x.sort(dim=-1).values


@case(one)
def einsum_bmm(x):
    y = x.unsqueeze(0)
    return torch.einsum("bij,bkj->bik", y, y), torch.bmm(y, y.transpose(1, 2))


@case(one)
def logsumexp_softplus(x):
    return torch.logsumexp(x, dim=-1), F.softplus(x), F.log_softmax(x, -1)


@case(vec)
def vector_dot_outer(x):
    return torch.dot(x, x), torch.outer(x, x), torch.linalg.norm(x)


@case(one)
def nan_inf(x):
    y = x / 0.0
    return torch.nan_to_num(y, nan=0.0, posinf=1.0, neginf=-1.0)


@case(one)
def complex_constant_expr(x):
    scale = 1.0 / math.sqrt(x.shape[-1])
    bias = sum([1, 2, 3]) * 0.1
    return x * scale + bias


@case(two)
def inplace_intermediates(x, y):
    z = x * 2
    z.add_(y)
    z.mul_(0.5)
    z += 1
    return z


@case(one)
def tensor_from_python_values(x):
    return x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
