"""Small training workloads and helpers shared by the training tests.

Every model is tiny (a compile must stay cheap on a 2-core CI machine) but exercises a
real training construct: matmuls with bias, LayerNorm and RMSNorm, attention through
``F.scaled_dot_product_attention``, GELU and SwiGLU, convolution with BatchNorm in
training mode, dropout, frozen parameters and detached branches.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """Linear -> GELU -> Linear -> tanh -> Linear."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(F.gelu(self.fc1(x)))))


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale (as in LLaMA)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TransformerBlock(nn.Module):
    """Pre-norm block: LayerNorm -> causal SDPA attention; RMSNorm -> GELU MLP plus a
    SwiGLU MLP (both residual)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rms = RMSNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        self.gate = nn.Linear(dim, 2 * dim, bias=False)
        self.value = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.ln(x)).split(dim, -1)
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, seq, dim))
        y = self.rms(x)
        x = x + self.down(F.gelu(self.up(y)))
        return x + self.out(F.silu(self.gate(y)) * self.value(y))


class GPTBlock(nn.Module):
    """A pre-LN GPT block: causal attention and a GELU MLP, tanh-approximated by default
    (the bench GPT's layer; ``approximate="none"``: erf, see :class:`PreLNBlock`)."""

    def __init__(self, dim: int, heads: int, approximate: str = "tanh") -> None:
        super().__init__()
        self.heads, self.approximate = heads, approximate
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate=self.approximate))


class PreLNBlock(GPTBlock):
    """A pre-LN transformer block with an erf GELU (the dynamic training tests' block)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__(width, heads, approximate="none")


class TwoBlocks(nn.Module):
    """Two transformer blocks and a mean-squared-error loss against a target."""

    def __init__(self) -> None:
        super().__init__()
        self.first = TransformerBlock()
        self.second = TransformerBlock()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.second(self.first(x)), target)


class ConvBN(nn.Module):
    """Conv2d -> BatchNorm2d (training mode: running stats are updated) -> ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Dropout(nn.Module):
    """Linear -> dropout(p) (functional, always in training mode)."""

    def __init__(self, dim: int = 64, p: float = 0.5) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.lin(x), self.p, training=True)


class FrozenDetached(nn.Module):
    """A frozen weight (``requires_grad=False``) and a branch cut by ``detach``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.a.weight.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(h) + torch.tanh(h.detach()) * self.b(x).detach().sigmoid()


def twin(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """An independent copy of ``model`` (optionally cast), same parameters and buffers."""
    other = copy.deepcopy(model)
    return other.to(dtype) if dtype is not None else other


def leaf(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A fresh leaf with ``t``'s values (cast) and ``t``'s ``requires_grad``."""
    out = t.detach().to(dtype or t.dtype).clone()
    return out.requires_grad_(t.requires_grad)


def grads(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor | None]:
    """``.grad`` of every tensor, in order."""
    return [t.grad for t in tensors]


def step(
    fn: Callable[..., torch.Tensor], model: nn.Module | None, inputs: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """One forward + backward of ``fn(*inputs)`` against a fixed random cotangent; the
    output and the gradients of every input, then every parameter of ``model``."""
    out = fn(*inputs)
    generator = torch.Generator().manual_seed(1234)
    cotangent = torch.randn(out.shape, generator=generator, dtype=torch.float64)
    out.backward(cotangent.to(out.dtype))
    params = list(model.parameters()) if model is not None else []
    return out.detach(), grads([*inputs, *params])


def assert_matches(
    actual: Sequence[torch.Tensor | None],
    expected: Sequence[torch.Tensor | None],
    reference: Sequence[torch.Tensor | None] | None = None,
    what: str = "value",
) -> None:
    """Values (outputs, gradients) agree: both None, or close. With a float64
    ``reference`` (for float32 and below), our error must stay within 3x eager's + 1e-5;
    otherwise ``torch.testing.assert_close`` decides."""
    assert len(actual) == len(expected), f"{what}: {len(actual)} values vs {len(expected)}"
    refs = reference if reference is not None else [None] * len(expected)
    for index, (got, want, ref) in enumerate(zip(actual, expected, refs, strict=True)):
        label = f"{what}[{index}]"
        if want is None or got is None:
            assert got is None and want is None, f"{label}: {got is None=} but {want is None=}"
            continue
        assert got.shape == want.shape and got.dtype == want.dtype, label
        if ref is None or want.dtype == torch.float64:
            torch.testing.assert_close(got, want, msg=lambda m, label=label: f"{label}: {m}")
            continue
        ours = float((got.double() - ref).abs().max())
        eagers = float((want.double() - ref).abs().max())
        assert ours <= 3 * eagers + 1e-5, f"{label}: error {ours:.3g} vs fp64, eager's {eagers:.3g}"


def lift_to_inputs(module: nn.Module) -> tuple[torch.fx.GraphModule, list[str]]:
    """``module`` traced by ``torch.fx`` down to functional calls, with every parameter
    and buffer turned into a placeholder after the module's own inputs.

    The returned graph takes ``(*inputs, *[module.get_parameter_or_buffer(n) for n in
    names])``; this is how a graph is fed to the stages without the capture stage (what
    Dynamo's AOT path does with ``functional_call``).
    """

    class Everything(torch.fx.Tracer):
        proxy_buffer_attributes = True  # buffer updates (``add_``) go into the graph

        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return False

    # Norm layers check ``input.dim()`` in Python, which a symbolic trace cannot branch
    # on; the check is skipped while tracing (shapes are fixed by the example inputs).
    checked = [m for m in module.modules() if hasattr(m, "_check_input_dim")]
    for m in checked:
        m._check_input_dim = lambda _input: None  # type: ignore[method-assign]
    try:
        graph = Everything().trace(module)
    finally:
        for m in checked:
            del m._check_input_dim
    anchor = [n for n in graph.nodes if n.op == "placeholder"][-1]
    lifted: dict[str, torch.fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        target = str(node.target)
        if target not in lifted:
            with graph.inserting_after(anchor):
                anchor = lifted[target] = graph.placeholder(target.replace(".", "_"))
        node.replace_all_uses_with(lifted[target])
        graph.erase_node(node)
    graph.lint()
    return torch.fx.GraphModule(module, graph), list(lifted)


def module_tensors(module: nn.Module, names: Sequence[str]) -> list[torch.Tensor]:
    """The parameters and buffers of ``module`` called ``names`` (dotted), in order."""
    state: dict[str, Any] = dict(module.named_parameters())
    state.update(module.named_buffers())
    return [state[name] for name in names]
