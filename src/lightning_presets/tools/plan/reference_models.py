"""Reference models for ``lightning-presets plan --model`` and ``check --model``: GPT-style decoders.

    lightning-presets plan --model lightning_presets.tools.plan.reference_models:decoder_1b3 --gpus 8 --gpu-memory 80GiB

``decoder_*`` are GPT-style (LayerNorm, a 4× GELU MLP); ``llama3_8b`` and ``llama3_70b`` have Llama 3.1's shapes
(RMSNorm, rotary embeddings, grouped-query attention, a SwiGLU MLP; the sizes of Meta's ``params.json`` for those
models, as torchtitan's ``llama3`` configurations give them), for ``plan``'s step-time estimate.

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
            parallelize_module(layer, mesh["tensor_parallel"], self.block_plan())
        for layer in self.model.layers:
            fully_shard(layer, mesh=mesh["data_parallel"])
        fully_shard(self.model, mesh=mesh["data_parallel"])

    def block_plan(self) -> dict[str, Any]:
        """The tensor-parallel plan of one block."""
        return tensor_parallel_plan()

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


class UnusedHeadModule(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy (pyproject)
    """A tiny classifier whose ``training_step`` never runs its auxiliary head (``aux``): LP732's example."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(32, 32)
        self.head = nn.Linear(32, 2)
        self.aux = nn.Linear(32, 2)
        self.example_input_array = torch.zeros(4, 32)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.head(torch.relu(self.body(features)))
        return output

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss: torch.Tensor = self(batch).pow(2).mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class ManualModule(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy (pyproject)
    """A tiny model under manual optimization that clips its own gradients in ``training_step``: LP733's example."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = nn.Linear(32, 2)
        self.example_input_array = torch.zeros(4, 32)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.layer(features)
        return output

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(self(batch).pow(2).mean())
        self.clip_gradients(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        optimizer.step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def manual_tiny() -> ManualModule:
    """66 parameters under manual optimization, clipped by the model itself."""
    return ManualModule()


def unused_head_tiny() -> UnusedHeadModule:
    """1.2k parameters: a body, a head and an auxiliary head the loss never reaches (66 of them unused)."""
    return UnusedHeadModule()


# --------------------------------------------------------------------------------------------- Llama-shaped


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` (batch, heads, length, head_dim), the halves rotated as in Llama's reference:
    computed in fp32 and returned in ``x``'s dtype, as torchtitan's ``apply_rotary_emb`` does."""
    first, second = x.float().chunk(2, dim=-1)
    rotated = x.float() * cos + torch.cat((-second, first), dim=-1) * sin
    return rotated.to(x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.wq(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        repeat = q.shape[1] // k.shape[1]  # grouped-query heads repeated, as torchtitan's repeat_kv does
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        projected: torch.Tensor = self.wo(out.transpose(1, 2).reshape(batch, length, -1))
        return projected


class LlamaBlock(nn.Module):
    """RMSNorm, attention, RMSNorm, SwiGLU MLP (``w2(silu(w1 x) * w3 x)``)."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.attention = LlamaAttention(dim, heads, kv_heads)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        h = self.ffn_norm(x)
        mlp: torch.Tensor = self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x + mlp


class Llama(nn.Module):
    def __init__(self, *, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int,
                 theta: float = 500_000.0) -> None:  # fmt: skip
        super().__init__()
        self.head_dim, self.theta = dim // heads, theta
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(LlamaBlock(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        inverse = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        angles = torch.outer(torch.arange(length, dtype=torch.float32), inverse)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits: torch.Tensor = self.output(self.norm(x))
        return logits


def llama_tensor_parallel_plan() -> dict[str, Any]:
    """One :class:`LlamaBlock`: the q, k, v projections, ``w1`` and ``w3`` by columns, ``wo`` and ``w2`` by rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    columns, rows = ColwiseParallel(), RowwiseParallel()
    return {"attention.wq": columns, "attention.wk": columns, "attention.wv": columns, "attention.wo": rows,
            "w1": columns, "w3": columns, "w2": rows}  # fmt: skip


class LlamaModule(DecoderModule):
    """A Llama-shaped language model; ``example_input_array`` is ``batch`` rows of ``sequence + 1`` token ids (the
    step predicts the last ``sequence`` from the first)."""

    def __init__(self, *, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int, sequence: int,
                 batch: int) -> None:  # fmt: skip
        LightningModule.__init__(self)
        decoder = Llama(vocab=vocab, dim=dim, heads=heads, kv_heads=kv_heads, hidden=hidden, layers=layers)
        self.model = decoder  # type: ignore[assignment]  # DecoderModule's step and optimizer, another decoder
        self.example_input_array = torch.zeros(batch, sequence + 1, dtype=torch.long)

    def block_plan(self) -> dict[str, Any]:
        return llama_tensor_parallel_plan()


def llama3_8b() -> LlamaModule:
    """Llama 3.1 8B's shapes (8.03B parameters): 32 layers of width 4096, 32 heads (8 key-value), MLP 14,336,
    vocabulary 128,256; batch 2 of 8,192 tokens (torchtitan's benchmark of it)."""
    return LlamaModule(vocab=128_256, dim=4096, heads=32, kv_heads=8, hidden=14_336, layers=32, sequence=8192, batch=2)


def llama3_70b() -> LlamaModule:
    """Llama 3.1 70B's shapes (70.6B parameters): 80 layers of width 8192, 64 heads (8 key-value), MLP 28,672,
    vocabulary 128,256; batch 1 of 8,192 tokens."""
    return LlamaModule(vocab=128_256, dim=8192, heads=64, kv_heads=8, hidden=28_672, layers=80, sequence=8192, batch=1)


def llama_12_small() -> LlamaModule:
    """A Llama of 12 layers of width 256 (16 heads, 8 key-value), MLP 640, vocabulary 512, 2 rows of 128 tokens: deep
    enough to be extrapolated from 3 and 4 of its blocks, small enough to trace in full (the check of one against
    the other in the plan benchmark)."""
    return LlamaModule(vocab=512, dim=256, heads=16, kv_heads=8, hidden=640, layers=12, sequence=128, batch=2)


def llama_tiny() -> LlamaModule:
    """A Llama of 2 layers of width 128 (16 heads, 8 key-value), MLP 320, vocabulary 256, 2 rows of 32 tokens: tests
    (tensor parallel up to 8)."""
    return LlamaModule(vocab=256, dim=128, heads=16, kv_heads=8, hidden=320, layers=2, sequence=32, batch=2)


# --------------------------------------------------------------------------------------------- MPT-shaped


class MptBlock(nn.Module):
    """MPT's block as llm-foundry's benchmarks ran it: LayerNorm (with bias), fused ``Wqkv``, ``out_proj``, a 4× GELU
    MLP, every linear with a bias."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm_1 = nn.LayerNorm(dim)
        self.Wqkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.norm_2 = nn.LayerNorm(dim)
        self.up_proj = nn.Linear(dim, 4 * dim)
        self.down_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.Wqkv(self.norm_1(x)).view(batch, length, 3, -1, dim // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(out.transpose(1, 2).reshape(batch, length, -1))
        mlp: torch.Tensor = self.down_proj(F.gelu(self.up_proj(self.norm_2(x)), approximate="tanh"))
        return x + mlp


class Mpt(nn.Module):
    """MPT: learned positions, tied input and output embeddings."""

    def __init__(self, *, vocab: int, dim: int, heads: int, layers: int, sequence: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(sequence, dim)
        self.blocks = nn.ModuleList(MptBlock(dim, heads) for _ in range(layers))
        self.norm_f = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.wte.weight)


class MptModule(DecoderModule):
    """An MPT language model (llm-foundry's ``mpt-*.yaml`` shapes, vocabulary 50,368); ``example_input_array`` is
    ``batch`` rows of ``sequence + 1`` token ids."""

    def __init__(self, *, dim: int, heads: int, layers: int, sequence: int = 2048, batch: int = 1) -> None:
        LightningModule.__init__(self)
        self.model = Mpt(vocab=50_368, dim=dim, heads=heads, layers=layers, sequence=sequence)  # type: ignore[assignment]
        self.example_input_array = torch.zeros(batch, sequence + 1, dtype=torch.long)

    def configure_model(self) -> None:
        return None  # the strategy wraps it (no tensor-parallel plan)


def mpt_1b() -> MptModule:
    """llm-foundry's MPT-1B: 24 layers of width 2048, 16 heads; 1.316B parameters at sequence 2,048."""
    return MptModule(dim=2048, heads=16, layers=24)


def mpt_3b() -> MptModule:
    """llm-foundry's MPT-3B: 32 layers of width 2560, 20 heads; 2.652B parameters at sequence 2,048."""
    return MptModule(dim=2560, heads=20, layers=32)


def mpt_7b() -> MptModule:
    """llm-foundry's MPT-7B: 32 layers of width 4096, 32 heads; 6.659B parameters at sequence 2,048."""
    return MptModule(dim=4096, heads=32, layers=32)


def mpt_13b() -> MptModule:
    """llm-foundry's MPT-13B: 40 layers of width 5120, 40 heads; 12.854B parameters at sequence 2,048."""
    return MptModule(dim=5120, heads=40, layers=40)


def mpt_30b() -> MptModule:
    """llm-foundry's MPT-30B: 48 layers of width 7168, 56 heads; 29.975B parameters at sequence 2,048."""
    return MptModule(dim=7168, heads=56, layers=48)
