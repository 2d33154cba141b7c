"""Data-parallel training of a small GPT with a torchstrata-compiled model, under
PyTorch's own DistributedDataParallel (or FSDP2 with ``--fsdp``).

    torchrun --nproc-per-node 2 examples/train_ddp.py              # CPU, gloo
    torchrun --nproc-per-node 2 examples/train_ddp.py --fsdp       # FSDP2 instead of DDP
    torchrun --nproc-per-node 2 examples/train_ddp.py --compiler eager
    torchrun --nproc-per-node 2 examples/train_ddp.py --device cpu  # gloo even with GPUs

(``--master-port N`` when another job holds torchrun's default port 29500.)

On a machine with CUDA GPUs the same code runs one process per GPU with NCCL
(``--device auto``, the default; ``--device cpu`` keeps gloo on the CPU); nothing else
changes (``torchstrata.runtime.compile`` sees the DDP/FSDP module either way).
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import torchstrata.runtime as rt


class Block(nn.Module):
    """Pre-norm causal self-attention and GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """Token embedding, blocks, final norm and head; returns logits."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: CUDA (NCCL) when present, else the CPU (gloo)",
    )
    parser.add_argument("--compiler", choices=("torchstrata", "eager"), default="torchstrata")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=4)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address.
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda but CUDA is not available")
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(
                f"LOCAL_RANK {local_rank} but {torch.cuda.device_count()} GPU(s): start at "
                "most one process per GPU (--nproc-per-node)"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    try:
        train(args, device, backend)
    finally:
        # Free the DDP/FSDP modules while the process group is still registered: a gloo
        # group whose last reference a DDP reducer drops can deadlock on the GIL in its
        # destructor (pytorch/pytorch#56297).
        gc.collect()
        dist.destroy_process_group()


def train(args: argparse.Namespace, device: torch.device, backend: str) -> None:
    """Wrap the model with DDP (or FSDP2), compile it and train ``args.steps`` steps."""
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT(args.vocab, args.dim, args.heads, args.layers).to(device)
    if args.fsdp:
        # the mesh on the chosen device (fully_shard's default follows the accelerator)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped: nn.Module = model
    else:
        wrapped = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    run = rt.compile(wrapped) if args.compiler == "torchstrata" else wrapped
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    generator = torch.Generator().manual_seed(rank)  # each rank its own data
    start = time.perf_counter()
    for step in range(args.steps):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator)
        tokens = tokens.to(device)
        logits = run(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if rank == 0:
        engine = "FSDP2" if args.fsdp else "DDP"
        compiling = " (the first steps compile)" if args.compiler != "eager" else ""
        print(
            f"{engine} x{dist.get_world_size()} ({backend}, {args.compiler}): {args.steps} steps "
            f"in {elapsed:.1f} s{compiling}"
        )


if __name__ == "__main__":
    main()
