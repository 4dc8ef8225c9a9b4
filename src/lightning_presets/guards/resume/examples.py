"""The resume rules' documented examples: the checkpoints they write (``fails=``/``fixed=`` of each rule run them)."""

from __future__ import annotations

from lightning_presets.core.codes import Setting
from lightning_presets.guards.builders import BLOCKS

MODEL = BLOCKS
CPU_NODE = Setting(gpus=0)
"""Where the examples that write a sharded checkpoint run: torch.distributed.checkpoint uses CUDA streams whenever
CUDA looks available, and the simulated GPUs are not real."""
FULL = (
    "optimizer = torch.optim.Adam(model.parameters())   # a single-file checkpoint, as DDP writes\n"
    "torch.save({'state_dict': model.state_dict(), 'optimizer_states': [optimizer.state_dict()], "
    "'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}, 'run.ckpt')\n"
)


def resumes(strategy: str, accelerator: str = "cpu", *, devices: int = 2, ckpt_path: str = "run.ckpt") -> str:
    """An example's last line: a Trainer of ``strategy`` resuming ``ckpt_path``."""
    trainer = f'Trainer(strategy="{strategy}", accelerator="{accelerator}", devices={devices})'
    return f'{trainer}.fit(model, ckpt_path="{ckpt_path}")'


def trainer_folder(key: str) -> str:
    """An example's sharded checkpoint in the Trainer's layout: weights under ``key``, Lightning's ``meta.pt``."""
    owner = {"model": "FSDPStrategy", "state_dict": "ModelParallelStrategy"}[key]
    return (
        f"import torch.distributed.checkpoint as dcp   # {owner}'s layout: the weights under {key!r}\n"
        "from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict\n"
        "optimizer = torch.optim.Adam(model.parameters())\n"
        f"dcp.save({{{key!r}: model.state_dict(), 'optimizer_0': get_optimizer_state_dict(model, optimizer)}}, "
        "checkpoint_id='run.ckpt')\n"
        "torch.save({'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}, 'run.ckpt/meta.pt')\n"
    )


def deepspeed_folder(stage: int, data_parallel: int) -> str:
    """An example's DeepSpeed checkpoint: Lightning's layout, its metadata, no tensors."""
    return (
        f"import os   # run.ckpt: the files of a ZeRO-{stage} checkpoint Lightning wrote on {data_parallel} GPUs\n"
        "os.makedirs('run.ckpt/checkpoint'); open('run.ckpt/latest', 'w').write('checkpoint')\n"
        f"torch.save({{'module': {{}}, 'dp_world_size': {data_parallel}, 'mp_world_size': 1, 'ds_config': "
        f"{{'zero_optimization': {{'stage': {stage}}}}}, 'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}}, "
        "'run.ckpt/checkpoint/mp_rank_00_model_states.pt')\n"
        f"for rank in range({data_parallel}):\n"
        "    torch.save({}, f'run.ckpt/checkpoint/bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt')\n"
    )
