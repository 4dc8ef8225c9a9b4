"""Documented codes of ``lightning-presets check``: name checks, Lightning's own errors, cluster consistency."""

from __future__ import annotations

from lightning_presets.core.codes import Code

CHECK = "lightning-presets check"
_MODEL = "lightning_presets.tools.plan.reference_models:decoder_tiny"

CHECK_CODES: tuple[Code, ...] = (
    Code(
        code="LP700", severity="error", stage="check", title="Lightning rejected the configuration",
        fails=f"{CHECK} --accelerator cpu --devices 0 --strategy ddp",
        fixed=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp",
        evidence="runtime: tests/test_cli_check.py::test_documented_failing_example_fires (Lightning's own exception, "
        "reported as raised)",
    ),
    Code(
        code="LP701", severity="error", stage="check", title="an unknown strategy name",
        fails=f"{CHECK} --strategy fsdp_ofload_ckpt",
        fixed=f"{CHECK} --strategy fsdp_offload_ckpt",
        evidence="source: lightning/pytorch/trainer/connectors/accelerator_connector.py, "
        "_check_config_and_set_final_flags raises ValueError for an unknown strategy name (lightning 2.6.6)",
    ),
    Code(
        code="LP702", severity="error", stage="check", title="an unknown precision value",
        fails=f"{CHECK} --precision bf16-mix",
        fixed=f"{CHECK} --precision bf16-mixed",
        evidence="source: lightning/fabric/connector.py, _convert_precision_to_unified_args raises ValueError for an "
        "unknown precision (lightning 2.6.6)",
    ),
    Code(
        code="LP703", severity="error", stage="check", title="an unknown accelerator name",
        fails=f"{CHECK} --accelerator cdua",
        fixed=f"{CHECK} --accelerator cuda --gpus 8",
        evidence="source: lightning/pytorch/trainer/connectors/accelerator_connector.py, "
        "_check_config_and_set_final_flags raises ValueError for an unknown accelerator name (lightning 2.6.6)",
    ),
    Code(
        code="LP704", severity="error", stage="check", title="an unknown precision preset",
        fails=f"{CHECK} --plugin fp8_everything",
        fixed=f"{CHECK} --precision bf16-mixed",
        evidence="runtime: tests/test_cli_check.py::test_documented_failing_example_fires "
        "(lightning_presets.precision raises for the unknown name)",
    ),
    Code(
        code="LP705", severity="error", stage="check", title="SLURM tasks per node differ from devices",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --cluster slurm --env SLURM_NTASKS_PER_NODE=4",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster slurm --env SLURM_NTASKS_PER_NODE=4",
        evidence="source: lightning/fabric/plugins/environments/slurm.py, SLURMEnvironment.validate_settings raises "
        "ValueError when Lightning builds the strategy (lightning 2.6.6)",
    ),
    Code(
        code="LP706", severity="error", stage="check", title="SLURM node count differs from num_nodes",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NNODES=2",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster slurm --env SLURM_NNODES=2",
        evidence="source: lightning/fabric/plugins/environments/slurm.py, SLURMEnvironment.validate_settings raises "
        "ValueError when Lightning builds the strategy (lightning 2.6.6)",
    ),
    Code(
        code="LP707", severity="error", stage="check", title="SLURM_NTASKS differs from devices × num_nodes",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=8",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=32",
        evidence="source: lightning/fabric/plugins/environments/slurm.py, SLURMEnvironment.world_size reads "
        "SLURM_NTASKS, so the launched processes wait for ranks that are never started (lightning 2.6.6)",
    ),
    Code(
        code="LP708", severity="error", stage="check", title="torchelastic WORLD_SIZE differs from devices × num_nodes",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster torchelastic "
        "--env WORLD_SIZE=8",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster torchelastic",
        evidence="source: lightning/fabric/plugins/environments/torchelastic.py, "
        "TorchElasticEnvironment.validate_settings raises ValueError (lightning 2.6.6)",
    ),
    Code(
        code="LP709", severity="error", stage="check", title="torchelastic LOCAL_WORLD_SIZE differs from devices",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --cluster torchelastic --env LOCAL_WORLD_SIZE=4",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster torchelastic --env LOCAL_WORLD_SIZE=4",
        evidence="source: lightning/fabric/plugins/environments/torchelastic.py, TorchElasticEnvironment.local_rank "
        "comes from torchrun's LOCAL_RANK, so devices beyond LOCAL_WORLD_SIZE never get a process (lightning 2.6.6)",
    ),
    Code(
        code="LP710", severity="error", stage="check", title="more devices than GPUs visible",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
        evidence="source: lightning/fabric/utilities/device_parser.py, _sanitize_gpu_ids raises "
        "MisconfigurationException: 'You requested gpu ... But your machine only has' (lightning 2.6.6)",
    ),
    Code(
        code="LP711", severity="error", stage="check", title="a strategy that cannot run in an interactive session",
        fails=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp --interactive",
        fixed=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_notebook --interactive",
        evidence="source: lightning/pytorch/trainer/connectors/accelerator_connector.py, _lazy_init_strategy raises "
        "MisconfigurationException: not compatible with an interactive environment (lightning 2.6.6)",
    ),
    Code(
        code="LP712", severity="error", stage="check", title="an interactive SLURM job across several nodes",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm "
        "--env SLURM_JOB_NAME=interactive",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm",
        evidence="source: lightning/fabric/plugins/environments/slurm.py, _is_slurm_interactive_mode: SLURM is "
        "ignored for job names bash/interactive, so each node starts alone and waits (lightning 2.6.6)",
    ),
    Code(
        code="LP713", severity="warning", stage="check", title="several nodes without a cluster environment",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm",
    ),
    Code(
        code="LP714", severity="error", stage="check", title="LSF JSM_NAMESPACE_SIZE differs from devices × num_nodes",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster lsf --env JSM_NAMESPACE_SIZE=8",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster lsf",
        evidence="source: lightning/fabric/plugins/environments/lsf.py, LSFEnvironment.world_size reads "
        "JSM_NAMESPACE_SIZE, so the processes wait for ranks that are never started (lightning 2.6.6)",
    ),
    Code(
        code="LP715", severity="error", stage="check", title="an override key a Lightning strategy does not take",
        fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --strategy fsdp --set sharding_stratgy=FULL_SHARD",
        fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --strategy fsdp --set sharding_strategy=FULL_SHARD",
        evidence="source: the strategy's constructor raises TypeError for an unexpected keyword (FSDP and DDP forward "
        "unknown keywords to torch's wrapper, which raises when the model is wrapped) (lightning 2.6.6, torch 2.13)",
    ),
    Code(
        code="LP716", severity="warning", stage="check", title="a single-device strategy asked for several devices",
        fails=f"{CHECK} --accelerator cpu --devices 2 --strategy single_device",
        fixed=f"{CHECK} --accelerator cpu --devices 1 --strategy single_device",
    ),
    Code(
        code="LP730", severity="error", stage="check", title="the traced peak memory per GPU exceeds --gpu-memory",
        evidence="runtime: tests/test_plan_trace.py::test_traced_plan_matches_a_real_two_process_run (the traced "
        "step's peak equals a real step's on 2 gloo processes; a CUDA step past the device's memory raises "
        "torch.OutOfMemoryError)",
        fails=f"{CHECK} --strategy ddp_static_graph --accelerator cuda --gpus 2 --devices 2 --gpu-memory 512KiB "
        f"--model {_MODEL}",
        fixed=f"{CHECK} --strategy ddp_static_graph --accelerator cuda --gpus 2 --devices 2 --gpu-memory 80GiB "
        f"--model {_MODEL}",
    ),
    Code(
        code="LP731", severity="warning", stage="check",
        title="a predicted peak within the headroom of --gpu-memory, or above it by arithmetic",
        fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 2 --devices 2 --gpu-memory 620KiB --model {_MODEL}",
        fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 2 --devices 2 --gpu-memory 80GiB --model {_MODEL}",
    ),
)  # fmt: skip
