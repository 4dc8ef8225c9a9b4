"""The machine against the torch build (issue 35 item 4): ``core.machine``'s verdicts on simulated machine facts,
torch's own capability rule as their oracle, the construction rules (LP120-LP125) and ``check``'s (LP735, LP736),
and what they cost at construction. The executed proofs of the errors and their accepted neighbours are in the modules
mirroring the rules': ``tests/guards/test_machine.py`` (LP123), ``tests/tools/check/test_machine.py`` (LP735).
"""

from __future__ import annotations

import re
import statistics
import time
import warnings
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any
from unittest import mock

import pytest

from lightning_presets.core import hardware
from lightning_presets.core import machine as m
from lightning_presets.core.findings import PresetConfigError
from lightning_presets.guards.machine import MACHINE_RULES
from lightning_presets.inspection import machine as guards
from lightning_presets.tools.check import machine as check_machine
from lightning_presets.tools.simulation import simulated_cuda

# torch.cuda.get_arch_list() of real wheels (x86_64)
PTX86 = ("sm_80", "sm_86", "compute_86")  # a build of its own with PTX for newer GPUs
CU126 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
CU128 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
RELEASES = MappingProxyType({"12.6": (50, 60, 70, 75, 80, 86, 90), "12.9": (75, 80, 86, 90, 100, 120)})
DGPUS = [(6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]
"""Capabilities of discrete GPUs (P100 to RTX 50): torch's table excludes the integrated ones (5.3, 6.2, 7.2, 8.7)."""


def build(arch: tuple[str, ...] = CU126, cuda: str | None = "12.6", nccl: bool = True) -> m.Build:
    return m.Build(version="2.13.0+cu126", cuda=cuda, arch_list=arch, nccl=nccl, releases=RELEASES)


def machine(*capabilities: tuple[int, int], driver: tuple[int, int] | None = (12, 8), **env: str) -> m.Machine:
    return m.Machine(tuple(m.GPU(i, cap) for i, cap in enumerate(capabilities)), driver, MappingProxyType(env))


# --- the verdicts, pure ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "arch", "expected"),
    [((9, 0), CU126, "cubin"),  # legal: sm_90 on a cu12x build with sm_90
     ((8, 9), CU126, "cubin"),  # sm_86's cubin runs on 8.9
     ((12, 0), CU126, "none"), ((10, 0), CU126, "none"),
     ((9, 0), ("sm_80", "compute_80"), "ptx"),  # PTX forward-compatibility: JIT-compiled at first start
     ((12, 0), CU128, "cubin"), ((12, 1), ("compute_120",), "ptx"), ((8, 0), ("sm_86",), "none"),
     ((9, 0), (), None)],
)  # fmt: skip
def test_kernels_for(capability: tuple[int, int], arch: tuple[str, ...], expected: str | None) -> None:
    assert m.kernels_for(capability, arch) == expected


def test_kernel_verdicts_say_which_gpus_and_the_build_that_fixes_it() -> None:
    blackwell = m.kernel_verdicts(machine(*[(12, 0)] * 8), build())
    assert [(v.status, v.subject) for v in blackwell] == [("warning", "GPUs 0-7")]
    assert "compute capability 12.0 (sm_120)" in blackwell[0].message
    assert "sm_50..sm_90" in blackwell[0].message
    assert blackwell[0].fix == "install a build for CUDA 12.9 (pip install torch==2.13.0 --index-url " \
        "https://download.pytorch.org/whl/cu129)"  # fmt: skip
    hopper = m.kernel_verdicts(machine((9, 0), (9, 0)), build())
    assert [v.status for v in hopper] == ["ok"]
    ptx = m.kernel_verdicts(machine((9, 0)), build(("sm_80", "compute_80")))
    assert [v.status for v in ptx] == ["warning"]
    assert "through its PTX (compute_80)" in ptx[0].message
    mixed = m.kernel_verdicts(machine((9, 0), (12, 0)), build())
    assert [(v.subject, v.status) for v in mixed] == [("GPU 0", "ok"), ("GPU 1", "warning")]
    assert m.kernel_verdicts(machine((12, 0)), build(cuda=None, arch=())) == []  # a CPU build: nothing to compare
    assert m.kernel_verdicts(m.Machine(None), build()) == []  # NVML not read: nothing said


