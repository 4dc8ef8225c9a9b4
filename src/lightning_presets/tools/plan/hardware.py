"""GPUs as data: memory, peak dense FLOP/s per dtype, memory bandwidth, and the links a step's bytes cross.

Every figure is the vendor's datasheet figure, **dense** (without 2:4 sparsity, which datasheets often quote
first: half of it), for the SXM/OAM board unless the name says PCIe. Link bandwidths are **per GPU and per
direction** (a ring all-gather sends and receives at once: a datasheet's "bidirectional" NVLink figure is
halved). Sources, one per entry (``source``):

* A100-40GB, A100-80GB (SXM4): NVIDIA A100 datasheet,
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
  (BF16/FP16 312 TFLOPS dense, FP32 19.5, no FP8; 1,555 / 2,039 GB/s; NVLink 600 GB/s; PCIe Gen4).
* H100-SXM, H100-PCIe: NVIDIA H100 datasheet,
  https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
  (SXM: BF16 989.5 dense (1,979 sparse), FP8 1,979, FP32 67, 3.35 TB/s, NVLink 900 GB/s; PCIe: BF16 756,
  FP8 1,513, FP32 51, 2.0 TB/s, NVLink bridge between pairs only, so 8 GPUs talk over PCIe Gen5).
* H200 (SXM): NVIDIA H200 page and datasheet, https://www.nvidia.com/en-us/data-center/h200/
  (141 GB HBM3e, 4.8 TB/s; H100 SXM's compute; NVLink 900 GB/s).
* B200 (HGX B200, per GPU = the 8-GPU board's figures / 8): https://www.nvidia.com/en-us/data-center/hgx/
  (FP8 72 PFLOPS sparse / 8 / 2 = 4.5 dense; BF16 2.25 dense; FP32 75 TFLOPS; 8 TB/s; NVLink 5 1.8 TB/s;
  180 GB per GPU).
* L40S: NVIDIA L40S datasheet, https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413
  (BF16 362.05 dense (733 sparse), FP8 733, FP32 91.6; 48 GB GDDR6, 864 GB/s; no NVLink: PCIe Gen4 x16).
* MI300X: AMD Instinct MI300X data sheet,
  https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf
  (BF16/FP16 1,307.4 TFLOPS dense, FP8 2,614.9, FP32 163.4; 192 GB HBM3, 5.3 TB/s; 7 Infinity Fabric links of
  64 GB/s per direction each, 448 GB/s aggregate).
* PCIe per direction, x16: Gen4 32 GB/s, Gen5 64 GB/s (PCI-SIG). The host link carries offload traffic.

``H100-SXM-HBM2e-500W`` is the part torchtitan's benchmarks ran on (96 GB HBM2e at 2.4 TB/s, power-capped to
500 W; its peak FLOP/s are "between SXM and NVL", unknown: the SXM figures are used): the GPU of torchtitan's
rows, which the throughput benchmark judges (held out), not one to plan for.

``generation`` and ``mamf`` (the largest bf16 ``matmul`` a chip reached over its dense peak, measured:
:data:`MAMF_SOURCE`; H200's is GH200's, the same chip and memory) are what the calibration's per-generation share
uses (:mod:`.calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

GB = 10**9
TERA = 10**12
DEFAULT_INTER_NODE_GBPS = 400
"""A 400 Gb/s network port per GPU (InfiniBand NDR / 400 GbE), when ``--inter-node-bandwidth`` is not given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    name: str
    memory_bytes: int
    peak_flops: dict[str, float]
    """Dense peak FLOP/s per compute dtype: ``bf16``, ``fp16``, ``fp8``, ``fp32`` (``fp8`` absent: none)."""
    memory_bandwidth: float
    """Bytes/s of device memory."""
    in_node_bandwidth: float
    """Bytes/s per GPU per direction between the GPUs of one node (NVLink, Infinity Fabric, or PCIe)."""
    in_node_link: str
    host_bandwidth: float
    """Bytes/s per GPU per direction to CPU memory (PCIe): offload traffic."""
    source: str
    generation: str = ""
    """The chip family (``ampere``, ``hopper``, ...): the calibration's efficiency is per generation."""
    mamf: float | None = None
    """Maximum achievable matmul FLOP/s over the dense peak (bf16), measured (:data:`MAMF_SOURCE`); ``None``:
    not measured."""

    def flops_for(self, dtype: str) -> float:
        """Peak dense FLOP/s for an operator's dtype (``float32`` matmuls run without TF32, torch's default)."""
        key = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(dtype, "fp32")
        return self.peak_flops.get(key, self.peak_flops["bf16"])

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "memory_bytes": self.memory_bytes, "peak_flops": dict(self.peak_flops),
                "memory_bandwidth": self.memory_bandwidth, "in_node_bandwidth": self.in_node_bandwidth,
                "in_node_link": self.in_node_link, "host_bandwidth": self.host_bandwidth,
                "source": self.source, "generation": self.generation, "mamf": self.mamf}  # fmt: skip


