"""The model workloads M1-M5 of perf.md (random weights, nothing downloaded)."""

from __future__ import annotations

import torch
from torch import nn

from bench.workloads.nets.gpt import GPT, GPTConfig
from bench.workloads.nets.llama import LlamaConfig, LlamaDecoder, LlamaLayer
from bench.workloads.nets.resnet import BasicBlock, ResNet18, randomize_batchnorm
from bench.workloads.spec import Case, DeviceProfile, Workload
from bench.workloads.tensors import randn, randn_like_all, seeded


def tiny_graph(a: torch.Tensor) -> torch.Tensor:
    """M1: the smallest useful graph, ``(a + 1) * 2`` on 8 elements."""
    return (a + 1) * 2


def m1(p: DeviceProfile) -> list[Workload]:
    """M1: per-call overhead (tiny graph) and a small fp32 MLP at batch 32."""

    def make_tiny() -> Case:
        seeded()
        return Case(tiny_graph, (torch.randn(8, device=p.device),))

    def make_mlp() -> Case:
        seeded()
        mlp = nn.Sequential(
            nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 512)
        )
        return Case(mlp.to(p.device), (torch.randn(32, 512, device=p.device),))

    return [
        Workload("M1/tiny", "(a+1)*2, 8 elems, fp32", make_tiny, overhead=True),
        Workload("M1/mlp", "MLP 512-1024-1024-512, bs 32, fp32", make_mlp, overhead=True),
    ]


def _llama_layer_config(p: DeviceProfile) -> tuple[LlamaConfig, int]:
    cuda = (LlamaConfig(4096, 32, 8, 14336, 2048), 2)
    cpu = (LlamaConfig(256, 4, 2, 704, 128), 2)
    quick = (LlamaConfig(32, 4, 2, 64, 8), 1)
    return p.pick(cuda, cpu, quick)


def m2(p: DeviceProfile) -> list[Workload]:
    """M2: one Llama decoder layer, forward alone and forward + backward."""
    cfg, batch = _llama_layer_config(p)
    out = []
    for train in (False, True):

        def make(train: bool = train) -> Case:
            seeded()
            layer = LlamaLayer(cfg).to(device=p.device, dtype=p.dtype)
            x = randn((batch, cfg.max_seq, cfg.dim), p.dtype, p.device, requires_grad=train)
            return Case(layer, (x,), randn_like_all(x) if train else None)

        mode = "train" if train else "fwd"
        name = f"llama layer {mode} d={cfg.dim} B={batch} T={cfg.max_seq}"
        out.append(Workload(f"M2/{mode}", name, make, train=train))
    return out


def m3(p: DeviceProfile) -> list[Workload]:
    """M3: a GPT-2-style training step (forward, loss, backward)."""
    cfg, batch = p.pick(
        (GPTConfig(12, 12, 768, 50304, 1024), 8),
        (GPTConfig(2, 4, 128, 50304, 64), 4),
        (GPTConfig(1, 2, 32, 128, 8), 2),
    )
    amp = torch.bfloat16 if p.kind == "cuda" else None

    def make() -> Case:
        seeded()
        model = GPT(cfg, amp_dtype=amp).to(p.device)
        idx = torch.randint(0, cfg.vocab, (batch, cfg.block), device=p.device)
        targets = torch.randint(0, cfg.vocab, (batch, cfg.block), device=p.device)
        return Case(model, (idx, targets))

    precision = "bf16 autocast" if amp else "fp32"
    name = f"gpt2 train step L={cfg.n_layers} d={cfg.dim} B={batch} T={cfg.block} {precision}"
    return [Workload("M3", name, make, train=True)]


def _vision(module: nn.Module, p: DeviceProfile) -> nn.Module:
    randomize_batchnorm(module)
    module = module.eval().to(device=p.device, dtype=p.dtype)
    if p.kind == "cuda":
        module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return module


def _image(shape: tuple[int, int, int, int], p: DeviceProfile) -> torch.Tensor:
    x = randn(shape, p.dtype, p.device)
    return x.to(memory_format=torch.channels_last) if p.kind == "cuda" else x


def m4(p: DeviceProfile) -> list[Workload]:
    """M4: a ResNet BasicBlock and a whole ResNet-18, inference."""
    block_batch, channels, side = p.pick((64, 64, 56), (1, 64, 56), (1, 8, 8))
    width, image = p.pick((64, 224), (64, 224), (8, 32))

    def make_block() -> Case:
        seeded()
        block = _vision(BasicBlock(channels, channels), p)
        return Case(block, (_image((block_batch, channels, side, side), p),))

    def make_resnet() -> Case:
        seeded()
        return Case(_vision(ResNet18(width), p), (_image((1, 3, image, image), p),))

    return [
        Workload("M4/block", f"resnet block bs {block_batch} {channels}x{side}x{side}", make_block),
        Workload("M4/resnet18", f"resnet18 (width {width}) bs 1 {image}px", make_resnet),
    ]


def m5(p: DeviceProfile) -> list[Workload]:
    """M5: one decode step of a 4-layer Llama with a static KV cache, batch 1."""
    cfg = p.pick(
        LlamaConfig(2048, 32, 8, 8192, 2048, n_layers=4),
        LlamaConfig(256, 4, 2, 704, 2048, n_layers=4),
        LlamaConfig(32, 4, 2, 64, 32, n_layers=2, vocab=128),
    )

    def make() -> Case:
        seeded()
        model = LlamaDecoder(cfg, batch=1).to(device=p.device, dtype=p.dtype)
        tokens = torch.randint(0, cfg.vocab, (1, 1), device=p.device)
        pos = torch.tensor([cfg.max_seq // 2], device=p.device)
        return Case(model, (tokens, pos))

    name = f"decode step L={cfg.n_layers} d={cfg.dim} cache={cfg.max_seq} bs 1"
    return [Workload("M5", name, make, overhead=True)]


MODEL_FACTORIES = (m1, m2, m3, m4, m5)
