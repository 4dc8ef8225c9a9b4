"""The failure signatures: one declaration each, in the order they are tried (the most specific first).

Every signature quotes the error text of the public thread it comes from (or of the CPU reproduction that produced
it); the signature tests match each quote and check the category. Codes LP040-LP089. The
declarations live by concern in :mod:`.network`, :mod:`.environment` and :mod:`.runtime`; every one is importable
from here.
"""

from __future__ import annotations

from lightning_presets.failures.environment import (
    CUDA_HOME_MISSING,
    DEVICE_BUSY,
    DRIVER_TOO_OLD,
    EXTENSION_ABI,
    FORK_AFTER_CUDA,
    INVALID_DEVICE_ORDINAL,
    LIGHTNING_PACKAGES_MIXED,
    NO_KERNEL_IMAGE,
    REQUESTED_GPUS_MISSING,
    STATE_DICT_MISMATCH,
)
from lightning_presets.failures.model import Signature
from lightning_presets.failures.network import (
    ADDRESS_IN_USE,
    GLOO_FULL_MESH,
    GLOO_PEER_CLOSED,
    GLOO_TIMEOUT,
    MASTER_VARIABLE_MISSING,
    NCCL_DUPLICATE_GPU,
    NCCL_INTERNAL_ERROR,
    NCCL_REMOTE_ERROR,
    NCCL_SHARED_MEMORY,
    NCCL_SYSTEM_ERROR,
    NCCL_WATCHDOG_TIMEOUT,
    NO_PROCESS_GROUP,
    SLURM_TASKS_MISMATCH,
    SLURM_TASKS_WITHOUT_LAYOUT,
)
from lightning_presets.failures.runtime import (
    CUDA_OUT_OF_MEMORY,
    DATALOADER_WORKER_KILLED,
    DDP_UNUSED_PARAMETERS,
    DEEPSPEED_BATCH_SIZE,
    DTENSOR_MIXED,
    FSDP_MIXED_DTYPES,
    FSDP_MIXED_REQUIRES_GRAD,
    HOST_OUT_OF_MEMORY,
    LOSS_SCALE_MINIMUM,
    NCCL_CUDA_OUT_OF_MEMORY,
    SLURM_OOM_KILL,
)

__all__ = [  # every signature by name (what explain, the notes and the tests import from here)
    "ADDRESS_IN_USE", "CUDA_HOME_MISSING", "CUDA_OUT_OF_MEMORY", "DATALOADER_WORKER_KILLED",
    "DDP_UNUSED_PARAMETERS", "DEEPSPEED_BATCH_SIZE", "DEVICE_BUSY", "DRIVER_TOO_OLD", "DTENSOR_MIXED",
    "EXTENSION_ABI", "FORK_AFTER_CUDA", "FSDP_MIXED_DTYPES", "FSDP_MIXED_REQUIRES_GRAD", "GLOO_FULL_MESH",
    "GLOO_PEER_CLOSED", "GLOO_TIMEOUT", "HOST_OUT_OF_MEMORY", "INVALID_DEVICE_ORDINAL", "LIGHTNING_PACKAGES_MIXED",
    "LOSS_SCALE_MINIMUM", "MASTER_VARIABLE_MISSING", "NCCL_CUDA_OUT_OF_MEMORY", "NCCL_DUPLICATE_GPU",
    "NCCL_INTERNAL_ERROR", "NCCL_REMOTE_ERROR", "NCCL_SHARED_MEMORY", "NCCL_SYSTEM_ERROR", "NCCL_WATCHDOG_TIMEOUT",
    "NO_KERNEL_IMAGE", "NO_PROCESS_GROUP", "REQUESTED_GPUS_MISSING", "SIGNATURES", "SLURM_OOM_KILL",
    "SLURM_TASKS_MISMATCH", "SLURM_TASKS_WITHOUT_LAYOUT", "STATE_DICT_MISMATCH", "Signature", "UNKNOWN_EXCEPTION",
]  # fmt: skip

# --- what no signature knows -----------------------------------------------------------------------------------

UNKNOWN_EXCEPTION = Signature(
    code="LP089", title="a rank raised an exception no signature knows",
    category="unknown",
    pattern=r"(?!x)x",  # never matches text: explain reports each unrecognised traceback's exception with this code
    cause="an error no signature knows: {exception}",
    fix="read that rank's traceback: it is the failure to fix; the other ranks' errors follow from it",
    source="CPU reproduction: a run whose rank 1 raises, in the explain tests",
    quote="ValueError: the batch of rank 1 has 0 samples",
    fails="lightning-presets explain run.log   # run.log: a traceback ending in ValueError: the batch of rank 1 has 0 "
    "samples",
    fixed="lightning-presets explain run.log   # run.log: the run's normal output, no traceback",
)  # fmt: skip

SIGNATURES: tuple[Signature, ...] = (
    NCCL_SHARED_MEMORY,
    NCCL_DUPLICATE_GPU,
    NCCL_SYSTEM_ERROR,
    NCCL_REMOTE_ERROR,
    NCCL_INTERNAL_ERROR,
    NCCL_WATCHDOG_TIMEOUT,
    GLOO_FULL_MESH,
    GLOO_TIMEOUT,
    GLOO_PEER_CLOSED,
    MASTER_VARIABLE_MISSING,
    ADDRESS_IN_USE,
    SLURM_TASKS_MISMATCH,
    SLURM_TASKS_WITHOUT_LAYOUT,
    NO_PROCESS_GROUP,
    INVALID_DEVICE_ORDINAL,
    REQUESTED_GPUS_MISSING,
    FORK_AFTER_CUDA,
    DDP_UNUSED_PARAMETERS,
    FSDP_MIXED_DTYPES,
    FSDP_MIXED_REQUIRES_GRAD,
    DEEPSPEED_BATCH_SIZE,
    DTENSOR_MIXED,
    NCCL_CUDA_OUT_OF_MEMORY,
    CUDA_OUT_OF_MEMORY,
    SLURM_OOM_KILL,
    HOST_OUT_OF_MEMORY,
    STATE_DICT_MISMATCH,
    EXTENSION_ABI,
    CUDA_HOME_MISSING,
    LIGHTNING_PACKAGES_MIXED,
    NO_KERNEL_IMAGE,
    DATALOADER_WORKER_KILLED,
    LOSS_SCALE_MINIMUM,
    DRIVER_TOO_OLD,
    DEVICE_BUSY,
)
"""Every signature a text is matched against, most specific first; :data:`UNKNOWN_EXCEPTION` is not among them (it
names a traceback that none of these matched)."""
