"""What a GPU and its links can do at best: dense peak FLOP/s by data type, memory bandwidth, the
bandwidth of the link inside a node (NVLink, Infinity Fabric, PCIe) and a default network bandwidth per GPU
(``gpu_spec``, found by the trace's ``deviceProperties`` name).

Every number is the vendor's datasheet figure for **dense** math (NVIDIA prints tensor-core
figures "with sparsity", twice the dense one: those are halved here); units: TFLOP/s = 1e12
FLOP/s, GB/s = 1e9 bytes/s.  ``link_gbps`` is per GPU and per direction (the bidirectional
NVLink figure of the datasheet halved), which is what nccl-tests' bus bandwidth approaches;
``nic_gbps`` the per-GPU network of the vendor's reference system (DGX / HGX: one NIC per GPU),
in GB/s (a 400 Gb/s NIC is 50 GB/s).  Sources:

* A100: NVIDIA A100 Tensor Core GPU datasheet (2021): BF16/FP16 312, TF32 156, FP32 19.5,
  FP64 19.5 (tensor) TFLOP/s; 1,555 GB/s (40 GB) / 2,039 GB/s (80 GB SXM); NVLink 600 GB/s;
  DGX A100: 200 Gb/s HDR per GPU.
* H100 SXM / PCIe / NVL and H200: NVIDIA H100 datasheet (2023) and H200 datasheet (2024):
  SXM BF16 989, FP8 1,979, TF32 495, FP32 67; PCIe BF16 756, FP8 1,513, FP32 51; NVL BF16 835,
  FP8 1,671, FP32 60; 3.35 / 2.0 / 3.9 TB/s, H200 4.8 TB/s; NVLink 900 GB/s (PCIe: 600 GB/s
  bridge); DGX H100: 400 Gb/s ConnectX-7 per GPU.
* B200: NVIDIA HGX B200 datasheet (2024): BF16 2.25 PFLOP/s, FP8 4.5 PFLOP/s dense per GPU,
  8 TB/s, NVLink 5 1.8 TB/s.
* MI300X / MI325X: AMD Instinct MI300X / MI325X datasheets: BF16 1,307.4, FP8 2,614.9, FP32
  163.4 TFLOP/s; 5.3 / 6 TB/s; Infinity Fabric 7 links x 64 GB/s per direction (448 GB/s).
* MI250X: AMD Instinct MI250X datasheet: BF16 383, FP32 (matrix) 95.7 TFLOP/s, 3.2 TB/s.
* V100 SXM2 / PCIe: NVIDIA V100 datasheet: FP16 tensor 125 / 112, FP32 15.7 / 14 TFLOP/s (no BF16),
  900 GB/s; NVLink 300 GB/s (SXM2), PCIe 3.0 x16 ~16 GB/s per direction (PCIe: no NVLink).
* PCIe cards (A100 / H100 PCIe): the PCIe slot, 4.0 x16 32 GB/s and 5.0 x16 64 GB/s per direction
  (A100 datasheet: PCIe Gen4 64 GB/s; H100: PCIe Gen5 128 GB/s, both bidirectional); A100 80GB PCIe
  1,935 GB/s.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: canonical data-type names (Kineto's ``Input type`` spellings map onto them, see ``dtype_key``)
DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32", "fp64")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: ``name``, ``peak_tflops`` (dense, by ``DTYPES`` key), ``mem_gbps``
    (HBM, GB/s), ``link_gbps`` (that link per direction, GB/s), ``nic_gbps``
    (default network per GPU, GB/s), ``source`` (the datasheet), ``link`` (what joins the GPUs of
    one node, by the model: ``NVLink 4`` on an SXM board, ``PCIe 3.0 x16`` between PCIe cards,
    ``Infinity Fabric``)."""
    name: str
    peak_tflops: dict
    mem_gbps: float
    link_gbps: float
    nic_gbps: float
    source: str
    link: str = "NVLink"

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for ``dtype`` (a ``DTYPES`` key), None when the GPU has no such math
        (V100: no bf16)."""
        return self.peak_tflops.get(dtype)

    def ridge(self, dtype: str) -> float | None:
        """The roofline's ridge point, FLOP per byte: peak FLOP/s / memory bytes/s."""
        p = self.peak(dtype)
        return p * 1e12 / (self.mem_gbps * 1e9) if p else None


def _s(name, tflops, mem, link, nic, source, fp16_only=False, bus="NVLink"):
    """A ``GpuSpec`` from one datasheet line: ``tflops`` the dense peaks ``(bf16 and fp16, fp8, tf32, fp32,
    fp64)`` (0: no such math; ``fp16_only``: fp16 but no bf16), then HBM, link and network GB/s."""
    bf16, fp8, tf32, fp32, fp64 = tflops
    peaks = {"bf16": 0 if fp16_only else bf16, "fp16": bf16, "fp8": fp8, "tf32": tf32, "fp32": fp32, "fp64": fp64}
    return GpuSpec(name, {k: v for k, v in peaks.items() if v}, mem, link, nic, source, bus)


