# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Measuring a train step: its costs, its bytes, and timing on a noisy machine.

Kept apart from what a training script uses (`boostax`): what a compiled
step costs in FLOPs, bytes, memory and compile time against the plain Optax
step (`cost_report`, `executable_cost`, `kernel_counts`), the bytes a state
and a step hold and send per device, by dtype (`state_bytes_per_device`,
`step_bytes`, `saved_activations`, `collective_bytes`), accelerators' peak
rates for roofline projections (`ACCELERATORS`), and step-time ratios that
survive a loaded machine (`interleaved_timings`, `paired_ratio`).

Example:
  >>> import boostax
  >>> "NVIDIA H200" in boostax.measure.ACCELERATORS
  True
"""

from boostax._src.measure.accelerators import ACCELERATORS as ACCELERATORS
from boostax._src.measure.accelerators import Accelerator as Accelerator
from boostax._src.measure.cost import CostReport as CostReport
from boostax._src.measure.cost import cost_report as cost_report
from boostax._src.measure.executable_cost import (
    ExecutableCost as ExecutableCost,
)
from boostax._src.measure.executable_cost import (
    executable_cost as executable_cost,
)
from boostax._src.measure.hlo_kernels import kernel_counts as kernel_counts
from boostax._src.measure.state_bytes import (
    state_bytes_per_device as state_bytes_per_device,
)
from boostax._src.measure.step_bytes import SavedActivations as SavedActivations
from boostax._src.measure.step_bytes import StepBytes as StepBytes
from boostax._src.measure.step_bytes import collective_bytes as collective_bytes
from boostax._src.measure.step_bytes import compute_dtypes as compute_dtypes
from boostax._src.measure.step_bytes import replica_groups as replica_groups
from boostax._src.measure.step_bytes import (
    saved_activations as saved_activations,
)
from boostax._src.measure.timing import (
    interleaved_timings as interleaved_timings,
)
from boostax._src.measure.timing import paired_ratio as paired_ratio
from boostax._src.measure.train_step_bytes import step_bytes as step_bytes

__all__ = (
    "ACCELERATORS",
    "Accelerator",
    "CostReport",
    "ExecutableCost",
    "SavedActivations",
    "StepBytes",
    "collective_bytes",
    "compute_dtypes",
    "cost_report",
    "executable_cost",
    "interleaved_timings",
    "kernel_counts",
    "paired_ratio",
    "replica_groups",
    "saved_activations",
    "state_bytes_per_device",
    "step_bytes",
)
