"""Every failure signature on a real error text: the text quoted from its public thread (the ``quote`` of each
declaration, with the thread in ``source``), or produced here by a CPU reproduction of the failure.

The threads (each signature's ``source``), for reading the quotes in context:
LP040 NVIDIA/nccl#286, LP041 pytorch/ci-infra#490, LP042 NVIDIA/Megatron-LM#661, LP043 NVIDIA/nccl#2076,
LP044 NVIDIA/Megatron-LM#1207, LP045 vllm-project/vllm#5094, LP048 pytorch/pytorch#39832,
LP049 meta-pytorch/torchtune#392, LP051 Lightning-AI/pytorch-lightning#20690, LP052 tatsu-lab/stanford_alpaca#67,
LP053 Lightning-AI/pytorch-lightning#16828, LP054 Lightning-AI/pytorch-lightning#7088, LP055 pytorch/pytorch#57473,
LP056 huggingface/peft#484, LP067 pytorch/pytorch#104690, LP057 deepspeedai/DeepSpeed#6914,
LP058 pytorch/torchtitan#875, LP059 meta-pytorch/torchtune#2071, LP060 lzhxmu/CPPO#6, LP061 deepspeedai/DeepSpeed#5570,
LP062 rusty1s/pytorch_scatter#133, LP063 deepspeedai/DeepSpeed#2772, LP064 Lightning-AI/pytorch-lightning#19252,
LP065 PrateekMunjal/TorchAL#4. LP046, LP047, LP050, LP068 and LP089 come from CPU reproductions (below and
tests/test_explain_run.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from lightning_presets.core.codes import STAGES, Code
from lightning_presets.failures import CATEGORIES, SIGNATURES, UNKNOWN_EXCEPTION, Signature, matches

ALL = (*SIGNATURES, UNKNOWN_EXCEPTION)

# Texts from other public threads than the declarations' (the same failure as another user hit it), as a careful
# user would paste them: each must get the category named.
OTHER_THREADS = [
    # NVIDIA/nccl#207
    ("NCCL error in: /torch/lib/c10d/ProcessGroupNCCL.cpp:260, unhandled system error", "nccl_network"),
    # NVIDIA/nccl-tests#166
    ("ubuntu:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 "
     "bytes", "nccl_shm"),
    # NVIDIA/nccl#1589
    ("misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl-glnlGK (size "
     "14156128), error: No such file or directory (2)", "nccl_shm"),
    # NVIDIA/nccl#525: NCCL 2.9's shm.h names the segment without /dev/shm/ (and prints " : ")
    ("[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n[3] NCCL INFO "
     "include/shm.h:41 -> 2\n[3] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
     "nccl-shm-recv-1462445a6f01cbfc-1-2-3 (size 9637888)", "nccl_shm"),
    # NVIDIA/nccl#290
    ("gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
     "gpu2-ru7:2143:2561 [1] NCCL INFO include/shm.h:41 -> 2", "nccl_shm"),
    # NVIDIA/nccl#111: NCCL 2.0 prints its warnings without the `NCCL ` prefix
    ("*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused\nNCCL failure "
     "*MyProgram*.cu:110 'unhandled system error'", "nccl_network"),
    # verl-project/verl#161
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid "
     "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5\nncclInvalidUsage: This usually reflects "
     "invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 10",
     "device_mapping"),
    # NVIDIA/nccl#934
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1347, "
     "remote process exited or there was a network error, NCCL version 2.18.5", "nccl_network"),
    # hiyouga/LlamaFactory#6269
    ("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, "
     "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.", "collective_desync"),
    # pytorch/pytorch#15592
    ("terminate called after throwing an instance of 'gloo::IoException'\n  what():  [/opt/conda/conda-bld/pytorch_"
     "1544084119927/work/third_party/gloo/gloo/transport/tcp/pair.cc:724] connect [127.0.1.1]:3210: Connection "
     "refused", "gloo_network"),
    # verl-project/verl#967
    ("RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no "
     "error", "gloo_network"),
    # pytorch/pytorch#85604
    ("[W socket.cpp:401] [c10d] The server socket has failed to bind to 0.0.0.0:47531 (errno: 98 - Address already "
     "in use).", "rendezvous_port"),
    # meta-llama/llama-models#210
    ("RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, code: -48, "
     "name: EADDRINUSE, message: address already in use", "rendezvous_port"),
    # open-mmlab/mmsegmentation#809
    ("RuntimeError: Default process group has not been initialized, please make sure to call init_process_group.",
     "process_group_missing"),
    # pytorch/pytorch#38300
    ("AssertionError: Default process group is not initialized", "process_group_missing"),
    # cfzd/Ultra-Fast-Lane-Detection#193
    ("    torch._C._cuda_setDevice(device)\nRuntimeError: CUDA error: invalid device ordinal", "device_mapping"),
    # Lightning-AI/pytorch-lightning#6169
    ("pytorch_lightning.utilities.exceptions.MisconfigurationException: \n                You requested GPUs: [0, "
     "1]\n                But your machine only has: [0]", "rank_world_mismatch"),
    # flairNLP/flair#1316
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
     "the 'spawn' start method", "fork_cuda"),
    # HamPerdredes/SOOD#33
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error "
     "indicates that your module has parameters that were not used in producing loss.", "ddp_reducer"),
    # p0p4k/pflowtts_pytorch#8: Lightning's own wording of the same reducer error
    ("RuntimeError: It looks like your LightningModule has parameters that were not used in producing the loss "
     "returned by training_step. If this is intentional, you must enable the detection of unused parameters in DDP, "
     "either by setting the string value `strategy='ddp_find_unused_parameters_true'`", "ddp_reducer"),
    # Lightning-AI/pytorch-lightning#20685 (the title, as the reader pastes it)
    ("RuntimeError: It looks like your LightningModule has parameters that were not used in producing the loss "
     "returned by training_step.", "ddp_reducer"),
    # ByteDance-Seed/Bagel#85: torch 2.x's wording
    ("ValueError: Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`", "fsdp_first_step"),
    # huggingface/peft#1702: the title, where GitHub dropped the backticks
    ("ValueError: Must flatten tensors with uniform requires_grad when use_orig_params=False", "fsdp_first_step"),
    # axolotl-ai-cloud/axolotl#493
    ("ValueError: `FlatParameter` requires uniform dtype but got torch.bfloat16 and torch.float32", "fsdp_first_step"),
    # bigcode-project/starcoder#77: rich wrapped the message at the terminal's width
    ("AssertionError: Check batch related parameters. train_batch_size is not\nequal to micro_batch_per_gpu * "
     "gradient_acc_step * world_size 64 != 4 *\n8 * 1", "deepspeed_first_step"),
    # OpenRLHF/OpenRLHF#346
    ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
     "gradient_acc_step * world_size 256 != 2 * 18 * 7", "deepspeed_first_step"),
    # huggingface/accelerate#3565
    ("[rank0]: RuntimeError: aten.cat.default: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor "
     "to DTensor before calling distributed operators!", "tp_first_step"),
    # torch 2.13's own text (no colon after the op), from tests/test_explain_notes.py's 2-rank tp2d_hybrid job
    ("RuntimeError: aten.add.Tensor got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
     "before calling distributed operators!", "tp_first_step"),
    # a log pasted lower-cased, with a full-width comma
    ("runtimeerror: aten.mm.default: got mixed torch.tensor and dtensor\uff0c need to convert all torch.tensor to "
     "dtensor before calling distributed operators.", "tp_first_step"),
    # Lightning-AI/litgpt#303
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.06 GiB. GPU 0 has a total capacty of "
     "23.70 GiB of which 1.27 GiB is free.", "oom_config"),
    # hpcaitech/ColossalAI#3514
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of "
     "binary: /data/anaconda3/envs/ColossalAI-Chat/bin/python", "host_oom"),
    # riccardomarin/NICP#6
    ("RuntimeError: Error(s) in loading state_dict for LightUniversal:\n        size mismatch for "
     "model.segm_list.0.5.bias: copying a param with shape torch.Size([93]) from checkpoint", "checkpoint"),
    # pytorch/extension-cpp#103
    ("ImportError: /root/miniconda3/lib/python3.11/site-packages/extension_cpp/_C.cpython-311-x86_64-linux-gnu.so: "
     "undefined symbol: _ZN5torch3jit11parseSchemaERKSsb", "import_abi"),
    # hijkzzz/alpha-zero-gomoku#28
    ("ImportError: /home/x/anaconda3/envs/m/lib/python3.6/site-packages/torch/lib/libtorch_cpu.so: undefined "
     "symbol: _ZNK3c1010TensorImpl23shallow_copy_and_detachERKNS_15VariableVersionEb", "import_abi"),
    # jingyaogong/minimind#48
    ("CUDA_HOME does not exist, unable to compile CUDA op(s)", "optional_dep_build"),
    # vturrisi/solo-learn#369
    ("`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `SwAV`", "version_skew"),
    # pytorch/pytorch#31285
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "accelerator_limit"),
    # The signatures LP069-LP074, each on a thread other than its quote's (and outside benchmarks/explain_heldout2):
    # microsoft/NPKit#37
    ("c11efb988616:1346195:1346232 [0] include/alloc.h:105 NCCL WARN Failed to CUDA calloc 1048576 bytes",
     "oom_config"),
    # nathanweeks/exonerate#31
    ("slurmstepd: error: Detected 12 oom-kill event(s) in StepId=16198179.batch. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "host_oom"),
    # greatlog/UnpairedSR#17
    ("RuntimeError: DataLoader worker (pid 16757) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory l", "dataloader_workers"),
    # dwzhu-pku/PoSE#16: the title, in the middle of a sentence
    ("训练时loss=0，Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.是什么原因",
     "numerics"),
    # rikdz/GraphWriter#6
    ("The NVIDIA driver on your system is too old (found version 6050).\nPlease update your GPU driver by downloading "
     "and installing a new", "driver_version"),
    # xingyizhou/CenterNet#759: lower-cased by the user
    ("I meet the error:cuda error: all cuda-capable devices are busy or unavailable(malloc at /opt/conda/conda-bld/"
     "pytorch_1544199946412/work/aten/src/THC/THCCachingALLocator.cpp:233)", "device_busy"),
]  # fmt: skip


def categories(text: str) -> list[str]:
    return [match.signature.category for match in matches(text, SIGNATURES)]


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda s: s.code)
def test_each_signature_matches_the_text_of_its_thread_and_nothing_else_does(signature: Signature) -> None:
    found = matches(signature.quote, SIGNATURES)
    assert found, f"{signature.code} does not match its own quote"
    assert {match.signature.code for match in found} == {signature.code}
    assert "?" not in found[0].cause or signature.code == "LP059", found[0].cause  # the named groups were filled


@pytest.mark.parametrize("signature", ALL, ids=lambda s: s.code)
def test_each_declaration_is_complete(signature: Signature) -> None:
    assert isinstance(signature, Code)
    assert re.fullmatch(r"LP0[4-8]\d", signature.code)
    assert signature.category in CATEGORIES
    assert signature.stage == "explain" in STAGES
    assert signature.cause
    assert signature.fix
    assert signature.title
    assert signature.source.startswith(("https://github.com/", "CPU reproduction: ")), signature.source
    assert signature.role in ("cause", "consequence")
    assert signature.fails.startswith("lightning-presets explain run.log")


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda s: s.code)
def test_the_documented_examples_behave(signature: Signature) -> None:
    """``fails`` names a log line the signature recognises; ``fixed`` (the fix) is not itself recognised."""
    logged = signature.fails.split("# run.log: ", 1)[1].removesuffix("...").removeprefix("...")
    assert signature.code in {m.signature.code for m in matches(logged, SIGNATURES)}
    assert signature.code not in {m.signature.code for m in matches(signature.fixed, SIGNATURES)}


def test_the_categories_are_covered_and_codes_unique() -> None:
    assert {s.category for s in ALL} == set(CATEGORIES)
    assert len({s.code for s in ALL}) == len(ALL)


@pytest.mark.parametrize(("text", "category"), OTHER_THREADS, ids=lambda v: v[:40] if isinstance(v, str) else v)
def test_texts_from_other_threads_get_their_category(text: str, category: str) -> None:
    assert categories(text)[:1] == [category], categories(text)


def test_a_more_specific_signature_supersedes_the_generic_nccl_one() -> None:
    text = (
        "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, unhandled system error\n"
        "Last error:\nError while creating shared memory segment /dev/shm/nccl-WU88OE (size 9637888)"
    )
    assert categories(text) == ["nccl_shm"]
    assert categories(text.split("\nLast error")[0]) == ["nccl_network"]  # and without it, the generic one


def test_plain_logs_match_nothing() -> None:
    healthy = "Epoch 0: 100%|██████████| 250/250 [00:41<00:00, loss=0.412]\n`Trainer.fit` stopped: `max_epochs=1`"
    assert categories(healthy) == []
    assert categories("rank 0 finished; exitcode: 0; signal 15 handled") == []


@pytest.mark.parametrize(
    "text",
    [
        # the words of old NCCL's socket warnings, from other programs: LP066 needs NCCL's `[dev] include/socket.h:N`
        "2024-05-02 10:11:12 WARN Connection closed by remote peer 10.0.0.5:22",
        "In file included from /usr/include/socket.h:12: warning: WARN Call to connect failed",
        # posix_fallocate and shared memory outside NCCL: LP041 needs NCCL's warning or an `nccl-` segment
        "fallocate: posix_fallocate failed: No space left on device",
        "ERROR: Error while creating shared memory segment /dev/shm/torch_1234 (size 4096)",
        # an env_error raised by other code, with a variable the rendezvous does not read
        'raise _env_error("HOME")',
        # frozen parameters mentioned in a normal log, not FSDP's refusal
        "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622 (uniform requires_grad off)",
    ],
)
def test_the_widened_patterns_leave_unrelated_logs_alone(text: str) -> None:
    assert categories(text) == [], text


def test_lp041_names_the_error_of_nccls_fallocate_warning() -> None:
    text = next(text for text, _ in OTHER_THREADS if "nccl-shm-recv-1462445a6f01cbfc" in text)  # NVIDIA/nccl#525
    found = matches(text, SIGNATURES)
    assert [m.signature.code for m in found] == ["LP041", "LP041"]
    assert "(No space left on device)" in found[0].cause


def test_lp048_an_old_torch_traceback_cut_before_its_message() -> None:
    """torch 1.x's rendezvous.py names the variable in its source line (``raise _env_error("WORLD_SIZE")``), which
    the traceback shows as its last line when the reader pastes it without the message (no public thread but the
    held-out case shows one, and this torch prints ``raise _env_error(env_var)``: the frame is the one torch 1.x
    prints, with another variable)."""
    text = (
        '  File "/opt/conda/lib/python3.7/site-packages/torch/distributed/rendezvous.py", line 172, in '
        "_env_rendezvous_handler\n"
        '    raise _env_error("WORLD_SIZE")'
    )
    found = matches(text, SIGNATURES)
    assert [m.signature.code for m in found] == ["LP048"]
    assert "but WORLD_SIZE is not set" in found[0].cause


# --- CPU reproductions: the failure is produced here and its real text matched -----------------------------------


def _raised(function: object) -> str:
    with pytest.raises(Exception) as raised:  # noqa: PT011  # each reproduction raises its own type
        function()  # type: ignore[operator]
    return f"{type(raised.value).__name__}: {raised.value}"


def test_lp051_a_collective_without_a_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not dist.is_initialized()
    assert categories(_raised(lambda: dist.all_reduce(torch.ones(1)))) == ["process_group_missing"]


def test_lp048_the_env_rendezvous_without_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    text = _raised(lambda: dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1))
    assert categories(text) == ["rendezvous_env"], text
    assert not dist.is_initialized()


def test_lp048_this_torchs_whole_traceback_names_the_variable_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The traceback of this torch: its frame (``raise _env_error(env_var)``) is not matched, so the message line
    alone names the variable."""
    import traceback

    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR") as raised:
        dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1)
    text = "".join(traceback.format_exception(raised.value))
    assert "raise _env_error(" in text, text
    found = matches(text, SIGNATURES)
    assert [m.signature.code for m in found] == ["LP048"], text
    assert "but MASTER_ADDR is not set" in found[0].cause


@pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`:UserWarning")  # one rank: nothing to shard
def test_lp067_fsdp_refuses_frozen_and_trainable_parameters_in_one_unit(tmp_path: Path) -> None:
    """FSDP1 on CPU (gloo, one rank): frozen and trainable parameters in one unit with use_orig_params=False raise
    the error LP067 names; the fix (use_orig_params=True) wraps the same model."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    def model() -> torch.nn.Module:
        layers = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
        layers[0].requires_grad_(False)
        return layers

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        cpu = torch.device("cpu")
        text = _raised(lambda: FullyShardedDataParallel(model(), use_orig_params=False, device_id=cpu))
        assert [m.signature.code for m in matches(text, SIGNATURES)] == ["LP067"], text
        FullyShardedDataParallel(model(), use_orig_params=True, device_id=cpu)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_lp050_devices_against_slurm_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.fabric.plugins.environments import SLURMEnvironment

    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")  # not an interactive session
    monkeypatch.delenv("SLURM_NNODES", raising=False)
    text = _raised(lambda: SLURMEnvironment().validate_settings(num_devices=2, num_nodes=1))
    assert categories(text) == ["rank_world_mismatch"], text


def _slurm_job(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    """Exactly these SLURM variables (every other cluster variable of the test's environment removed)."""
    import os

    from lightning_presets.core.environment import is_cluster_variable

    for name in [name for name in os.environ if is_cluster_variable(name)]:
        monkeypatch.delenv(name)
    for key, value in variables.items():
        monkeypatch.setenv(key, value)


def test_lp068_a_slurm_job_without_tasks_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """``#SBATCH --nodes=2 --ntasks=4``: building the Trainer raises; explain names both flags and the fix Lightning's
    hint misses (tasks per node = devices, not the whole --ntasks)."""
    from lightning.pytorch import Trainer

    job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "4", "SLURM_NNODES": "2",
           "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODELIST": "node[0-1]"}  # fmt: skip
    _slurm_job(monkeypatch, **job)
    text = _raised(lambda: Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False))
    found = matches(text, SIGNATURES)
    assert [m.signature.code for m in found] == ["LP068"], text
    assert "--ntasks=4 and no --ntasks-per-node" in found[0].cause
    assert "--ntasks-per-node=4, is right for one node only" in found[0].cause
    # the same job with the tasks per node SLURM sets for --ntasks-per-node=2: Lightning builds it
    _slurm_job(monkeypatch, **job, SLURM_NTASKS_PER_NODE="2")
    trainer = Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False)
    assert type(trainer.strategy.cluster_environment).__name__ == "SLURMEnvironment"


def test_lp064_a_module_of_the_other_lightning_package() -> None:
    import pytorch_lightning
    from lightning.pytorch import Trainer

    class Model(pytorch_lightning.LightningModule):
        pass

    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    text = _raised(lambda: trainer.fit(Model()))
    assert categories(text) == ["version_skew"], text


def test_lp061_a_state_dict_of_another_shape() -> None:
    text = _raised(lambda: torch.nn.Linear(2, 3).load_state_dict(torch.nn.Linear(2, 4).state_dict()))
    assert categories(text) == ["checkpoint"], text


def test_lp049_a_port_already_taken() -> None:
    import socket

    from torch.distributed import TCPStore

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        text = _raised(lambda: TCPStore("127.0.0.1", port, 1, True, use_libuv=True))
    assert categories(text) == ["rendezvous_port"], text