#: (pattern on the deviceProperties name, spec); the first match wins, so specific before general.
#: A PCIe card's link is its PCIe slot (an NVLink bridge, A100 / H100 PCIe's option for pairs, does
#: not show in the trace: a bridged pair's bandwidth above the PCIe peak is flagged, not hidden)
GPUS = [
    (r"H100.*PCIe", _s("H100 PCIe", (756, 1513, 378, 51, 51), 2000, 64, 50, "NVIDIA H100 datasheet",
                       bus="PCIe 5.0 x16")),
    (r"H100.*NVL", _s("H100 NVL", (835, 1671, 417, 60, 60), 3900, 300, 50, "NVIDIA H100 datasheet",
                      bus="NVLink bridge")),
    (r"H100", _s("H100 SXM", (989, 1979, 495, 67, 67), 3350, 450, 50, "NVIDIA H100 datasheet", bus="NVLink 4")),
    (r"H200", _s("H200 SXM", (989, 1979, 495, 67, 67), 4800, 450, 50, "NVIDIA H200 datasheet", bus="NVLink 4")),
    (r"GB200|B200", _s("B200", (2250, 4500, 1100, 75, 37), 8000, 900, 50, "NVIDIA HGX B200 datasheet",
                       bus="NVLink 5")),
    (r"A100.*PCI.*40|A100-PCIE-40", _s("A100 PCIe 40GB", (312, 0, 156, 19.5, 19.5), 1555, 32, 25,
                                       "NVIDIA A100 datasheet", bus="PCIe 4.0 x16")),
    (r"A100.*PCI", _s("A100 PCIe 80GB", (312, 0, 156, 19.5, 19.5), 1935, 32, 25, "NVIDIA A100 datasheet",
                      bus="PCIe 4.0 x16")),
    (r"A100.*40GB|A100-SXM4-40", _s("A100 40GB", (312, 0, 156, 19.5, 19.5), 1555, 300, 25,
                                    "NVIDIA A100 datasheet", bus="NVLink 3")),
    (r"A100", _s("A100 80GB", (312, 0, 156, 19.5, 19.5), 2039, 300, 25, "NVIDIA A100 datasheet", bus="NVLink 3")),
    (r"V100.*PCI", _s("V100 PCIe", (112, 0, 0, 14, 7), 900, 16, 12.5, "NVIDIA V100 datasheet",
                      fp16_only=True, bus="PCIe 3.0 x16")),
    (r"V100", _s("V100", (125, 0, 0, 15.7, 7.8), 900, 150, 12.5, "NVIDIA V100 datasheet", fp16_only=True,
                 bus="NVLink 2")),
    (r"MI325", _s("MI325X", (1307.4, 2614.9, 653.7, 163.4, 81.7), 6000, 448, 50, "AMD Instinct MI325X datasheet",
                  bus="Infinity Fabric")),
    (r"MI300X|MI300", _s("MI300X", (1307.4, 2614.9, 653.7, 163.4, 81.7), 5300, 448, 50,
                         "AMD Instinct MI300X datasheet", bus="Infinity Fabric")),
    (r"MI250", _s("MI250X", (383, 0, 0, 95.7, 95.7), 3277, 200, 25, "AMD Instinct MI250X datasheet",
                  bus="Infinity Fabric")),
]


def gpu_spec(device_name: str | None) -> GpuSpec | None:
    """The ``GpuSpec`` of a ``deviceProperties`` name (``"NVIDIA H100 80GB HBM3"``,
    ``"AMD Instinct MI300X"``), None when the table has no such GPU."""
    if not device_name:
        return None
    for pat, spec in GPUS:
        if re.search(pat, device_name, re.I):
            return spec
    return None


@lru_cache(maxsize=256)
def dtype_key(name: str | None) -> str | None:
    """A ``DTYPES`` key from a dtype's spelling (Kineto ``Input type``: ``"c10::BFloat16"``,
    ``"float"``, ``"c10::Half"``; config: ``"bfloat16"``, ``"bf16"``, ``"fp8"``), None if unknown."""
    n = str(name or "").lower()
    for pat, key in (("float8|fp8|e4m3|e5m2", "fp8"), ("bfloat16|bf16", "bf16"), ("half|float16|fp16", "fp16"),
                     ("tf32", "tf32"), ("double|float64|fp64", "fp64"), ("float32|fp32|^float$", "fp32")):
        if re.search(pat, n):
            return key
    return None


@lru_cache(maxsize=256)
def dtype_bytes(name: str | None) -> int | None:
    """Bytes per element of a Kineto ``Input type`` (``c10::BFloat16`` 2, ``float`` 4, ``long int`` 8,
    ``bool`` / ``unsigned char`` / fp8 1), None when unknown."""
    n = str(name or "").lower()
    for pat, size in (("float8|fp8|e4m3|e5m2|bool|char|int8|uint8", 1), ("bfloat16|half|float16|short|int16", 2),
                      ("double|float64|long|int64", 8), ("float|int", 4)):
        if re.search(pat, n):
            return size
    return None
