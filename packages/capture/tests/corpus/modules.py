"""nn.Module programs: submodules, containers, parameters and buffers, configs."""

import dataclasses

import torch
import torch.nn.functional as F
from _registry import registry
from torch import nn

PROGRAMS, case = registry()


def one(n):
    return (torch.randn(n, 16),)


def seq(n):
    return (torch.randn(2, n, 16),)


torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Residual(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return x + self.inner(self.norm(x))


class Stack(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.layers = nn.ModuleList([Residual(MLP()) for _ in range(depth)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class IndexedList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])

    def forward(self, x):
        x = self.layers[0](x)
        for i, layer in enumerate(self.layers[1:]):
            x = layer(x) * (i + 1)
        return self.layers[-1](x) + len(self.layers)


class Dict(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(16, 4), "b": nn.Linear(16, 2)})

    def forward(self, x):
        out = {name: head(x) for name, head in self.heads.items()}
        return out, self.heads["a"](x).sum(-1)


class DictKeys(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"p": nn.Linear(16, 4), "q": nn.Linear(16, 4)})

    def forward(self, x):
        total = 0
        for key in self.heads:
            total = total + self.heads[key](x)
        return total


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh())

    def forward(self, x):
        return self.body(x) + self.body[0](x)[:, :16]


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.randn(16))
        self.register_buffer("std", torch.rand(16) + 0.5)
        self.weight = nn.Parameter(torch.randn(16))

    def forward(self, x):
        return (x - self.mean) / self.std * self.weight


class ParameterListModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(16)) for _ in range(3)])

    def forward(self, x):
        for scale in self.scales:
            x = x * scale
        return x


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x)))).flatten(1)


class EvalDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.drop(self.fc(x))


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        if self.training:
            return self.fc(x) * 2
        return self.fc(x)


@dataclasses.dataclass
class BlockConfig:
    dim: int = 16
    heads: int = 4
    causal: bool = True


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.out = nn.Linear(config.dim, config.dim)

    def forward(self, x):
        b, t, d = x.shape
        h = self.config.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.config.causal)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class ManualAttention(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads

        def split(z):
            return z.view(b, t, self.heads, hd).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-2, -1) / hd**0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.dim)
        self.attn = Attention(config)
        self.ln2 = nn.LayerNorm(config.dim)
        self.mlp = MLP(config.dim, 2 * config.dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = nn.ModuleList([Block(BlockConfig()) for _ in range(depth)])
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class SuperCall(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, scale=1.0, *, bias=None):
        y = self.fc(x) * scale
        return y if bias is None else y + bias


class MultiOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        y = self.fc(x)
        return {"logits": y, "probs": y.softmax(-1), "shape": tuple(y.shape)}


class NamedModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        for name in ("a", "b"):
            x = getattr(self, name)(x)
        return x, hasattr(self, "c")


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 16)
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        idx = (x.abs() * 3).long().clamp(max=9)[:, 0]
        return self.fc(self.emb(idx))


class SharedWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(self.fc(x)) + F.linear(x, self.fc.weight)


class NoGradBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        with torch.no_grad():
            target = self.fc(x)
        return self.fc(x) - target


class GRUCellModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(16, 16)

    def forward(self, x):
        h = torch.zeros_like(x)
        for _ in range(2):
            h = self.cell(x, h)
        return h


for _module in (
    MLP(), Residual(MLP()), Stack(), IndexedList(), Dict(), DictKeys(), Seq(), WithBuffers(),
    ParameterListModule(), EvalDropout().eval(), TrainingFlag(), TrainingFlag().eval(),
    SuperCall(16, 16), MultiOutput(), NamedModules(), Embed(), SharedWeights(), NoGradBuffer(),
    KwargsForward(), GRUCellModule(),
):  # fmt: skip
    case(one)(_module)
for _module in (Attention(BlockConfig()), ManualAttention(), Block(BlockConfig()), Transformer()):
    case(seq)(_module)
case(lambda n: (torch.randn(2, 3, n + 4, n + 4),))(Conv().eval())


@case(one)
def module_called_with_kwargs(x):
    return KWARGS_MODULE(x, 2.0, bias=x)


KWARGS_MODULE = KwargsForward()


class MemberIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.blocks = nn.ModuleList([nn.Linear(16, 16), nn.LayerNorm(16)])
        self.register_buffer("offset", torch.randn(16))

    def forward(self, x):
        reg = sum(p.pow(2).sum() for p in self.parameters())
        for _, child in self.named_children():
            if isinstance(child, nn.ModuleList):
                for block in child:
                    x = block(x)
            else:
                x = child(x)
        shapes = {name: tuple(p.shape) for name, p in self.named_parameters()}
        total = sum(b.sum() for b in self.buffers())
        return x + reg + total + len(list(self.modules())), shapes


case(one)(MemberIteration())
