"""The kernel workloads K1-K9 of perf.md: memory-bound fused chains.

Each ``k*`` function returns the workloads of one perf.md row for a device
profile. Kernel bodies are written the way users write them (HF-style upcasts,
chunk/cat RoPE) because that is what a graph compiler sees in practice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bench.workloads.random_ops import resid_dropout_reference
from bench.workloads.spec import Case, DeviceProfile, Workload
from bench.workloads.tensors import randn, randn_like_all, seeded

DROPOUT_P = 0.1


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """K1: ``gelu_tanh(x + bias)`` with ``bias`` broadcast over rows."""
    return F.gelu(x + bias, approximate="tanh")


def bias_gelu_mul(x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """K1 variant: ``gelu_tanh(x + bias) * y``."""
    return F.gelu(x + bias, approximate="tanh") * y


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """K2: the SwiGLU activation ``silu(a) * b``."""
    return F.silu(a) * b


def softmax_fp32(x: torch.Tensor) -> torch.Tensor:
    """K3: row softmax computed in fp32, returned in the input dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """K4/K9: HF-style composed RMSNorm (fp32 upcast, cast back, then scale)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """K5: LayerNorm over the last dimension."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def resid_dropout_layer_norm(
    x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """K6: ``h = x + dropout(r)``, ``y = layer_norm(h)``; returns both (training mode)."""
    h = x + F.dropout(r, p=DROPOUT_P, training=True)
    return h, F.layer_norm(h, (h.shape[-1],), weight, bias, 1e-5)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """K7: mean cross-entropy over rows, computed in fp32."""
    return F.cross_entropy(logits.float(), target)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Swap and negate the two halves of the last dimension (HF RoPE)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """K8: rotary embedding of q and k ``[B, H, T, D]`` with cos/sin ``[T, D]``."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _rows(p: DeviceProfile, cuda: tuple[int, int], cpu: tuple[int, int]) -> tuple[int, int]:
    return p.pick(cuda, cpu, (64, 128))


def k1(p: DeviceProfile) -> list[Workload]:
    """K1: bias + GELU(tanh), and the ``* y`` variant."""
    m, n = _rows(p, (16384, 4096), (4096, 1024))

    def make_plain() -> Case:
        seeded()
        return Case(bias_gelu, (randn((m, n), p.dtype, p.device), randn((n,), p.dtype, p.device)))

    def make_mul() -> Case:
        seeded()
        args = (
            randn((m, n), p.dtype, p.device),
            randn((n,), p.dtype, p.device),
            randn((m, n), p.dtype, p.device),
        )
        return Case(bias_gelu_mul, args)

    return [
        Workload("K1", f"bias+gelu [{m},{n}]", make_plain, memory_bound=True),
        Workload("K1/mul", f"bias+gelu*y [{m},{n}]", make_mul, memory_bound=True),
    ]


def k2(p: DeviceProfile) -> list[Workload]:
    """K2: SwiGLU activation, forward + backward."""
    m, n = _rows(p, (16384, 14336), (2048, 2048))

    def make() -> Case:
        seeded()
        a = randn((m, n), p.dtype, p.device, requires_grad=True)
        b = randn((m, n), p.dtype, p.device, requires_grad=True)
        return Case(swiglu, (a, b), randn_like_all(a))

    return [Workload("K2", f"swiglu fwd+bwd [{m},{n}]", make, train=True, memory_bound=True)]


def k3(p: DeviceProfile) -> list[Workload]:
    """K3: fp32-accumulating softmax over a sweep of row lengths."""
    total = p.pick(2**26, 2**22, 2**13)
    lengths = p.pick([1024, 4096, 16384, 65536, 262144], [256, 4096], [128])
    out = []
    for n in lengths:
        m = total // n

        def make(m: int = m, n: int = n) -> Case:
            seeded()
            return Case(softmax_fp32, (randn((m, n), p.dtype, p.device),))

        out.append(Workload(f"K3/N={n}", f"softmax [{m},{n}]", make, memory_bound=True))
    return out


def _norm_shapes(p: DeviceProfile) -> list[tuple[int, int]]:
    return p.pick([(16384, 4096), (4096, 16384)], [(4096, 1024)], [(64, 128)])


def k4(p: DeviceProfile) -> list[Workload]:
    """K4: RMSNorm, forward alone and forward + backward."""
    out = []
    for m, n in _norm_shapes(p):
        for train in (False, True):

            def make(m: int = m, n: int = n, train: bool = train) -> Case:
                seeded()
                x = randn((m, n), p.dtype, p.device, requires_grad=train)
                w = randn((n,), p.dtype, p.device, requires_grad=train)
                return Case(rms_norm, (x, w), randn_like_all(x) if train else None)

            mode = "train" if train else "fwd"
            out.append(
                Workload(
                    f"K4/{mode}/N={n}",
                    f"rmsnorm {mode} [{m},{n}]",
                    make,
                    train=train,
                    memory_bound=True,
                )
            )
    return out


def k5(p: DeviceProfile) -> list[Workload]:
    """K5: LayerNorm, forward alone and forward + backward."""
    out = []
    for m, n in _norm_shapes(p):
        for train in (False, True):

            def make(m: int = m, n: int = n, train: bool = train) -> Case:
                seeded()
                x = randn((m, n), p.dtype, p.device, requires_grad=train)
                w = randn((n,), p.dtype, p.device, requires_grad=train)
                b = randn((n,), p.dtype, p.device, requires_grad=train)
                return Case(layer_norm, (x, w, b), randn_like_all(x) if train else None)

            mode = "train" if train else "fwd"
            out.append(
                Workload(
                    f"K5/{mode}/N={n}",
                    f"layernorm {mode} [{m},{n}]",
                    make,
                    train=train,
                    memory_bound=True,
                )
            )
    return out


def k6(p: DeviceProfile) -> list[Workload]:
    """K6: residual + dropout + LayerNorm returning (h, y), forward + backward."""
    m, n = _rows(p, (16384, 4096), (4096, 1024))

    def make() -> Case:
        seeded()
        x = randn((m, n), p.dtype, p.device, requires_grad=True)
        r = randn((m, n), p.dtype, p.device, requires_grad=True)
        w = randn((n,), p.dtype, p.device, requires_grad=True)
        b = randn((n,), p.dtype, p.device, requires_grad=True)
        return Case(resid_dropout_layer_norm, (x, r, w, b), randn_like_all(x, x))

    return [
        Workload(
            "K6",
            f"resid+dropout+layernorm fwd+bwd [{m},{n}]",
            make,
            train=True,
            memory_bound=True,
            reference=resid_dropout_reference(DROPOUT_P),
        )
    ]


def k7(p: DeviceProfile) -> list[Workload]:
    """K7: cross-entropy forward + backward over large vocabularies."""
    shapes = p.pick([(8192, 32000), (4096, 128256)], [(512, 32000)], [(16, 1000)])
    out = []
    for m, v in shapes:

        def make(m: int = m, v: int = v) -> Case:
            seeded()
            logits = randn((m, v), p.dtype, p.device, requires_grad=True)
            target = torch.randint(0, v, (m,), device=p.device)
            return Case(cross_entropy, (logits, target))

        out.append(
            Workload(
                f"K7/V={v}", f"cross-entropy fwd+bwd [{m},{v}]", make, train=True, memory_bound=True
            )
        )
    return out


def k8(p: DeviceProfile) -> list[Workload]:
    """K8: RoPE on q and k (chunk/cat formulation)."""
    b, h, t, d = p.pick((8, 32, 2048, 128), (1, 4, 256, 64), (1, 2, 16, 16))

    def make() -> Case:
        seeded()
        q = randn((b, h, t, d), p.dtype, p.device)
        k = randn((b, h, t, d), p.dtype, p.device)
        angle = torch.randn((t, d), device=p.device)
        return Case(rope, (q, k, angle.cos().to(p.dtype), angle.sin().to(p.dtype)))

    return [Workload("K8", f"rope q,k [{b},{h},{t},{d}]", make, memory_bound=True)]


def k9(p: DeviceProfile) -> list[Workload]:
    """K9: RMSNorm over many short rows (qk-norm style)."""
    m, n = p.pick((1048576, 128), (65536, 64), (256, 16))

    def make() -> Case:
        seeded()
        return Case(rms_norm, (randn((m, n), p.dtype, p.device), randn((n,), p.dtype, p.device)))

    return [Workload("K9", f"rmsnorm short rows [{m},{n}]", make, memory_bound=True)]


KERNEL_FACTORIES = (k1, k2, k3, k4, k5, k6, k7, k8, k9)
