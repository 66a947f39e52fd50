# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Step-time ratios that survive a noisy machine.

Absolute step times on a shared machine drift by tens of percent between
runs; the ratio of two steps timed in turns, within the same seconds, does
not. `interleaved_timings` runs the variants in alternating order inside
each repetition, and `paired_ratio` takes the median of the per-repetition
ratios, so slow drifts cancel.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from boostax._src import validation


def interleaved_timings(
    runs: Mapping[str, Callable[[], Any]],
    *,
    repetitions: int,
    steps: int,
    warmup: bool = True,
) -> dict[str, list[float]]:
    """Seconds per step of each variant, one sample per repetition.

    Args:
      runs: ``{name: run}``; each ``run()`` performs `steps` steps and
        returns something to block on (``jax.block_until_ready``).
      repetitions: samples per variant.
      steps: steps per ``run()`` call (a sample is its time / `steps`).
      warmup: call every run once first (compilation, caches).

    Returns:
      ``{name: [seconds per step, one per repetition]}``. Within each
      repetition the variants take turns, in reversed order every other
      repetition.

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> x = jnp.ones((64, 64))
      >>> times = boostax.measure.interleaved_timings(
      ...     {"a": lambda: x @ x, "b": lambda: x + x},
      ...     repetitions=3, steps=1)
      >>> [len(v) for v in times.values()]
      [3, 3]
    """
    validation.check_instance(
        "runs", runs, Mapping, "a mapping {name: run} of callables"
    )
    for name, run in runs.items():
        validation.check_callable(
            "runs", run, f"a mapping of callables (runs[{name!r}] is not one)"
        )
    repetitions = validation.check_int("repetitions", repetitions, minimum=1)
    steps = validation.check_int("steps", steps, minimum=1)
    warmup = validation.check_bool("warmup", warmup)
    names = list(runs)
    samples: dict[str, list[float]] = {name: [] for name in names}
    if warmup:
        for name in names:
            jax.block_until_ready(runs[name]())
    for rep in range(repetitions):
        for name in names if rep % 2 == 0 else reversed(names):
            start = time.perf_counter()
            jax.block_until_ready(runs[name]())
            samples[name].append((time.perf_counter() - start) / steps)
    return samples


def paired_ratio(
    numerator: Sequence[float], denominator: Sequence[float]
) -> float:
    """Median of the per-repetition ratios ``numerator[i] / denominator[i]``.

    Example:
      >>> import boostax
      >>> boostax.measure.paired_ratio([1.0, 2.2, 3.0], [1.0, 2.0, 2.0])
      1.1
    """
    numerator = validation.check_numbers("numerator", numerator, minimum=0)
    denominator = validation.check_numbers(
        "denominator", denominator, minimum=0, open_minimum=True
    )
    if len(numerator) != len(denominator):
        raise ValueError(
            "`numerator` and `denominator` must have one value per "
            f"repetition each, got {len(numerator)} and {len(denominator)}."
        )
    return statistics.median(
        n / d for n, d in zip(numerator, denominator, strict=True)
    )
