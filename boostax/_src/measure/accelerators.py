# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Accelerators' peak rates, for `cost_report`'s roofline projections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from boostax._src import validation


class _AcceleratorFields(NamedTuple):
    name: str
    peak_flops: float
    peak_bytes_per_second: float
    source: str


class Accelerator(_AcceleratorFields):
    """Peak rates of an accelerator, for roofline projections.

    A NamedTuple; the rates are checked (finite numbers > 0) when it is
    built.

    Attributes:
      name: the accelerator.
      peak_flops: dense FLOP/s at the precision float32 training uses by
        default there (TF32 tensor cores on NVIDIA GPUs since Ampere).
      peak_bytes_per_second: memory bandwidth.
      source: where the figures come from.
    """

    __slots__ = ()

    def __new__(
        cls,
        name: str,
        peak_flops: float,
        peak_bytes_per_second: float,
        source: str,
    ):
        validation.check_str("name", name)
        peak_flops, peak_bytes_per_second = [
            validation.check_number(field, value, minimum=0, open_minimum=True)
            for field, value in (
                ("peak_flops", peak_flops),
                ("peak_bytes_per_second", peak_bytes_per_second),
            )
        ]
        validation.check_str("source", source, allow_empty=True)
        return super().__new__(
            cls, name, peak_flops, peak_bytes_per_second, source
        )

    def seconds(self, flops: float, bytes_accessed: float) -> float:
        """The roofline time of a step: its slower of compute and memory."""
        return max(
            flops / self.peak_flops,
            bytes_accessed / self.peak_bytes_per_second,
        )


#: The accelerators :func:`cost_report` can project a step time on, by name:
#: their peak dense FLOP/s and memory bandwidth, from the vendors' datasheets.
ACCELERATORS: Mapping[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator(
            "NVIDIA H200",
            494.7e12,
            4.8e12,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM): TF32 989 TFLOP/s "
            "with sparsity, half that dense; HBM3e 4.8 TB/s",
        ),
        Accelerator(
            "NVIDIA A100",
            156e12,
            2.039e12,
            "NVIDIA A100 Tensor Core GPU datasheet (80 GB SXM): TF32 156 "
            "TFLOP/s dense; HBM2e 2,039 GB/s",
        ),
        Accelerator(
            "TPU v5e",
            197e12,
            819e9,
            "Google Cloud TPU v5e documentation: 197 TFLOP/s bf16 (float32 "
            "matmuls run as bf16 passes by default); HBM 819 GB/s",
        ),
    )
}
DEFAULT_ACCELERATOR = "NVIDIA H200"
