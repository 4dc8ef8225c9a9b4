"""Failure signatures of the machine and the installation: the devices, checkpoints, builds and versions (the
driver, CUDA, compiled extensions, Lightning's packages). Part of :data:`.signatures.SIGNATURES`, which gives the
order they are tried in."""

from __future__ import annotations

import re

from lightning_presets.failures.model import Signature, words

# --- devices ---------------------------------------------------------------------------------------------------

INVALID_DEVICE_ORDINAL = Signature(
    code="LP052", title="a rank selected a GPU that is not visible to it",
    category="device_mapping",
    pattern=r"invalid device ordinal",
    cause="a process selected a GPU index that does not exist for it: more processes per node than visible GPUs "
    "(`--nproc-per-node`, `devices=`), or CUDA_VISIBLE_DEVICES hides some",
    fix="torchrun --nproc-per-node $(nvidia-smi -L | wc -l) ... (or devices= at most the visible GPUs; check "
    "CUDA_VISIBLE_DEVICES)",
    source="https://github.com/tatsu-lab/stanford_alpaca/issues/67",
    quote="RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at "
    "some other API call,so the stacktrace below might be incorrect.",
    needles=("invalid device ordinal",),
)  # fmt: skip

REQUESTED_GPUS_MISSING = Signature(
    code="LP053", title="Lightning was asked for more GPUs than the process sees",
    category="rank_world_mismatch",
    pattern=r"You requested (?:gpu|GPUs): \[(?P<requested>[\d, ]+)\](?:\s|\\n)*"
    r"But your machine only has: \[(?P<has>[\d, ]*)\]",
    cause="the process sees GPUs [{has}] but was asked for [{requested}]: the scheduler gives each task its own GPUs "
    "(SLURM --gpus-per-task, CUDA_VISIBLE_DEVICES) while Lightning expects to see the whole node",
    fix="#SBATCH --gres=gpu:N --ntasks-per-node=N (not --gpus-per-task), or devices= the number of GPUs one process "
    "sees",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/16828",
    quote="MisconfigurationException('You requested gpu: [0, 1, 2, 3, 4, 5, 6, 7]\\n But your machine only has: [0]",
    needles=("you requested",),
)  # fmt: skip

FORK_AFTER_CUDA = Signature(
    code="LP054", title="CUDA used in a forked process",
    category="fork_cuda",
    pattern=words("Cannot re-initialize CUDA in forked subprocess"),
    cause="a process started with fork (strategy='ddp_fork'/'ddp_notebook', or DataLoader workers) touched CUDA after "
    "the parent had already initialised it",
    fix="strategy='ddp' (or 'ddp_spawn') instead of a fork strategy; keep CUDA out of the parent before fit (no "
    "`.cuda()` or `torch.cuda.*` calls at import), and no CUDA tensors in Dataset.__getitem__",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/7088",
    quote="RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
    "use the 'spawn' start method",
    needles=("re-initialize",),
)  # fmt: skip

# --- checkpoints, builds and versions --------------------------------------------------------------------------

STATE_DICT_MISMATCH = Signature(
    code="LP061", title="the checkpoint's state dict does not fit the model",
    category="checkpoint",
    pattern=r"Error\(s\) in loading state_dict for(?: (?P<model>\w+)|[ \t]*$)|Size mismatch between saved "
    r"(?P<saved>torch\.Size\(\[[\d, ]{0,100}\]\)) and current: (?P<current>torch\.Size\(\[[\d, ]{0,100}\]\))",
    cause="the checkpoint's weights do not fit {model}: other shapes or key names (another model configuration, a "
    "wrapper prefix such as `module.`/`_forward_module.`, or a sharded checkpoint read as a full one)",
    fix="load it into the model it was saved from (same config), strip the prefix from the keys, or "
    "load_state_dict(..., strict=False) only when missing keys are expected",
    source="https://github.com/deepspeedai/DeepSpeed/issues/5570",
    quote="RuntimeError: Error(s) in loading state_dict for Qwen2ForCausalLM:\n        size mismatch for "
    "model.layers.21.self_attn.v_proj.bias: copying a param with shape torch.Size([1024]) from checkpoint, the shape "
    "in current model is torch.Size([4096]).",
    needles=("error(s) in loading state_dict", "size mismatch between saved"),
)  # fmt: skip

EXTENSION_ABI = Signature(
    code="LP062", title="a compiled extension was built against another torch",
    category="import_abi",
    pattern=r"undefined symbol: (?P<symbol>_ZN(?:K?\d+(?:torch|c10|at|caffe2|c10d)\w*))",
    cause="a compiled extension refers to a torch symbol ({symbol}) that the installed torch does not have: it was "
    "built against another torch release (or the wheel is for another CUDA)",
    fix="pip install --force-reinstall --no-cache-dir --no-binary :all: <the extension> (rebuild it against this "
    "torch), or install the wheel built for this torch and CUDA",
    probe="extension_build",
    source="https://github.com/rusty1s/pytorch_scatter/issues/133",
    quote="OSError: /home/unreal/miniconda3/envs/pytorch/lib/python3.6/site-packages/torch_sparse/_version.so: "
    "undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSs",
    needles=("undefined symbol",),
)  # fmt: skip

