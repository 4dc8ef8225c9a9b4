"""Reading the GPUs through NVML for real: a stand-in ``libnvidia-ml.so.1`` compiled here with gcc, found by the
dynamic loader through ``LD_LIBRARY_PATH`` in a fresh interpreter, exactly as the driver's library would be.

The stand-in reports three GPUs whose NVML order, PCI order and speed order all differ, so the tests can tell
``CUDA_VISIBLE_DEVICES`` indices (in CUDA's order, which ``CUDA_DEVICE_ORDER`` chooses) from UUIDs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import Fresh, Started
from lightning_presets.core import hardware

GIB = 2**30
# NVML index: (uuid, PCI bus, capability, memory, the driver's name). PCI order: H100, V100, A100. Fastest first:
# H100, A100, V100.
DEVICES = [
    ("GPU-aaaa1111-0000-0000-0000-000000000000", 0x3B, (7, 0), 16 * GIB, "Tesla V100-SXM2-16GB"),
    ("GPU-bbbb2222-0000-0000-0000-000000000000", 0x1A, (9, 0), 80 * GIB, "NVIDIA H100 80GB HBM3"),
    ("GPU-cccc3333-0000-0000-0000-000000000000", 0x86, (8, 0), 40 * GIB, "NVIDIA A100-SXM4-40GB"),
]

STAND_IN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
                 char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { char uuid[96]; unsigned int bus; int major, minor; unsigned long long memory; char name[96]; }
    device_t;

static device_t devices[16];
static int count = -1;

/* FAKE_NVML_DEVICES="uuid,bus,major,minor,memory,name;..." describes the GPUs, in NVML's order. */
static void load(void) {
    char spec[4096];
    const char *raw = getenv("FAKE_NVML_DEVICES");
    count = 0;
    if (!raw) return;
    strncpy(spec, raw, sizeof(spec) - 1);
    spec[sizeof(spec) - 1] = 0;
    for (char *item = strtok(spec, ";"); item && count < 16; item = strtok(NULL, ";")) {
        device_t *d = &devices[count++];
        sscanf(item, "%95[^,],%u,%d,%d,%llu,%95[^;]", d->uuid, &d->bus, &d->major, &d->minor, &d->memory, d->name);
    }
}

int nvmlInit_v2(void) {
    if (getenv("FAKE_NVML_INIT_FAILS")) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    load();
    return 0;
}
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = (unsigned int)count; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **handle) {
    if ((int)i >= count) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *handle = &devices[i];
    return 0;
}
int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    snprintf(uuid, length, "%s", ((device_t *)handle)->uuid);
    return 0;
}
int nvmlDeviceGetPciInfo_v3(void *handle, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof(*pci));
    pci->bus = ((device_t *)handle)->bus;
    snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
    return 0;
}
int nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    if (getenv("FAKE_NVML_NO_NAMES")) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    snprintf(name, length, "%s", ((device_t *)handle)->name);
    return 0;
}
int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    *major = ((device_t *)handle)->major;
    *minor = ((device_t *)handle)->minor;
    return 0;
}
/* FAKE_NVML_CUDA_DRIVER=12020: the driver's CUDA version (12.2); unset: a driver without the call's support */
int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    const char *raw = getenv("FAKE_NVML_CUDA_DRIVER");
    if (!raw) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    *version = atoi(raw);
    return 0;
}
/* FAKE_NVML_MIG=1: every GPU in MIG mode; unset: MIG not supported (as on GPUs before Ampere) */
int nvmlDeviceGetMigMode(void *handle, unsigned int *current, unsigned int *pending) {
    if (!getenv("FAKE_NVML_MIG")) return 3;
    *current = *pending = 1;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *handle, nvmlMemory_t *memory) {
    memory->total = ((device_t *)handle)->memory;
    memory->free = memory->total;
    memory->used = 0;
    return 0;
}
"""

