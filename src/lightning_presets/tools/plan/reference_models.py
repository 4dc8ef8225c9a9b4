"""Reference models for ``lightning-presets plan --model`` and ``check --model``: GPT-style decoders.

    lightning-presets plan --model lightning_presets.tools.plan.reference_models:decoder_1b3 --gpus 8 --gpu-memory 80GiB

Each factory returns a LightningModule with an ``example_input_array`` (a batch of token ids), AdamW in
``configure_optimizers``, and a ``configure_model`` that applies a tensor-parallel plan and FSDP2 when the
strategy gives it a mesh with a tensor-parallel dimension (``tp2d_hybrid``); under ``fsdp2`` the preset
shards it, under DDP it stays whole. Nothing here runs at import: the planner builds them under fake tensors.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # -1 heads: under tensor parallelism a rank holds heads / tensor_parallel_size of them.
        q, k, v = (proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        projected: torch.Tensor = self.o(out.transpose(1, 2).reshape(batch, length, -1))
        return projected


class Block(nn.Module):
    """A pre-norm transformer block: attention and a 4× MLP, 12·dim² parameters."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp_norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        mlp: torch.Tensor = self.down(F.gelu(self.up(self.mlp_norm(x))))
        return x + mlp


class Decoder(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


def tensor_parallel_plan() -> dict[str, Any]:
    """One :class:`Block`: q, k, v and ``up`` split by columns, ``o`` and ``down`` by rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    columns, rows = ColwiseParallel(), RowwiseParallel()
    return {"attn.q": columns, "attn.k": columns, "attn.v": columns, "attn.o": rows, "up": columns, "down": rows}


class DecoderModule(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy (pyproject)
    """A decoder language model; ``example_input_array`` is ``batch`` sequences of ``sequence`` token ids."""

    def __init__(self, *, vocab: int, dim: int, heads: int, layers: int, sequence: int, batch: int) -> None:
        super().__init__()
        self.model = Decoder(vocab, dim, heads, layers)
        self.example_input_array = torch.zeros(batch, sequence, dtype=torch.long)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(tokens)
        return logits

    def configure_model(self) -> None:
        mesh = self.device_mesh
        if mesh is None or "tensor_parallel" not in (mesh.mesh_dim_names or ()) or mesh["tensor_parallel"].size() == 1:
            return  # DDP, FSDP, or FSDP2 over every device: the strategy wraps the model
        from torch.distributed.fsdp import FSDPModule, fully_shard
        from torch.distributed.tensor.parallel import parallelize_module

        if isinstance(self.model, FSDPModule):  # configure_model runs again for validate/test
            return
        for layer in self.model.layers:
            parallelize_module(layer, mesh["tensor_parallel"], tensor_parallel_plan())
        for layer in self.model.layers:
            fully_shard(layer, mesh=mesh["data_parallel"])
        fully_shard(self.model, mesh=mesh["data_parallel"])

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits = self(batch[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


def decoder_1b3() -> DecoderModule:
    """1.34B parameters: 24 layers of width 2048, 16 heads, vocabulary 32,000, sequences of 2,048, batch 1."""
    return DecoderModule(vocab=32_000, dim=2048, heads=16, layers=24, sequence=2048, batch=1)


def decoder_tiny() -> DecoderModule:
    """29k parameters, for tests and examples: 2 layers of width 32, vocabulary 64, 4 sequences of 16 tokens."""
    return DecoderModule(vocab=64, dim=32, heads=4, layers=2, sequence=16, batch=4)
