"""Small models built from ``transformers`` configs (no download), as LightningModules a user would write.

Each factory returns a module with an ``example_input_array`` that is also one batch of its dataloader (so
``training_step(example_input_array, 0)`` is the step Lightning runs), the model's own loss in
``training_step``, AdamW in ``configure_optimizers`` and a ``configure_model`` that applies a tensor-parallel
plan and FSDP2 when the strategy gives it a mesh with a tensor-parallel dimension larger than 1
(``tp2d_hybrid``); under ``fsdp2`` the preset shards it, under DDP it stays whole. ``llama_lazy`` builds its
layers in ``configure_model`` only.

    lightning-presets plan --model hf_models:gpt2 --gpus 2     # from tests/scripts
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import nn
from torch.nn import functional as F

VOCAB = 512
SEQUENCE = 128
BATCH = 4
IMAGE = 64


def _tensor_parallel(model: nn.Module, blocks: dict[str, dict[str, str]], mesh: Any) -> None:
    """Tensor parallelism over ``mesh["tensor_parallel"]``: each block of each container by its plan (block-relative
    name -> colwise/rowwise); then FSDP2 over ``mesh["data_parallel"]``: each block, then the root."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for path, plan in blocks.items():
        for block in model.get_submodule(path):
            if plan:
                parallelize_module(block, mesh["tensor_parallel"], {name: styles[k]() for name, k in plan.items()})
            fully_shard(block, mesh=mesh["data_parallel"])
    fully_shard(model, mesh=mesh["data_parallel"])


class HFModule(LightningModule):  # type: ignore[misc]
    """A transformers model, its loss, and a tensor-parallel plan for its repeated blocks."""

    def __init__(
        self,
        build: Callable[[], nn.Module],
        example: torch.Tensor,
        *,
        loss: str,
        blocks: dict[str, dict[str, str]],
        lazy: bool = False,
    ) -> None:
        super().__init__()
        self.build, self.loss_kind, self.blocks = build, loss, blocks
        self.model: nn.Module | None = None if lazy else build()
        self.example_input_array = example

    def configure_model(self) -> None:
        from torch.distributed.fsdp import FSDPModule

        if self.model is None:
            self.model = self.build()
        mesh = self.device_mesh
        if mesh is None or "tensor_parallel" not in (mesh.mesh_dim_names or ()) or mesh["tensor_parallel"].size() == 1:
            return
        if isinstance(self.model, FSDPModule):
            return
        _tensor_parallel(self.model, self.blocks, mesh)

    def forward(self, inputs: torch.Tensor) -> Any:
        assert self.model is not None
        if self.loss_kind == "image":
            return self.model(pixel_values=inputs).logits
        return self.model(input_ids=inputs).logits

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        assert self.model is not None
        if self.loss_kind == "image":
            logits = self.model(pixel_values=batch).logits
            labels = torch.zeros(batch.shape[0], dtype=torch.long, device=batch.device)
            return F.cross_entropy(logits, labels)
        loss: torch.Tensor = self.model(input_ids=batch, labels=batch).loss
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def _tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQUENCE))


_LLAMA_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
               "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
               "mlp.down_proj": "rowwise"}  # fmt: skip
_ATTENTION_PLAN = {k: v for k, v in _LLAMA_PLAN.items() if k.startswith("self_attn")}
_BERT_PLAN = {"attention.self.query": "colwise", "attention.self.key": "colwise",
              "attention.self.value": "colwise", "attention.output.dense": "rowwise", "intermediate.dense": "colwise",
              "output.dense": "rowwise"}  # fmt: skip
_VIT_PLAN = {"attention.q_proj": "colwise", "attention.k_proj": "colwise", "attention.v_proj": "colwise",
             "attention.o_proj": "rowwise", "mlp.fc1": "colwise", "mlp.fc2": "rowwise"}  # fmt: skip


def gpt2() -> HFModule:
    """GPT-2 (attention dropout 0.1, fused qkv ``Conv1D``: no tensor-parallel plan), 4 layers of width 256."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQUENCE, n_embd=256, n_layer=4, n_head=4, bos_token_id=0,
                        eos_token_id=0)  # fmt: skip
    return HFModule(lambda: GPT2LMHeadModel(config), _tokens(), loss="lm", blocks={"transformer.h": {}})


def llama() -> HFModule:
    """Llama, 4 layers of width 256, grouped-query attention (8 heads, 4 key-value heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=SEQUENCE)  # fmt: skip
    return HFModule(lambda: LlamaForCausalLM(config), _tokens(), loss="lm", blocks={"model.layers": _LLAMA_PLAN})


def llama_lazy() -> HFModule:
    """The same Llama, built in ``configure_model`` (the module holds no parameters before)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=SEQUENCE)  # fmt: skip
    return HFModule(lambda: LlamaForCausalLM(config), _tokens(), loss="lm", blocks={"model.layers": _LLAMA_PLAN},
                    lazy=True)  # fmt: skip


def bert() -> HFModule:
    """BERT masked LM (attention dropout 0.1), 4 layers of width 256."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=SEQUENCE)  # fmt: skip
    return HFModule(lambda: BertForMaskedLM(config), _tokens(), loss="lm", blocks={"bert.encoder.layer": _BERT_PLAN})


def t5() -> HFModule:
    """T5 encoder-decoder (relative attention bias: only the feed-forward layers are split), 2 + 2 layers of width
    256; the labels are the inputs."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, d_model=256, d_kv=32, d_ff=1024, num_layers=2, num_heads=8,
                      decoder_start_token_id=0, pad_token_id=0)  # fmt: skip
    blocks = {f"{side}.block": {f"layer.{ff}.DenseReluDense.wi": "colwise", f"layer.{ff}.DenseReluDense.wo": "rowwise"}
              for side, ff in (("encoder", 1), ("decoder", 2))}  # fmt: skip
    return HFModule(lambda: T5ForConditionalGeneration(config), _tokens(), loss="lm", blocks=blocks)


def vit() -> HFModule:
    """ViT image classifier (``trunc_normal_`` initialisation), 4 layers of width 256, 64×64 images, patches of 8."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                       image_size=IMAGE, patch_size=8, num_labels=10)  # fmt: skip
    images = torch.randn(BATCH, 3, IMAGE, IMAGE)
    return HFModule(lambda: ViTForImageClassification(config), images, loss="image", blocks={"vit.layers": _VIT_PLAN})


def mixtral() -> HFModule:
    """Mixtral (mixture of experts: 4 experts, 2 per token), 2 layers of width 256; attention split by tensor
    parallelism, the experts replicated."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                           num_attention_heads=8, num_key_value_heads=4, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=SEQUENCE)  # fmt: skip
    return HFModule(lambda: MixtralForCausalLM(config), _tokens(), loss="lm", blocks={"model.layers": _ATTENTION_PLAN})


MODELS = ("gpt2", "llama", "bert", "t5", "vit", "mixtral", "llama_lazy")
