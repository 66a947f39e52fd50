# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing: per-depth cost, schedule throughput, accuracy.

On the example ResNet (digits), with ``auto_boost`` (level O1, manual mode,
only ``grad_freeze``) against the hand-written Optax step:

- FLOPs (``cost_analysis``) and median step time of each freeze depth, as
  ratios to depth 0 (every parameter trains);
- throughput over the freeze schedule at MindSpore's defaults (10 groups,
  interval strategy, ``freeze_p = 0.7``) and at ``freeze_p = 0.3``, against
  no freezing: estimated from the per-depth times and the schedule's depth
  frequencies, and measured by running the schedule (target >= 1.15x);
- test accuracy after a fixed number of epochs, 3 seeds (target: within 1
  point of no freezing);
- compile time of all depths.

    python benchmarks/grad_freeze.py [--device gpu] [--quick]
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import NamedTuple

import _common
import jax
import numpy as np

import boostax
from boostax.examples import speedup

THROUGHPUT_TARGET = 1.15
ACCURACY_TOLERANCE_POINTS = 1.0
FREEZE_P = {"default_p0.7": 0.7, "p0.3": 0.3}


def _freezing_arm(workload, name: str) -> speedup.Arm:
    """O1 in manual mode with only gradient freezing, MindSpore's interval
    strategy at `FREEZE_P[name]`, over the workload's budget."""
    config = {
        "boost": {"mode": "manual", "less_bn": False, "grad_freeze": True},
        "grad_freeze": {"freeze_type": 1, "freeze_p": FREEZE_P[name]},
    }
    return speedup.level_arm(workload, "O1", config, name=name)


class DepthCost(NamedTuple):
    """One freeze depth's compiled step, against depth 0's."""

    flops: float
    flops_ratio: float
    median_step_ms: float
    step_time_ratio: float


class ScheduleSpeed(NamedTuple):
    """A freezing schedule's throughput against the plain Optax step."""

    freeze_p: float
    fraction_full_steps: float
    estimated_speedup: float
    measured_speedup: float


class FreezingCost(NamedTuple):
    """`measure_depths`' result.

    Attributes:
      depths: by depth (as a string, the JSON's key).
      schedules: by `FREEZE_P` name.
    """

    compile_seconds_all_depths: float
    plain_step_ms: float
    plain_flops: float
    depths: dict[str, DepthCost]
    schedules: dict[str, ScheduleSpeed]


def measure_depths(plain, arms, workload, args) -> FreezingCost:
    """Per-depth FLOPs and step times, compile time, schedule throughput
    (`plain` and each of `arms` from seed 0's initialization)."""
    batch = _common.first_batch(workload.digits, workload.batch_size)
    plain_state = plain.init(0)
    steps = {arm.name: arm.train_step for arm in arms}
    states = {arm.name: arm.init(0) for arm in arms}
    start = time.perf_counter()
    compiled = steps["default_p0.7"].compile_all(states["default_p0.7"], batch)
    compile_seconds = time.perf_counter() - start
    for name, ts in steps.items():
        if name != "default_p0.7":
            ts.compile_all(states[name], batch)
    depths = sorted(compiled)
    runs = {
        "plain": _common.step_runner(plain.step, plain_state, batch, args.steps)
    }
    for k in depths:
        runs[f"depth_{k}"] = _common.step_runner(
            compiled[k], states["default_p0.7"], batch, args.steps
        )
    for name, ts in steps.items():
        runs[f"schedule_{name}"] = _common.step_runner(
            ts, states[name], batch, args.steps
        )
    samples = boostax.measure.interleaved_timings(
        runs, repetitions=args.repetitions, steps=args.steps
    )
    median = {name: statistics.median(v) for name, v in samples.items()}
    flops = {
        k: boostax.measure.executable_cost(compiled[k]).flops for k in depths
    }
    schedules = {}
    for name, ts in steps.items():
        sequence = ts.freezing.sequence[: workload.total_steps]
        frequency = np.bincount(sequence, minlength=args.groups) / len(sequence)
        estimated = sum(
            frequency[k] * median[f"depth_{ts.freezing.canonical_depth(k)}"]
            for k in range(args.groups)
        )
        schedules[name] = ScheduleSpeed(
            freeze_p=FREEZE_P[name],
            fraction_full_steps=float(frequency[0]),
            estimated_speedup=median["plain"] / estimated,
            measured_speedup=boostax.measure.paired_ratio(
                samples["plain"], samples[f"schedule_{name}"]
            ),
        )
    return FreezingCost(
        compile_seconds_all_depths=compile_seconds,
        plain_step_ms=1e3 * median["plain"],
        plain_flops=boostax.measure.executable_cost(plain.step).flops,
        depths={
            str(k): DepthCost(
                flops=flops[k],
                flops_ratio=flops[k] / flops[0],
                median_step_ms=1e3 * median[f"depth_{k}"],
                step_time_ratio=boostax.measure.paired_ratio(
                    samples[f"depth_{k}"], samples["depth_0"]
                ),
            )
            for k in depths
        },
        schedules=schedules,
    )


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__,
        "grad_freeze.json",
        **_common.DIGITS_TRAINING_FLAGS,
        repetitions=21,
    )
    parser.add_argument("--groups", type=int, default=10)
    args = _common.parse(
        parser,
        argv,
        **_common.DIGITS_TRAINING_QUICK,
        repetitions=2,
        groups=3,
    )
    device = _common.device(args.device)
    with jax.default_device(device):
        workload = _common.digits_workload(args, param_groups=args.groups)
        model = workload.model
        plain = dataclasses.replace(
            speedup.plain_arm(workload), name="no_freezing"
        )
        arms = [
            _freezing_arm(workload, name)
            for name in FREEZE_P
            if not args.quick or name == "default_p0.7"
        ]
        cost = measure_depths(plain, arms, workload, args)
        # Test accuracy after the workload's epochs, from the same steps.
        accuracy = _common.accuracy_over_seeds(
            [plain, *arms], workload, seeds=args.seeds, baseline="no_freezing"
        )
    default = cost.schedules["default_p0.7"]
    result = {
        "benchmark": "grad_freeze",
        "quick": args.quick,
        "device": str(device),
        "model": _common.describe(model),
        "groups": args.groups,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "seeds": args.seeds,
        "optimizer": f"sgd(lr={args.learning_rate}, momentum=0.9)",
        "cost": cost,
        "accuracy": accuracy,
        "throughput_target": THROUGHPUT_TARGET,
        "meets_throughput_target": default.measured_speedup
        >= THROUGHPUT_TARGET,
        "meets_accuracy_target": accuracy["default_p0.7"].mean_difference_points
        >= -ACCURACY_TOLERANCE_POINTS,
    }
    print(
        f"compile, all depths: {cost.compile_seconds_all_depths:.1f} s; "
        "FLOPs by depth: "
        + " ".join(f"{d.flops_ratio:.3f}" for d in cost.depths.values())
    )
    for name, speed in cost.schedules.items():
        a = accuracy[name]
        print(
            f"{name}: speed-up measured x{speed.measured_speedup:.3f} "
            f"(estimated x{speed.estimated_speedup:.3f}); test accuracy "
            f"{a.mean:.4f} ({a.mean_difference_points:+.2f} points)"
        )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