_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_GIB = 2**30


def _gpu(name: str, memory_gb: float, bf16: float, fp8: float | None, fp32: float, bandwidth_tb: float,
         link_gb: float, link: str, host_gb: float, source: str, *, gib: bool = False, generation: str = "",
         mamf: float | None = None) -> Gpu:  # fmt: skip
    flops = {"bf16": bf16 * TERA, "fp16": bf16 * TERA, "fp32": fp32 * TERA}
    if fp8 is not None:
        flops["fp8"] = fp8 * TERA
    memory = int(memory_gb * (_GIB if gib else GB))
    return Gpu(name=name, memory_bytes=memory, peak_flops=flops, memory_bandwidth=bandwidth_tb * TERA,
               in_node_bandwidth=link_gb * GB, in_node_link=link, host_bandwidth=host_gb * GB,
               source=source, generation=generation, mamf=mamf)  # fmt: skip


MAMF_SOURCE = (
    "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md (Maximum Achievable "
    "Matmul FLOPS comparison table, BF16: A100 SXM 271.2 of 312 TFLOPS, 86.9 %; H100 SXM 794.5 of 989, "
    "80.3 %; GH200 828.6 of 989, 83.8 %; B200 1,745 of 2,250, 77.6 %; MI300X 781.9 of 1,300, 60.1 %)"
)
"""Where :attr:`Gpu.mamf` comes from: the best large bf16 ``matmul`` each chip reached in a shape search."""

GPUS: dict[str, Gpu] = {gpu.name: gpu for gpu in (
    _gpu("A100-40GB", 40, 312, None, 19.5, 1.555, 300, "NVLink 3 (600 GB/s bidirectional)", 32, _A100, gib=True,
         generation="ampere", mamf=0.869),
    _gpu("A100-80GB", 80, 312, None, 19.5, 2.039, 300, "NVLink 3 (600 GB/s bidirectional)", 32, _A100, gib=True,
         generation="ampere", mamf=0.869),
    _gpu("H100-SXM", 80, 989.5, 1979, 67, 3.35, 450, "NVLink 4 (900 GB/s bidirectional)", 64, _H100, gib=True,
         generation="hopper", mamf=0.803),
    _gpu("H100-PCIe", 80, 756, 1513, 51, 2.0, 64, "PCIe Gen5 x16 (NVLink bridges pair GPUs only)", 64, _H100,
         gib=True, generation="hopper"),
    _gpu("H200", 141, 989.5, 1979, 67, 4.8, 450, "NVLink 4 (900 GB/s bidirectional)", 64,
         "https://www.nvidia.com/en-us/data-center/h200/", generation="hopper", mamf=0.838),
    _gpu("B200", 180, 2250, 4500, 75, 8.0, 900, "NVLink 5 (1.8 TB/s bidirectional)", 64,
         "https://www.nvidia.com/en-us/data-center/hgx/", generation="blackwell", mamf=0.776),
    _gpu("L40S", 48, 362.05, 733, 91.6, 0.864, 32, "PCIe Gen4 x16 (no NVLink)", 32,
         "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413", gib=True, generation="ada"),
    _gpu("MI300X", 192, 1307.4, 2614.9, 163.4, 5.3, 448, "Infinity Fabric (7 links × 64 GB/s per direction)", 64,
         "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
         generation="cdna3", mamf=0.601),
)}  # fmt: skip
DEFAULT_GPU = "H100-SXM"

