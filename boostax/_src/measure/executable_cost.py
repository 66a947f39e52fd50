# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""What one compiled executable costs, read from XLA: FLOPs and bytes
accessed (``cost_analysis()``), memory (``memory_analysis()``), the bytes
each device sends in its collectives and the kernels it launches."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from boostax._src import validation
from boostax._src.measure import hlo_kernels
from boostax._src.measure import step_bytes as step_bytes_lib
from boostax._src.step import executables as executables_lib


class _ExecutableCostFields(NamedTuple):
    flops: float
    bytes_accessed: float
    temp_bytes: int
    argument_bytes: int
    output_bytes: int
    collective_bytes: float
    collectives: dict[str, int]
    kernels: int
    kernel_kinds: dict[str, int]


def _check_real(name: str, value: Any) -> float:
    """A real number (XLA's figures, taken as XLA reports them)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, numbers.Real
    ):
        raise TypeError(f"`{name}` must be a number, {validation.got(value)}.")
    return float(value)


class ExecutableCost(_ExecutableCostFields):
    """What XLA says one compiled executable costs, per device.

    A NamedTuple; its fields' types are checked when it is built.

    Attributes:
      flops: floating-point operations (``cost_analysis()``).
      bytes_accessed: bytes read and written by its operations.
      temp_bytes: temporary buffers (``memory_analysis()``).
      argument_bytes: its inputs.
      output_bytes: its outputs.
      collective_bytes: bytes sent per device by its collectives.
      collectives: ``{collective: count}``.
      kernels: the kernels one run launches, read from the optimized HLO
        (`kernel_counts`): fusions, custom calls and unfused operations.
      kernel_kinds: ``{opcode: count}`` of those kernels.
    """

    __slots__ = ()

    def __new__(
        cls,
        flops: float,
        bytes_accessed: float,
        temp_bytes: int,
        argument_bytes: int,
        output_bytes: int,
        collective_bytes: float,
        collectives: dict[str, int],
        kernels: int,
        kernel_kinds: dict[str, int],
    ):
        flops = _check_real("flops", flops)
        bytes_accessed = _check_real("bytes_accessed", bytes_accessed)
        temp_bytes, argument_bytes, output_bytes = [
            validation.check_int(name, value)
            for name, value in (
                ("temp_bytes", temp_bytes),
                ("argument_bytes", argument_bytes),
                ("output_bytes", output_bytes),
            )
        ]
        collective_bytes = _check_real("collective_bytes", collective_bytes)
        validation.check_instance(
            "collectives", collectives, Mapping, "a dict {collective: count}"
        )
        for count in collectives.values():
            validation.check_int("collectives", count, minimum=0)
        kernels = validation.check_int("kernels", kernels, minimum=0)
        validation.check_instance(
            "kernel_kinds", kernel_kinds, Mapping, "a dict {opcode: count}"
        )
        for count in kernel_kinds.values():
            validation.check_int("kernel_kinds", count, minimum=0)
        return super().__new__(
            cls,
            flops,
            bytes_accessed,
            temp_bytes,
            argument_bytes,
            output_bytes,
            collective_bytes,
            collectives,
            kernels,
            kernel_kinds,
        )


def executable_cost(compiled: jax.stages.Compiled) -> ExecutableCost:
    """Reads the cost of ``jax.jit(f).lower(...).compile()`` (or of a
    `TrainStep.compile_all` program, an `executables.Program`).

    Example:
      >>> import jax, jax.numpy as jnp, boostax
      >>> compiled = jax.jit(lambda a, b: a @ b).lower(
      ...     jnp.ones((8, 16)), jnp.ones((16, 4))).compile()
      >>> boostax.measure.executable_cost(compiled).flops
      1024.0
    """
    if isinstance(compiled, executables_lib.Program):
        compiled = compiled.compiled
    validation.check_instance(
        "compiled",
        compiled,
        jax.stages.Compiled,
        "a jax.stages.Compiled (jax.jit(f).lower(...).compile())",
    )
    analysis = compiled.cost_analysis() or {}
    if isinstance(analysis, list):  # older JAX: one dict per computation
        analysis = analysis[0] if analysis else {}
    memory = compiled.memory_analysis()
    hlo = compiled.as_text() or ""  # None: no text (kernel_counts refuses)
    sent, counts = step_bytes_lib.collective_bytes(hlo)
    kinds = hlo_kernels.kernel_counts(hlo)

    def read(name):
        return int(getattr(memory, name, 0) or 0)

    return ExecutableCost(
        flops=float(analysis.get("flops", 0.0)),
        bytes_accessed=float(analysis.get("bytes accessed", 0.0)),
        temp_bytes=read("temp_size_in_bytes"),
        argument_bytes=read("argument_size_in_bytes"),
        output_bytes=read("output_size_in_bytes"),
        collective_bytes=sent,
        collectives=counts,
        kernels=sum(kinds.values()),
        kernel_kinds=kinds,
    )
