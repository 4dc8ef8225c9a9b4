"""The GPUs against the installed torch's build (``core.hardware.has_kernels_for``/``build_note``; the doctor's
``gpus.torch_build``): read without a CUDA context, so tested with the architecture lists real wheels report."""

from __future__ import annotations

import pytest

from lightning_presets.core import hardware

CU121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]  # cubins only, up to Hopper
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]  # Blackwell, and PTX


@pytest.mark.parametrize(
    ("capability", "arch_list", "expected"),
    [((9, 0), CU121, True), ((8, 9), CU121, True),  # sm_86's cubin runs on 8.9 (same major, lower minor)
     ((12, 0), CU121, False), ((10, 0), CU121, False), ((6, 1), CU128, False), ((12, 0), CU128, True),
     ((12, 1), ["compute_120"], True),  # PTX the driver compiles for a newer GPU
     ((9, 0), ["sm_90a"], True), ((10, 0), ["sm_90a"], False), ((9, 0), [], None)],
)  # fmt: skip
def test_kernels_for_a_capability(capability: tuple[int, int], arch_list: list[str], expected: bool | None) -> None:
    assert hardware.has_kernels_for(capability, arch_list) is expected


def test_the_doctors_note() -> None:
    blackwell = hardware.GPUs(count=8, capability=(12, 0), memory_bytes=None)
    note = hardware.build_note(blackwell, CU121)
    assert note is not None
    assert "no kernel image for compute capability 12.0" in note
    assert "sm_90" in note
    assert hardware.build_note(blackwell, CU128) is None
    assert hardware.build_note(blackwell, []) is None  # a CPU build: nothing to compare
    assert hardware.build_note(None, CU121) is None


def test_the_doctor_reads_the_arch_list_without_a_cuda_context(forbid_cuda_init: list[str]) -> None:
    from lightning_presets.tools import doctor

    doctor._arch_list()
    assert forbid_cuda_init == []