# Runs in a fresh interpreter (the loader reads LD_LIBRARY_PATH at start-up). torch's CUDA initialisation is made to
# raise, so reading the GPUs through NVML is proven not to create a CUDA context.
PROBE = """
import json, os, sys
import torch
def forbidden(*args, **kwargs):
    raise AssertionError("CUDA was initialised")
torch.cuda._lazy_init = forbidden
from lightning_presets.core import hardware
results, machines = [], []
for environ in json.loads(sys.argv[1]):
    hardware._read_nvml.cache_clear()
    os.environ.pop("FAKE_NVML_MIG", None)
    os.environ.update({key: value for key, value in environ.items() if key.startswith("FAKE_NVML")})
    gpus = hardware.nvml_gpus(environ)
    results.append(None if gpus is None else [gpus.count, gpus.capability, gpus.memory_bytes])
    machines.append(None if gpus is None else [gpus.driver_cuda, gpus.capabilities, gpus.mig])
    os.environ.pop("FAKE_NVML_MIG", None)
names = [None if (gpus := hardware.nvml_gpus(environ)) is None else list(gpus.names)
         for environ in json.loads(sys.argv[1])]
observed = hardware.observed_capability()  # the real environment, before the loop below changes it
import argparse
from lightning_presets.tools import doctor
from lightning_presets.cli._plan import gpu_type
sections = []
for environ in json.loads(sys.argv[1]):
    hardware._read_nvml.cache_clear()
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.environ.pop("FAKE_NVML_MIG", None)
    os.environ.update(environ)
    plan = list(gpu_type(argparse.Namespace(gpu_type=None)))  # plan without --gpu-type
    machine, found = doctor.machine_section()
    sections.append({**doctor.gpus_section(), "plan": plan, "machine": machine, "codes": [f.code for f in found]})
print("RESULT " + json.dumps({"results": results, "observed": observed, "names": names, "machines": machines,
                              "doctor": sections, "cuda_initialized": torch.cuda.is_initialized()}))
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libnvidia-ml.so.1")
    directory = tmp_path_factory.mktemp("nvml")
    (directory / "nvml.c").write_text(STAND_IN)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(directory / hardware.NVML_LIBRARY), str(directory / "nvml.c")],
        check=True,
        capture_output=True,
    )
    return directory


def start_probe(library_dir: Path | None, environs: list[dict[str, str]], **env: str) -> Started:
    spec = ";".join(f"{uuid},{bus},{cap[0]},{cap[1]},{memory},{name}" for uuid, bus, cap, memory, name in DEVICES)
    full_env = {key: value for key, value in os.environ.items() if not key.startswith(("CUDA_", "FAKE_NVML"))}
    full_env.update({"FAKE_NVML_DEVICES": spec, "LIGHTNING_PRESETS_AUTOLOAD": "0", **env})
    full_env["LD_LIBRARY_PATH"] = str(library_dir) if library_dir else ""
    return Started([sys.executable, "-c", textwrap.dedent(PROBE), json.dumps(environs)], env=full_env, timeout=180)


def probe(started: Started) -> dict[str, Any]:
    done = started.result()
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(lines[0].removeprefix("RESULT "))
    return data


CASES: list[tuple[dict[str, str], list[Any] | None]] = [
    ({}, [3, [7, 0], 16 * GIB]),  # every GPU: the lowest capability, the smallest memory
    ({"CUDA_VISIBLE_DEVICES": "1"}, [1, [8, 0], 40 * GIB]),  # fastest first (CUDA's default): H100, A100, V100
    ({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, [1, [7, 0], 16 * GIB]),  # bus order
    ({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, [1, [9, 0], 80 * GIB]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-cccc3333"}, [1, [8, 0], 40 * GIB]),  # a UUID prefix, whatever the order
    ({"CUDA_VISIBLE_DEVICES": "GPU-bbbb2222-0000-0000-0000-000000000000,GPU-aaaa"}, [2, [7, 0], 16 * GIB]),
    ({"CUDA_VISIBLE_DEVICES": "2,0"}, [2, [7, 0], 16 * GIB]),
    ({"CUDA_VISIBLE_DEVICES": "0,5,1"}, [1, [9, 0], 80 * GIB]),  # stops at the first index out of range
    ({"CUDA_VISIBLE_DEVICES": "GPU-dddd,0"}, [0, None, None]),  # stops at an unknown UUID
    ({"CUDA_VISIBLE_DEVICES": "1,1"}, [0, None, None]),  # a repeated device selects none
    ({"CUDA_VISIBLE_DEVICES": ""}, [0, None, None]),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, [0, None, None]),
    # MIG: CUDA enumerates one instance per process, whatever the list; its memory is a slice (unknown here)
    ({"CUDA_VISIBLE_DEVICES": "MIG-1111,MIG-2222", "FAKE_NVML_MIG": "1"}, [1, [7, 0], None]),
    ({"CUDA_VISIBLE_DEVICES": "MIG-1111"}, [1, [7, 0], None]),  # no GPU in MIG mode: every GPU could carry it
]


@pytest.fixture(scope="module")
def probes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    """The three probes, started side by side: each is a fresh interpreter of its own (the dynamic loader reads
    ``LD_LIBRARY_PATH`` when the process starts, and the stand-in is loaded once per process), none depends on
    another."""

    def library() -> Path:
        return request.getfixturevalue("stand_in")  # type: ignore[no-any-return]

    cases = [environ for environ, _ in CASES]
    runs = Fresh(request, {
        "cases": (lambda: start_probe(library(), cases, FAKE_NVML_CUDA_DRIVER="12020"),
                  ("test_capability_and_memory_through_the_stand_in_nvml",
                   "test_the_driver_cuda_version_and_mig_instances_through_the_stand_in_nvml",
                   "test_the_doctor_compares_the_machine_with_the_build")),
        "init_fails": (lambda: start_probe(library(), [{}], FAKE_NVML_INIT_FAILS="1"),
                       ("test_nvml_that_fails_to_initialise_means_unknown",)),
        "no_library": (lambda: start_probe(None, [{}, {"CUDA_VISIBLE_DEVICES": "0"}]),
                       ("test_no_nvml_library_means_unknown",)),
        "no_names": (lambda: start_probe(library(), [{}], FAKE_NVML_NO_NAMES="1"),
                     ("test_a_driver_that_names_no_gpu_still_gives_capability_and_memory",
                      "test_the_driver_cuda_version_and_mig_instances_through_the_stand_in_nvml")),
    })  # fmt: skip
    yield runs
    runs.close()


def test_capability_and_memory_through_the_stand_in_nvml(stand_in: Path, probes: Fresh) -> None:
    data = probe(probes["cases"])
    for (environ, expected), got in zip(CASES, data["results"], strict=True):
        assert got == expected, environ
    assert data["observed"] == [7, 0]  # observed_capability() reads the real environment: every GPU
    assert data["cuda_initialized"] is False


def test_nvml_that_fails_to_initialise_means_unknown(stand_in: Path, probes: Fresh) -> None:
    data = probe(probes["init_fails"])
    assert data["results"] == [None]
    assert data["observed"] is None


def test_no_nvml_library_means_unknown(probes: Fresh) -> None:
    data = probe(probes["no_library"])
    assert data["results"] == [None, None]
    assert data["observed"] is None


@pytest.mark.parametrize(
    ("raw", "positions"),
    [(None, [0, 1, 2]), ("", []), ("2", [2]), ("1gpu,2", [1, 2]), ("0,3", [0]), ("0,0", []), ("GPU-b", [1]),
     ("GPU-", []), ("MIG-x", [])],
)  # fmt: skip
def test_visible_positions_read_cuda_visible_devices_as_the_runtime_does(raw: str | None, positions: list[int]) -> None:
    assert hardware.visible_positions(raw, ["GPU-a1", "GPU-b2", "GPU-c3"]) == positions


def test_doctor_names_the_visible_gpus_and_the_plan_type_they_are(stand_in: Path, probes: Fresh) -> None:
    """NVML's names in CUDA's order (fastest first), the visible ones only; a type of plan's table only when all the
    visible GPUs are one (a mixed machine gets none)."""
    data = probe(probes["cases"])
    names = dict(zip([json.dumps(environ) for environ, _ in CASES], data["names"], strict=True))
    assert names["{}"] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB"]
    assert names[json.dumps({"CUDA_VISIBLE_DEVICES": "GPU-cccc3333"})] == ["NVIDIA A100-SXM4-40GB"]
    doctor = dict(zip([json.dumps(environ) for environ, _ in CASES], data["doctor"], strict=True))
    mixed = doctor["{}"]
    assert (mixed["read"], mixed["count"], mixed["gpu_type"], mixed["memory_bytes"]) == (True, 3, None, 16 * GIB)
    assert mixed["plan"] == ["H100-SXM", False]  # mixed: plan's default, not read from the machine
    h100 = doctor[json.dumps({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})]
    assert (h100["names"], h100["gpu_type"], h100["plan"]) == (
        ["NVIDIA H100 80GB HBM3"],
        "H100-SXM",
        ["H100-SXM", True],
    )
    a100 = doctor[json.dumps({"CUDA_VISIBLE_DEVICES": "1"})]  # fastest first: index 1 is the A100
    assert (a100["names"], a100["gpu_type"]) == (["NVIDIA A100-SXM4-40GB"], "A100-40GB")
    assert a100["plan"] == ["A100-40GB", True]  # plan without --gpu-type times the step on the machine's A100
    assert doctor[json.dumps({"CUDA_VISIBLE_DEVICES": ""})]["count"] == 0
    assert data["cuda_initialized"] is False


def test_a_driver_that_names_no_gpu_still_gives_capability_and_memory(stand_in: Path, probes: Fresh) -> None:
    data = probe(probes["no_names"])
    assert data["results"] == [[3, [7, 0], 16 * GIB]]
    assert data["names"] == [[]]
    assert data["doctor"][0]["gpu_type"] is None


def test_the_driver_cuda_version_and_mig_instances_through_the_stand_in_nvml(stand_in: Path, probes: Fresh) -> None:
    """The driver's CUDA version (``nvmlSystemGetCudaDriverVersion_v2``: 12020 is 12.2) and each visible GPU's
    capability and MIG mode, in CUDA's order; a list of MIG instances is one device (CUDA enumerates one per
    process); a driver without the call gives no version."""
    data = probe(probes["cases"])
    machines = dict(zip([json.dumps(environ) for environ, _ in CASES], data["machines"], strict=True))
    assert machines["{}"] == [[12, 2], [[9, 0], [8, 0], [7, 0]], [False, False, False]]  # fastest first
    assert machines[json.dumps({"CUDA_VISIBLE_DEVICES": "2,0"})] == [[12, 2], [[7, 0], [9, 0]], [False, False]]
    mig = json.dumps({"CUDA_VISIBLE_DEVICES": "MIG-1111,MIG-2222", "FAKE_NVML_MIG": "1"})
    assert machines[mig] == [[12, 2], [[7, 0]], [True]]
    assert machines[json.dumps({"CUDA_VISIBLE_DEVICES": ""})] == [[12, 2], [], []]
    assert probe(probes["no_names"])["machines"] == [[None, [[9, 0], [8, 0], [7, 0]], [False, False, False]]]


def test_the_doctor_compares_the_machine_with_the_build(stand_in: Path, probes: Fresh) -> None:
    """Through the stand-in's three GPUs and a CPU-only torch (this machine's and CI's): the doctor reads the driver's
    CUDA version and says that this torch cannot use the GPUs (LP125), with no CUDA context created."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch: the CPU-only verdict does not apply")
    data = probe(probes["cases"])
    doctor = dict(zip([json.dumps(environ) for environ, _ in CASES], data["doctor"], strict=True))
    every = doctor["{}"]
    assert every["machine"]["driver_cuda"] == "12.2"
    assert every["codes"] == ["LP125"]
    verdict = next(each for each in every["machine"]["verdicts"] if each["check"] == "kernels")
    assert verdict["status"] == "warning"
    assert "lists 3 GPU(s)" in verdict["message"]
    none = doctor[json.dumps({"CUDA_VISIBLE_DEVICES": ""})]
    assert none["codes"] == []
    assert "no GPU this process may use" in none["machine"]["reason"]
    assert data["cuda_initialized"] is False
