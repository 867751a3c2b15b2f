"""Published peak rates of the accelerators the benchmarks predict and measure against: what
a roofline (`benchmarks/roofline.py`) and a measured utilisation (`benchmarks/tokens.py`) divide
by."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Hardware:
    """Published peak rates of one accelerator (dense, no sparsity)."""

    name: str
    fp32_flops: float  # FLOP/s of plain fp32 arithmetic (no matrix unit)
    matrix_flops: float  # FLOP/s of the matrix unit in the precision fp32 matmuls run at
    matrix_precision: str
    bandwidth: float  # bytes/s of device memory
    source: str


HARDWARE = {
    "h100": Hardware(
        name="NVIDIA H100 SXM5 80GB", fp32_flops=67e12, matrix_flops=494.7e12,
        matrix_precision="TF32 tensor cores (XLA's default for fp32 dots on NVIDIA GPUs)",
        bandwidth=3.35e12,
        source="NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOPS, TF32 Tensor Core 989 "
               "TFLOPS with sparsity (494.7 dense), BF16 1,979 with sparsity (989.4 dense), "
               "HBM3 3.35 TB/s (SXM5)"),
    "h200": Hardware(
        name="NVIDIA H200 SXM 141GB", fp32_flops=67e12, matrix_flops=494.7e12,
        matrix_precision="TF32 tensor cores (XLA's default for fp32 dots on NVIDIA GPUs)",
        bandwidth=4.8e12,
        source="NVIDIA H200 Tensor Core GPU datasheet: the H100's FP32 67 TFLOPS and TF32 "
               "Tensor Core 989 TFLOPS with sparsity, HBM3e 4.8 TB/s"),
    "tpu_v5e": Hardware(
        name="Google TPU v5e (one chip)", fp32_flops=197e12, matrix_flops=197e12,
        matrix_precision="bf16 MXU passes (fp32 dots at JAX's default precision run as bf16 "
                         "passes on TPU; the vector unit's fp32 rate is not published, so "
                         "197 TFLOP/s bounds every flop from below in time)",
        bandwidth=819e9,
        source="Google Cloud TPU v5e documentation: 197 TFLOP/s bf16, 394 TOP/s int8, "
               "16 GiB HBM2 at 819 GB/s per chip"),
}


def peak_for(device_kind: str) -> Hardware | None:
    """The published rates of a device JAX names `device_kind`, if known."""
    kind = device_kind.lower()
    if "h100" in kind:
        return HARDWARE["h100"]
    if "h200" in kind:
        return HARDWARE["h200"]
    if "v5 lite" in kind or "v5e" in kind or "v5litepod" in kind:
        return HARDWARE["tpu_v5e"]
    return None