def test_a_gpu_no_release_supports_gets_the_generic_fix() -> None:
    verdict = m.kernel_verdicts(machine((3, 5)), build())[0]
    assert "TORCH_CUDA_ARCH_LIST" in verdict.fix


@pytest.mark.parametrize(
    ("driver", "cuda", "status"),
    [((11, 8), "12.6", "warning"),  # an older major: torch's runtime does not start
     ((12, 2), "12.6", "ok"),  # the same major: minor-version compatibility
     ((12, 8), "12.6", "ok"), ((13, 0), "12.6", "ok"), ((12, 8), "13.0", "warning")],
)  # fmt: skip
def test_driver_verdict(driver: tuple[int, int], cuda: str, status: str) -> None:
    verdict = m.driver_verdict(machine((9, 0), driver=driver), build(cuda=cuda))
    assert verdict is not None
    assert verdict.status == status


def test_no_driver_version_or_cpu_build_compares_nothing() -> None:
    assert m.driver_verdict(machine((9, 0), driver=None), build()) is None
    assert m.driver_verdict(machine((9, 0)), build(cuda=None)) is None


@pytest.mark.parametrize(
    ("backend", "nccl", "status"),
    [("nccl", False, "error"), ("cpu:gloo,cuda:nccl", False, "error"), ("NCCL", False, "error"),
     ("nccl", True, "ok"), ("gloo", False, None), (None, False, None), ("cpu:gloo", False, None)],
)  # fmt: skip
def test_nccl_verdict(backend: str | None, nccl: bool, status: str | None) -> None:
    verdict = m.nccl_verdict(backend, build(nccl=nccl))
    assert (verdict.status if verdict else None) == status


@pytest.mark.parametrize(
    ("env", "expected"),
    [({"SLURM_STEP_GPUS": "0,1"}, ("SLURM_STEP_GPUS", 2)), ({"SLURM_JOB_GPUS": "0-3"}, ("SLURM_JOB_GPUS", 4)),
     ({"SLURM_STEP_GPUS": "2", "SLURM_JOB_GPUS": "0,1,2,3"}, ("SLURM_STEP_GPUS", 1)),  # the step's first
     ({"GPU_DEVICE_ORDINAL": "0,1,2"}, ("GPU_DEVICE_ORDINAL", 3)),
     ({"SLURM_GPUS_ON_NODE": "4"}, ("SLURM_GPUS_ON_NODE", 4)),
     ({"SLURM_JOB_GPUS": "NoDevFiles"}, ("SLURM_JOB_GPUS", 0)), ({}, None), ({"SLURM_GPUS_ON_NODE": "x"}, None)],
)  # fmt: skip
def test_assigned(env: dict[str, str], expected: tuple[str, int] | None) -> None:
    assert m.assigned(env) == expected