CALIBRATION_GPU = replace(
    GPUS["H100-SXM"], name="H100-SXM-HBM2e-500W", memory_bytes=96 * GB, memory_bandwidth=2.4 * TERA,
    source="https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md (Grand "
    "Teton: 96 GB HBM2e, 2.4 TB/s, 500 W power limit; peak FLOP/s unknown, SXM's used)",
)  # fmt: skip
CALIBRATED_TYPES = ("H100-SXM", "A100-80GB", "A100-40GB")
"""GPU types a published row was fitted on (an A100-40GB is the A100-80GB's chip with less memory): predictions for
the others say they were not calibrated on."""


def gpu(name: str) -> Gpu:
    """The named GPU (case-insensitive), or ``ValueError`` naming the known ones."""
    for known, each in GPUS.items():
        if known.lower() == name.strip().lower():
            return each
    raise ValueError(f"--gpu-type {name!r} is not one of {', '.join(GPUS)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """The GPU and the links of a plan's cluster."""

    gpu: Gpu
    gpus_per_node: int
    num_nodes: int
    inter_node_bandwidth: float
    """Bytes/s per GPU per direction between nodes."""

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.num_nodes

    def link_bandwidth(self, crosses_nodes: bool) -> float:
        return self.inter_node_bandwidth if crosses_nodes else self.gpu.in_node_bandwidth


def cluster(gpu_type: str, gpus_per_node: int, num_nodes: int, inter_node_gbps: float | None = None,
            nvlink_gbps: float | None = None) -> Cluster:  # fmt: skip
    """A cluster of ``gpu_type``; ``inter_node_gbps`` in GB/s per GPU (default a 400 Gb/s port: 50 GB/s),
    ``nvlink_gbps`` overrides the in-node link (GB/s per GPU per direction)."""
    found = CALIBRATION_GPU if gpu_type == CALIBRATION_GPU.name else gpu(gpu_type)
    if nvlink_gbps is not None:
        found = replace(found, in_node_bandwidth=nvlink_gbps * GB, in_node_link=f"{nvlink_gbps:g} GB/s (given)")
    inter = (DEFAULT_INTER_NODE_GBPS / 8 if inter_node_gbps is None else inter_node_gbps) * GB
    return Cluster(gpu=found, gpus_per_node=gpus_per_node, num_nodes=num_nodes, inter_node_bandwidth=inter)


_NAME_PATTERNS = (  # (what the driver's name contains, the table's name), most specific first
    (("h100", "pcie"), "H100-PCIe"), (("h100", "nvl"), "H100-PCIe"), (("h100",), "H100-SXM"), (("h200",), "H200"),
    (("b200",), "B200"), (("l40s",), "L40S"), (("a100", "40gb"), "A100-40GB"), (("a100",), "A100-80GB"),
    (("mi300x",), "MI300X"),
)  # fmt: skip


def machine_gpu_type() -> str | None:
    """The table's GPU type of the GPUs this process would use (``CUDA_VISIBLE_DEVICES``), read through NVML (no
    CUDA context); ``None`` without NVML, without GPUs, or when they are not all one known type."""
    from lightning_presets.core import hardware

    gpus = hardware.nvml_gpus()
    types = {gpu_type_of(name) for name in gpus.names} if gpus is not None else set()
    return types.pop() if len(types) == 1 else None


def gpu_type_of(device_name: str) -> str | None:
    """The table's GPU type for a driver's device name (NVML's ``nvmlDeviceGetName``: ``NVIDIA H100 80GB HBM3``,
    ``NVIDIA A100-SXM4-40GB``; AMD SMI's market name: ``AMD Instinct MI300X``), or ``None`` when none matches."""
    lowered = device_name.lower().replace(" ", "").replace("-", "")
    for fragments, name in _NAME_PATTERNS:
        if all(fragment in lowered for fragment in fragments):
            return name
    return None
