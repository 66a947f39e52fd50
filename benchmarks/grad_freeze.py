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

import argparse
import functools
import os
import statistics
import time

import _common
import jax
import jax.numpy as jnp
import numpy as np
import optax

import boostax
from boostax.examples import baseline, compilation_cache, data, models

THROUGHPUT_TARGET = 1.15
ACCURACY_TOLERANCE_POINTS = 1.0
FREEZE_P = {"default_p0.7": 0.7, "p0.3": 0.3}


def _config(freeze_p: float, total_steps: int, groups: int) -> dict:
    return {
        "boost": {"mode": "manual", "less_bn": False, "grad_freeze": True},
        "grad_freeze": {
            "param_groups": groups,
            "freeze_type": 1,
            "freeze_p": freeze_p,
            "total_steps": total_steps,
        },
    }


def _freezing_step(model, optimizer, freeze_p, total_steps, groups, sample):
    return boostax.auto_boost(
        "O1",
        _config(freeze_p, total_steps, groups),
        optimizer=optimizer,
        model=model,
        loss=models.cross_entropy,
        sample_inputs=sample,
    )


def measure_depths(model, optimizer, steps, variables, batch, args) -> dict:
    """Per-depth FLOPs and step times, compile time, schedule throughput."""
    plain_step = baseline.make_plain_step(
        model, optimizer, models.cross_entropy, train=True
    )
    plain_state = baseline.init_plain_state(variables, optimizer)
    plain = plain_step.lower(plain_state, batch).compile()
    states = {name: ts.init(variables) for name, ts in steps.items()}
    start = time.perf_counter()
    compiled = steps["default_p0.7"].compile_all(states["default_p0.7"], batch)
    compile_seconds = time.perf_counter() - start
    for name, ts in steps.items():
        if name != "default_p0.7":
            ts.compile_all(states[name], batch)
    depths = sorted(compiled)
    runs = {"plain": _common.step_runner(plain, plain_state, batch, args.steps)}
    for k in depths:
        runs[f"depth_{k}"] = _common.step_runner(
            compiled[k], states["default_p0.7"], batch, args.steps
        )
    for name, ts in steps.items():
        runs[f"schedule_{name}"] = _common.step_runner(
            ts, states[name], batch, args.steps
        )
    samples = boostax.interleaved_timings(
        runs, repetitions=args.repetitions, steps=args.steps
    )
    median = {name: statistics.median(v) for name, v in samples.items()}
    flops = {
        k: boostax.executable_cost(compiled[k])._asdict()["flops"]
        for k in depths
    }
    result = {
        "compile_seconds_all_depths": compile_seconds,
        "plain_step_ms": 1e3 * median["plain"],
        "plain_flops": boostax.executable_cost(plain)._asdict()["flops"],
        "depths": {
            str(k): {
                "flops": flops[k],
                "flops_ratio": flops[k] / flops[0],
                "median_step_ms": 1e3 * median[f"depth_{k}"],
                "step_time_ratio": boostax.paired_ratio(
                    samples[f"depth_{k}"], samples["depth_0"]
                ),
            }
            for k in depths
        },
        "schedules": {},
    }
    for name, ts in steps.items():
        sequence = ts.freezing.sequence[: args.total_steps]
        frequency = np.bincount(sequence, minlength=args.groups) / len(sequence)
        estimated = sum(
            frequency[k] * median[f"depth_{ts.freezing.canonical_depth(k)}"]
            for k in range(args.groups)
        )
        result["schedules"][name] = {
            "freeze_p": FREEZE_P[name],
            "fraction_full_steps": float(frequency[0]),
            "estimated_speedup": median["plain"] / estimated,
            "measured_speedup": boostax.paired_ratio(
                samples["plain"], samples[f"schedule_{name}"]
            ),
        }
    return result


def measure_accuracy(model, optimizer, steps, digits, args) -> dict:
    """Test accuracy after `args.epochs`, reusing the compiled steps."""

    def runners_for(seed):
        variables = _common.init_variables(
            model, jax.random.PRNGKey(seed), digits.x_train[:1], train=False
        )
        plain_step = baseline.make_plain_step(
            model, optimizer, models.cross_entropy, train=True
        )
        plain = _common.runner(
            "no_freezing",
            functools.partial(baseline.init_plain_state, variables, optimizer),
            plain_step,
            baseline.make_plain_predict(model, train=False),
        )
        return [plain] + [
            _common.runner(
                name, functools.partial(ts.init, variables), ts, ts.predict
            )
            for name, ts in steps.items()
        ]

    return _common.accuracy_over_seeds(
        runners_for,
        digits,
        seeds=args.seeds,
        epochs=args.epochs,
        batch_size=args.batch_size,
        baseline="no_freezing",
    )


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--repetitions", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument(
        "--out", default=os.path.join(_common.RESULTS_DIR, "grad_freeze.json")
    )
    compilation_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compilation_cache.from_arguments(args)
    if args.quick:
        args.repetitions, args.steps, args.epochs, args.seeds = 2, 2, 1, 1
        args.groups = 3
    device = (
        jax.devices()[0]
        if args.device == "auto"
        else jax.devices(args.device)[0]
    )
    with jax.default_device(device):
        digits = data.load_digits()
        model = (
            models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
            if args.quick
            else models.ResNet()
        )
        args.total_steps = args.epochs * data.steps_per_epoch(
            len(digits.x_train), args.batch_size
        )
        optimizer = optax.sgd(args.learning_rate, momentum=0.9)
        variables = _common.init_variables(
            model, jax.random.PRNGKey(0), digits.x_train[:1], train=False
        )
        batch = (
            jnp.asarray(digits.x_train[: args.batch_size]),
            jnp.asarray(digits.y_train[: args.batch_size]),
        )
        steps = {
            name: _freezing_step(
                model, optimizer, p, args.total_steps, args.groups, batch[0][:1]
            )
            for name, p in FREEZE_P.items()
            if not args.quick or name == "default_p0.7"
        }
        cost = measure_depths(model, optimizer, steps, variables, batch, args)
        accuracy = measure_accuracy(model, optimizer, steps, digits, args)
    default = cost["schedules"]["default_p0.7"]
    result = {
        "benchmark": "grad_freeze",
        "quick": args.quick,
        "device": str(device),
        "model": f"ResNet{tuple(model.stage_sizes)} widths "
        f"{tuple(model.widths)}",
        "groups": args.groups,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "seeds": args.seeds,
        "optimizer": f"sgd(lr={args.learning_rate}, momentum=0.9)",
        "cost": cost,
        "accuracy": accuracy,
        "throughput_target": THROUGHPUT_TARGET,
        "meets_throughput_target": default["measured_speedup"]
        >= THROUGHPUT_TARGET,
        "meets_accuracy_target": accuracy["default_p0.7"][
            "mean_difference_points"
        ]
        >= -ACCURACY_TOLERANCE_POINTS,
    }
    print(
        f"compile, all depths: {cost['compile_seconds_all_depths']:.1f} s; "
        "FLOPs by depth: "
        + " ".join(f"{d['flops_ratio']:.3f}" for d in cost["depths"].values())
    )
    for name, s in cost["schedules"].items():
        a = accuracy[name]
        print(
            f"{name}: speed-up measured x{s['measured_speedup']:.3f} "
            f"(estimated x{s['estimated_speedup']:.3f}); test accuracy "
            f"{a['mean']:.4f} ({a['mean_difference_points']:+.2f} points)"
        )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