def test_assignment_verdict() -> None:
    wide = machine(*[(9, 0)] * 4, SLURM_STEP_GPUS="0,1", CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert m.assignment_verdict(wide, 4).status == "warning"  # type: ignore[union-attr]
    assert m.assignment_verdict(wide, 2).status == "ok"  # type: ignore[union-attr]  # legal: uses what it got
    assert m.assignment_verdict(machine((9, 0)), 4) is None  # no scheduler variable: nothing said
    unset = machine(*[(9, 0)] * 8, SLURM_GPUS_ON_NODE="8")
    assert m.assignment_verdict(unset, None).status == "ok"  # type: ignore[union-attr]


def test_the_nvcc_flags_of_an_older_torch_read_as_get_arch_list() -> None:
    config = ("  - NVCC architecture flags: -gencode;arch=compute_80,code=sm_80;-gencode;arch=compute_90,code=sm_90;"
              "-gencode;arch=compute_90,code=compute_90\n  - CuDNN 9.1\n")  # fmt: skip
    assert m.nvcc_arch_list(config) == ["sm_80", "sm_90", "compute_90"]
    assert m.nvcc_arch_list("  - NVCC architecture flags: -gencode;arch=compute_90a,code=[sm_90a,compute_90a]") == [
        "sm_90a", "compute_90a"]  # fmt: skip
    assert m.nvcc_arch_list("PyTorch built with:\n  - GCC 13.3\n") == []  # a CPU build


def test_the_installed_build_is_read_without_cuda(forbid_cuda_init: list[str]) -> None:
    import torch

    guards.installed_build.cache_clear()
    read = guards.installed_build()
    assert read.cuda == torch.version.cuda
    assert read.nccl == (torch.distributed.is_available() and torch.distributed.is_nccl_available())
    assert forbid_cuda_init == []


def test_an_older_torch_whose_get_arch_list_asks_the_driver_is_read_from_its_flags() -> None:
    """torch before 2.9 asked ``is_available()`` (``cudaGetDeviceCount``, which initialises the driver) first."""

    def get_arch_list() -> list[str]:
        if not is_available():  # noqa: F821  (only its name matters: the function is never called)
            return []
        return []

    config = "  - NVCC architecture flags: -gencode;arch=compute_80,code=sm_80"
    torch = mock.Mock(version=mock.Mock(cuda="12.1"), cuda=mock.Mock(get_arch_list=get_arch_list),
                      __config__=mock.Mock(show=lambda: config))  # fmt: skip
    assert guards.arch_list(torch) == ["sm_80"]


# --- torch's own rule as the oracle -----------------------------------------------------------------------------


def _torch_warns(capability: tuple[int, int], arch: tuple[str, ...]) -> bool:
    """Whether torch's ``_check_capability`` (run when CUDA initialises) warns for one GPU of ``capability``, with
    the device queries and the build's facts simulated."""
    import torch

    with (
        mock.patch.object(torch.version, "cuda", "12.6"),
        mock.patch.object(torch.cuda, "get_arch_list", return_value=list(arch)),
        mock.patch.object(torch.cuda, "device_count", return_value=1),
        mock.patch.object(torch.cuda, "get_device_capability", return_value=capability),
        mock.patch.object(torch.cuda, "get_device_name", return_value="GPU"),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        torch.cuda._check_capability()
    return any(str(each.message).startswith("Found GPU0") for each in caught)  # not its note on an unknown sm_37


@pytest.mark.parametrize("arch", [CU126, CU128, PTX86], ids=["cu126", "cu128", "ptx86"])
def test_torchs_own_capability_check_warns_exactly_where_no_cubin_runs(arch: tuple[str, ...]) -> None:
    """For every discrete GPU and the lists of real wheels, torch's rule and ours agree: torch warns exactly where the
    build has no cubin the GPU runs (where only PTX runs both warn: LP121's warning, torch's warning)."""
    import torch

    if not hasattr(torch.cuda, "_code_compatible_with_device"):
        pytest.skip("this torch's _check_capability predates its per-capability table (torch < 2.13)")
    for capability in DGPUS:
        ours = m.kernels_for(capability, arch)
        assert _torch_warns(capability, arch) == (ours != "cubin"), (capability, arch, ours)


# --- construction: the rules on a simulated machine and target ----------------------------------------------------


@pytest.fixture
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _codes(target: guards.SimulatedTarget, count: int = 8, capability: tuple[int, int] = (9, 0), **kw: Any) -> set[str]:
    """The codes a Trainer's construction reports (warnings and the refusal) on a simulated node and target."""
    from lightning.pytorch import Trainer

    with simulated_cuda(count, capability), guards.simulating_target(target), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            devices = kw.pop("devices", count)
            Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=devices, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, **kw)  # fmt: skip
        except PresetConfigError as error:
            return set(error.codes)
    return {code for each in w for code in re.findall(r"\[(LP\d{3})\]", str(each.message))}


def test_construction_warns_for_gpus_without_kernels_and_for_ptx_only() -> None:
    cu126 = guards.SimulatedTarget((12, 8), build())
    assert "LP120" in _codes(cu126, capability=(12, 0))
    assert "LP120" not in _codes(cu126, capability=(9, 0))  # neighbour: Hopper on a build with sm_90
    assert "LP121" in _codes(guards.SimulatedTarget((12, 8), build(("sm_80", "compute_80"))))
    assert not {"LP120", "LP121"} & _codes(guards.SimulatedTarget((12, 8), build(CU128)), capability=(12, 0))


def test_construction_warns_for_a_driver_of_an_older_major() -> None:
    assert "LP122" in _codes(guards.SimulatedTarget((11, 8), build()))
    assert "LP122" not in _codes(guards.SimulatedTarget((12, 2), build()))  # minor-version compatibility
    assert "LP122" not in _codes(guards.SimulatedTarget(None, build()))  # not read: nothing said


def test_construction_refuses_nccl_on_a_build_without_it_and_accepts_it_with() -> None:
    assert "LP123" in _codes(guards.SimulatedTarget((12, 8), build(nccl=False)))
    assert "LP123" not in _codes(guards.SimulatedTarget((12, 8), build(nccl=True)))


def test_under_simulation_without_a_target_build_nothing_is_compared() -> None:
    """A laptop's CPU torch is not the cluster's: ``check`` without --torch-cuda compares no build."""
    assert not {"LP120", "LP121", "LP122", "LP123"} & _codes(guards.SimulatedTarget(None, None), capability=(12, 0))


def test_construction_warns_when_the_job_uses_gpus_slurm_did_not_assign(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_STEP_GPUS", "0,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert "LP124" in _codes(guards.SimulatedTarget(), count=4)
    assert "LP124" not in _codes(guards.SimulatedTarget(), count=4, devices=2)  # neighbour: uses what it got
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # under simulation: SLURM will set it (check's LP735 says so)
    assert "LP124" not in _codes(guards.SimulatedTarget(), count=4)


def test_a_cpu_build_on_a_gpu_node_warns_that_auto_trains_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch import Trainer

    nvml = hardware.GPUs(count=2, capability=(9, 0), memory_bytes=None, capabilities=((9, 0), (9, 0)))
    monkeypatch.setattr(hardware, "nvml_gpus", lambda env=None: nvml)
    cpu = m.Build(version="2.13.0+cpu", cuda=None)
    monkeypatch.setattr(guards, "installed_build", lambda: cpu)
    with pytest.warns(UserWarning, match=r"LP125"):
        Trainer(strategy="ddp_static_graph", devices=2, logger=False, enable_checkpointing=False)
    with _no_lp125():  # neighbour: the CPU asked for explicitly
        Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False, enable_checkpointing=False)
    monkeypatch.setattr(guards, "installed_build", build)
    with _no_lp125():  # neighbour: a CUDA build (Lightning's own choice of the CPU is then Lightning's)
        Trainer(strategy="ddp_static_graph", devices=2, logger=False, enable_checkpointing=False)


class _no_lp125:
    def __enter__(self) -> None:
        self.caught = warnings.catch_warnings(record=True)
        self.records = self.caught.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc: object) -> None:
        self.caught.__exit__(*exc)
        assert not [each for each in self.records if "LP125" in str(each.message)]


