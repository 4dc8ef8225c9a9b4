"""Small shared test models: a tiny transformer with a tensor-parallel plan, and models without blocks.

Import as ``from models import TinyTransformer, parallelize`` (pytest puts ``tests/`` on ``sys.path``;
the scripts under ``tests/scripts/`` do the same). Nothing here imports ``lightning_presets``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

VOCAB_SIZE = 32
SEQUENCE_LENGTH = 8


class Attention(nn.Module):
    """Multi-head self-attention whose projections can be split column/row-wise across ranks."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.head_dim = dim // n_heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds n_heads / tensor_parallel_size of them.
        q, k, v = (proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(batch, length, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """One pre-norm transformer block: the repeated unit FSDP wraps and checkpointing recomputes."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = Attention(dim, n_heads)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class TinyTransformer(nn.Module):
    """Token embedding, ``n_layers`` :class:`Block` in ``self.layers`` (an ``nn.ModuleList``), norm, head."""

    def __init__(self, vocab_size: int = VOCAB_SIZE, dim: int = 32, n_heads: int = 4, n_layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def tensor_parallel_plan() -> dict[str, Any]:
    """The plan for one :class:`Block`: q/k/v and ``up`` column-wise, ``o`` and ``down`` row-wise."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "attn.q": ColwiseParallel(),
        "attn.k": ColwiseParallel(),
        "attn.v": ColwiseParallel(),
        "attn.o": RowwiseParallel(),
        "ffn.up": ColwiseParallel(),
        "ffn.down": RowwiseParallel(),
    }


def parallelize(model: TinyTransformer, device_mesh: Any) -> TinyTransformer:
    """Tensor parallelism on ``device_mesh["tensor_parallel"]``, then FSDP2 on ``device_mesh["data_parallel"]``.

    The signature Fabric's ``parallelize_fn`` expects; a LightningModule calls it from ``configure_model``.
    """
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    tensor_mesh = device_mesh["tensor_parallel"]
    data_mesh = device_mesh["data_parallel"]
    for layer in model.layers:
        parallelize_module(layer, tensor_mesh, tensor_parallel_plan())
    for layer in model.layers:
        fully_shard(layer, mesh=data_mesh)
    fully_shard(model, mesh=data_mesh)
    return model


def next_token_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting token ``t+1`` from tokens up to ``t``."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def counting_sequences(count: int, length: int = SEQUENCE_LENGTH, vocab_size: int = VOCAB_SIZE) -> torch.Tensor:
    """``count`` sequences ``s, s+1, s+2, ...`` (mod vocab): learnable in a few steps, deterministic."""
    starts = torch.arange(count).unsqueeze(1)
    return (starts + torch.arange(length)) % vocab_size


def unsharded_copy(model: nn.Module) -> nn.Module:
    """A plain deep copy taken before parallelizing: the single-process reference for the same weights."""
    return copy.deepcopy(model)


class FlatMLP(nn.Module):
    """No repeated block: a ``Sequential`` of different layer types, and single layers."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 2))
        self.head = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class TwoStacks(nn.Module):
    """Two repeated stacks, a large one of :class:`Block` and a small one of ``nn.Linear`` (structure only)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.small = nn.ModuleList(nn.Linear(4, 4) for _ in range(6))
        self.blocks = nn.Sequential(Block(dim, 2), Block(dim, 2))


def fabric_train(
    fabric: Any, module: nn.Module, steps: int, *, lr: float = 1e-2, batch_size: int = 4
) -> tuple[Any, list[float]]:
    """Set up ``module`` with ``fabric``, take ``steps`` Adam steps on counting sequences: (wrapped, losses)."""
    from torch.utils.data import DataLoader

    wrapped = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(torch.optim.Adam(wrapped.parameters(), lr=lr))
    data = fabric.setup_dataloaders(DataLoader(counting_sequences(32), batch_size=batch_size))  # type: ignore[arg-type]
    losses: list[float] = []
    for batch in data:
        loss = next_token_loss(wrapped, batch)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if len(losses) == steps:
            break
    return wrapped, losses
