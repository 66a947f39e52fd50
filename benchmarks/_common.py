# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the benchmarks: timing, compiled costs, JSON results.

Every benchmark compares against the plain Optax step in the same run:
interleaved repetitions (the order alternates), medians, and a ratio, because
absolute times on shared machines are noise.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax

RESULTS_DIR = os.path.join(os.path.dirname(__file__), "results")


def environment() -> dict[str, Any]:
    """Versions and hardware, recorded with every result."""
    import flax
    import jaxlib
    import optax

    import boostax

    return {
        "boostax": boostax.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "optax": optax.__version__,
        "flax": flax.__version__,
        "python": platform.python_version(),
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "cpu_count": os.cpu_count(),
    }


def compiled_stats(compiled: jax.stages.Compiled) -> dict[str, float | None]:
    """FLOPs and memory of a compiled step (``jit(f).lower(...).compile()``)."""
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, list):  # older JAX: one dict per computation
        cost = cost[0] if cost else {}
    memory = compiled.memory_analysis()

    def read(name):
        return None if memory is None else getattr(memory, name, None)

    return {
        "flops": cost.get("flops"),
        "bytes_accessed": cost.get("bytes accessed"),
        "temp_bytes": read("temp_size_in_bytes"),
        "argument_bytes": read("argument_size_in_bytes"),
        "output_bytes": read("output_size_in_bytes"),
    }


def step_runner(step, state, batch, steps: int) -> Callable[[], Any]:
    """A function running `steps` train steps from where it last stopped.

    ``step(state, batch) -> (state, aux)``; the state carries over between
    calls, as in training.
    """

    def run_steps():
        nonlocal state
        for _ in range(steps):
            state, _ = step(state, batch)
        return state

    return run_steps


def interleaved_timings(
    runs: Mapping[str, Callable[[], Any]], *, repetitions: int, steps: int
) -> dict[str, list[float]]:
    """Seconds per step of each variant, one sample per repetition.

    Each `runs[name]()` runs `steps` steps and returns something to block on.
    The variants take turns within each repetition, in alternating order,
    so slow drifts of the machine hit all of them alike.
    """
    names = list(runs)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up: compile and fill caches
        jax.block_until_ready(runs[name]())
    for rep in range(repetitions):
        for name in names if rep % 2 == 0 else reversed(names):
            start = time.perf_counter()
            jax.block_until_ready(runs[name]())
            samples[name].append((time.perf_counter() - start) / steps)
    return samples


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median of the per-repetition ratios (robust to drift between reps)."""
    return statistics.median(
        n / d for n, d in zip(numerator, denominator, strict=True)
    )


def write_result(path: str, payload: Mapping[str, Any]) -> None:
    """Writes `payload` (plus the command and environment) as JSON."""
    payload = {
        "command": " ".join(["python", *sys.argv]),
        "environment": environment(),
        **payload,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")
    print(f"wrote {path}")


def runner(name, init, step, predict, digits):
    """A `demo.Runner` from ``init()``, ``step(state, batch) -> (state, _)``
    and ``predict(state, x)``."""
    from boostax.examples import baseline, demo

    return demo.Runner(
        name,
        init,
        lambda state, batch: step(state, batch)[0],
        lambda state: baseline.accuracy(
            lambda x: predict(state, x), digits.x_test, digits.y_test
        ),
    )


def accuracy_over_seeds(
    runners_for: Callable[[int], list[Any]],
    digits,
    *,
    seeds: int,
    epochs: int,
    batch_size: int,
    baseline: str,
) -> dict[str, dict[str, Any]]:
    """Final test accuracy of each runner, one training run per seed.

    Args:
      runners_for: ``runners_for(seed)`` -> the `demo.Runner`s to train
        from that seed's initialization (the data order follows the seed).
      baseline: the runner the others are compared with.

    Returns:
      ``{name: {"test_accuracy": [...], "median", "mean",
      "mean_difference_points"}}`` (points = 100 x the mean's difference
      from the baseline's).
    """
    from boostax.examples import demo

    accuracies: dict[str, list[float]] = {}
    for seed in range(seeds):
        for run in runners_for(seed):
            result = demo.train(
                run,
                digits,
                epochs=epochs,
                batch_size=batch_size,
                seed=seed,
                target=1.0,
            )
            accuracies.setdefault(run.name, []).append(result.final_accuracy)
    base = statistics.fmean(accuracies[baseline])
    return {
        name: {
            "test_accuracy": values,
            "median": statistics.median(values),
            "mean": statistics.fmean(values),
            "mean_difference_points": 100 * (statistics.fmean(values) - base),
        }
        for name, values in accuracies.items()
    }