def test_a_rule_that_cannot_read_the_machine_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our failure is never blamed on the user: a read that raises compares nothing."""

    def broken(*args: object) -> None:
        raise OSError("NVML exploded")

    monkeypatch.setattr(guards, "observed_machine", broken)
    assert not {"LP120", "LP121", "LP122", "LP124"} & _codes(
        guards.SimulatedTarget((11, 8), build()), capability=(12, 0)
    )


# --- check's flags and check-only rules ---------------------------------------------------------------------------


def _check(*args: str) -> set[str]:
    from lightning_presets.tools.check.engine import check_job
    from lightning_presets.tools.check.request import CheckRequest

    flags = dict(arg.split("=", 1) for arg in args)
    env = {key.removeprefix("env:"): value for key, value in flags.items() if key.startswith("env:")}
    target = check_machine.target_from(flags.get("driver"), flags.get("torch_cuda"), flags.get("arch"),
                                       flags.get("nccl") == "no")  # fmt: skip
    request = CheckRequest(
        arguments={"strategy": "ddp_static_graph", "accelerator": "cuda", "devices": int(flags.get("devices", "8"))},
        gpus=int(flags.get("gpus", "8")),
        env=env,
        gpu_capability=tuple(map(int, flags.get("cap", "9.0").split("."))),
    )  # type: ignore[arg-type]
    with guards.simulating_target(target):
        report = check_job(request)
    return {each.finding.code for each in report.reported}


def test_check_simulates_the_target_build_and_driver(quiet: None) -> None:
    """--torch-cuda names one of torch's own CUDA builds of its release (its table, read for this torch: CI's torch
    legs list other builds), whose architectures the check then compares."""
    table = guards.installed_build().releases
    if not table:
        pytest.skip("this torch has no table of its release's CUDA builds: --torch-cuda needs --torch-arch-list")
    blackwell = sorted(cuda for cuda, codes in table.items() if 120 in codes)
    older = sorted(cuda for cuda, codes in table.items() if not any(code // 10 == 12 for code in codes))
    newest = max(table, key=lambda cuda: m.version_tuple(cuda) or (0, 0))
    if older:
        assert "LP120" in _check(f"torch_cuda={older[0]}", "cap=12.0")
    if blackwell:
        assert "LP120" not in _check(f"torch_cuda={blackwell[0]}", "cap=12.0")  # neighbour
    major = (m.version_tuple(newest) or (12, 0))[0]
    assert "LP122" in _check(f"torch_cuda={newest}", f"driver={major - 1}.8")
    assert "LP122" not in _check(f"torch_cuda={newest}", f"driver={major}.0")  # minor-version compatibility
    assert "LP123" in _check(f"torch_cuda={newest}", "nccl=no")
    assert "LP123" not in _check(f"torch_cuda={newest}")


def test_check_with_an_explicit_arch_list(quiet: None) -> None:
    assert "LP121" in _check("torch_cuda=12.1", "arch=sm_80,compute_80")
    assert not {"LP120", "LP121"} & _check("torch_cuda=12.1", "arch=sm_80,sm_90")
    with pytest.raises(Exception, match="not a CUDA version"):
        check_machine.target_from("twelve")


def test_check_slurm_assigning_fewer_gpus_than_devices(quiet: None) -> None:
    assert "LP735" in _check("devices=4", "env:SLURM_STEP_GPUS=0,1")
    assert "LP735" not in _check("devices=2", "env:SLURM_STEP_GPUS=0,1")  # neighbour
    assert "LP735" not in _check("devices=4", "env:SLURM_GPUS_ON_NODE=4")
    # CUDA_VISIBLE_DEVICES given: what the job sees is known (LP710 says the rest), LP124 the unassigned use
    assert "LP124" in _check("devices=4", "env:SLURM_STEP_GPUS=0,1", "env:CUDA_VISIBLE_DEVICES=0,1,2,3")


def test_check_several_mig_instances(quiet: None) -> None:
    assert "LP736" in _check("devices=2", "gpus=2", "env:CUDA_VISIBLE_DEVICES=MIG-1a2b,MIG-3c4d")
    assert "LP736" not in _check("devices=1", "gpus=1", "env:CUDA_VISIBLE_DEVICES=MIG-1a2b")
    assert "LP736" not in _check("devices=2", "gpus=2", "env:CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb")  # UUIDs count


# --- what construction pays ------------------------------------------------------------------------------------


def test_the_machine_rules_cost_little_beside_the_construction_itself(quiet: None) -> None:
    """Robust under load: the machine rules' median time against the median of the Trainer's construction measured
    beside it (the rules are a small fraction of it), with the NVML read and the build cached as at construction."""
    from lightning.pytorch import Trainer

    from lightning_presets.core.rules import run_rules

    target = guards.SimulatedTarget((12, 2), build())
    contexts = []
    with simulated_cuda(8, (9, 0)), guards.simulating_target(target):

        def construct() -> None:
            trainer = Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8, logger=False,
                              enable_checkpointing=False)  # fmt: skip
            contexts.append(trainer.strategy._lp_context)

        construct()
        rules, whole = [], []
        for _ in range(15):
            start = time.perf_counter()
            construct()
            whole.append(time.perf_counter() - start)
            start = time.perf_counter()
            run_rules(MACHINE_RULES, "construction", contexts[-1])
            rules.append(time.perf_counter() - start)
    share = statistics.median(rules) / statistics.median(whole)
    print(
        f"machine rules: {statistics.median(rules) * 1e3:.3f} ms; construction {statistics.median(whole) * 1e3:.1f} ms"
    )
    assert share < 0.05, share
