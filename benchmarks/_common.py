# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the benchmarks: step loops, accuracy, JSON results.

Every benchmark compares against the plain Optax step in the same run:
interleaved repetitions (`boostax.interleaved_timings`: the order
alternates), medians, and a ratio (`boostax.paired_ratio`), because absolute
times on shared machines are noise. Costs come from
`boostax.executable_cost` / `boostax.cost_report`.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax

from boostax.examples import speedup

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


def init_variables(model, rng, inputs, **kwargs):
    """``model.init(rng, inputs, **kwargs)``, compiled once per model.

    Run eagerly, a ResNet's init compiles each of its many small operations
    (seconds); jitted it is one compile.
    """
    return _jitted_init(model, tuple(sorted(kwargs.items())))(rng, inputs)


@functools.cache
def _jitted_init(model, kwargs):
    return jax.jit(functools.partial(model.init, **dict(kwargs)))


def step_runner(step, state, batch, steps: int) -> Callable[[], Any]:
    """A function running `steps` train steps from where it last stopped.

    ``step(state, batch) -> (state, aux)``; the state carries over between
    calls, as in training. For `boostax.interleaved_timings`.
    """

    def run_steps():
        nonlocal state
        for _ in range(steps):
            state, _ = step(state, batch)
        return state

    return run_steps


def write_result(path: str, payload: Mapping[str, Any]) -> None:
    """Writes `payload` (plus the command and environment) as JSON."""
    payload = {
        "command": " ".join(["python", *sys.argv]),
        "environment": environment(),
        # Compile times read from a warm persistent cache are disk reads.
        "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
        **payload,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")
    print(f"wrote {path}")


def runner(name, init, step, predict) -> speedup.Arm:
    """A `speedup.Arm` from ``init()``, ``step(state, batch) -> (state, _)``
    and ``predict(state, x)`` (the seed is bound in `init` already)."""
    return speedup.Arm(name, lambda seed: init(), step, predict)


def accuracy_over_seeds(
    runners_for: Callable[[int], list[speedup.Arm]],
    digits,
    *,
    seeds: int,
    epochs: int,
    batch_size: int,
    baseline: str,
) -> dict[str, dict[str, Any]]:
    """Final test accuracy of each arm, one training run per seed.

    Args:
      runners_for: ``runners_for(seed)`` -> the `speedup.Arm`s to train
        from that seed's initialization (the data order follows the seed).
      baseline: the arm the others are compared with.

    Returns:
      ``{name: {"test_accuracy": [...], "median", "mean",
      "mean_difference_points"}}`` (points = 100 x the mean's difference
      from the baseline's).
    """
    workload = speedup.Workload(
        name="accuracy",
        description="",
        model=None,
        digits=digits,
        batch_size=batch_size,
        learning_rate=0.0,
        target=1.0,
        epochs=epochs,
    )
    accuracies: dict[str, list[float]] = {}
    for seed in range(seeds):
        for arm in runners_for(seed):
            run = speedup.train_to_target(arm, workload, seed, evaluate=False)
            accuracies.setdefault(arm.name, []).append(run.final_accuracy)
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