CUDA_HOME_MISSING = Signature(
    code="LP063", title="an optional dependency needs the CUDA toolkit to build its ops",
    category="optional_dep_build",
    pattern=words("CUDA_HOME does not exist, unable to compile CUDA op(s)"),
    cause="DeepSpeed (or another extension) compiles its CUDA ops on first use and found no CUDA toolkit (nvcc): "
    "the driver alone cannot build them",
    fix="export CUDA_HOME=/usr/local/cuda (a toolkit matching torch.version.cuda; `module load cuda` on a cluster), "
    "or install prebuilt ops: DS_BUILD_OPS=1 pip install deepspeed on a machine with the toolkit",
    source="https://github.com/deepspeedai/DeepSpeed/issues/2772",
    quote="deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA "
    "op(s)",
    needles=("cuda_home",),
)  # fmt: skip

LIGHTNING_PACKAGES_MIXED = Signature(
    code="LP064", title="the model and the Trainer come from different Lightning packages",
    category="version_skew",
    pattern=r"`model` must be a `LightningModule` or `torch\._dynamo\.OptimizedModule`, got `(?P<model>[^`\n]{1,200})`",
    cause="the Trainer refused {model}: the model subclasses one Lightning package (`pytorch_lightning`) and the "
    "Trainer comes from the other (`lightning.pytorch`), or two Lightning versions are installed",
    fix="import both from one package: `import lightning.pytorch as pl` everywhere (or `pytorch_lightning` "
    "everywhere), and pip install one version of each",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/19252",
    quote="TypeError: `model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `LightningModule`",
    needles=("must be a `lightningmodule`",),
)  # fmt: skip

NO_KERNEL_IMAGE = Signature(
    code="LP065", title="the torch build has no kernels for this GPU",
    category="accelerator_limit",
    pattern=r"no kernel image is available for execution on the device|with CUDA capability (?P<arch>sm_\d+) is not "
    r"compatible with the current PyTorch installation",
    cause="the installed torch was not compiled for this GPU's architecture {arch} (a wheel for older or newer GPUs "
    "only)",
    fix="pip install torch --index-url https://download.pytorch.org/whl/cu<version> with a CUDA build that lists "
    "this GPU's sm_XX (python -c 'import torch; print(torch.cuda.get_arch_list())')",
    source="https://github.com/PrateekMunjal/TorchAL/issues/4",
    quote="NVIDIA A100-PCIE-40GB with CUDA capability sm_80 is not compatible with the current PyTorch installation.",
    flags=re.IGNORECASE,
    needles=("no kernel image", "cuda capability"),
)  # fmt: skip

# --- added with the second held-out set's first contact (each quote from a thread outside that set) ----------

DRIVER_TOO_OLD = Signature(
    code="LP073", title="the NVIDIA driver is older than the CUDA that torch was built with",
    category="driver_version",
    pattern=r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)|CUDA driver version is "
    r"insufficient for CUDA runtime version",
    cause="the installed NVIDIA driver (version {found}) is older than the CUDA runtime this torch build needs",
    fix="pip install torch --index-url https://download.pytorch.org/whl/cu<a CUDA the driver supports> (nvidia-smi "
    "shows the highest), or update the driver",
    source="https://github.com/daniilidis-group/neural_renderer/issues/121",
    quote="RuntimeError: The NVIDIA driver on your system is too old (found version 10010). Please update your GPU "
    "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
    needles=("driver on your system is too old", "driver version is insufficient"),
)  # fmt: skip

DEVICE_BUSY = Signature(
    code="LP074", title="the GPU is busy or unavailable (exclusive-process mode, or another job holds it)",
    category="device_busy", level="category",
    pattern=r"CUDA-capable device\(s\) is/are busy or unavailable|all CUDA-capable devices are busy or unavailable",
    flags=re.IGNORECASE,
    cause="CUDA could not open the GPU: it is in exclusive-process compute mode and another process holds it (a "
    "second rank on the same GPU, a leftover process), or the device is unavailable (a vGPU or a GPU in a bad state)",
    fix="nvidia-smi --query-gpu=compute_mode --format=csv and nvidia-smi (processes on it); one rank per GPU "
    "(devices= at most the GPUs, each rank its LOCAL_RANK); kill leftover processes",
    source="https://github.com/pytorch/pytorch/issues/3871",
    quote="THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1503970438496/work/torch/lib/THC/generic/THCStorage.cu "
    "line=66 error=46 : all CUDA-capable devices are busy or unavailable",
    needles=("busy or unavailable",),
)  # fmt: skip
