# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Time to accuracy: plain Optax vs boost levels O0, O1 and O2, 3 seeds.

The demo's comparison (``python -m boostax.examples.demo``: the example
ResNet on digits, SGD with momentum, the same initialization and data order
for every arm) repeated over seeds, with medians and min-max spreads:

- time to a target test accuracy (95%): steady-state training time, compile
  excluded, evaluation excluded, as the demo measures it; test accuracy is
  evaluated after every epoch, so the time is that of the first epoch that
  reaches the target;
- speed-up over plain Optax: plain's time to target / the level's, per seed
  (a level that never reaches the target counts as 0x);
- final test accuracy after the fixed epoch budget, and its difference from
  plain Optax in points, per seed;
- the two factors of the time to target apart: epochs to the target, and
  the steady-state training time per epoch as a ratio to plain Optax's;
- compile time (every step function, one per freeze depth, and the first
  step).

Targets: O1 >= 1.2x faster within 0.5 point of plain Optax; O2 >= 1.3x within
3 points. O2 trains data-parallel on 8 devices with AdaSum across all of them
(``common.device_number`` 1, as in the demo); on a CPU the 8 devices are
simulated and share its cores, so O2's times include the cost of the
collectives but no parallel speed-up.

The arms of a seed run one after another, in alternating order from seed to
seed, so slow drifts of a shared machine hit them alike; the load average is
recorded before every run.

    python benchmarks/time_to_accuracy.py            # 3 seeds, 15 epochs
    python benchmarks/time_to_accuracy.py --quick    # smoke test: 1 epoch of
                                                     # a small ResNet, 1 seed,
                                                     # 2 devices, 2 groups
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from typing import Any

import _common
import jax
import optax

import boostax
from boostax.examples import data, demo, models

PLAIN = "plain optax"
ARMS = (PLAIN, *boostax.LEVELS)
# level: (minimum median speed-up, largest median accuracy drop in points)
TARGETS = {"O1": (1.2, 0.5), "O2": (1.3, 3.0)}


def _spread(values: list[float | None]) -> dict[str, Any]:
    """Median and min-max of the values that exist."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "values": values}
    return {
        "median": statistics.median(present),
        "min": min(present),
        "max": max(present),
        "values": values,
    }


def _timed_accuracy(runner: demo.Runner, calls: list[tuple[float, float]]):
    """`runner` with evaluation start and end times appended to `calls`.

    `demo.train` evaluates right after timing each epoch, so the gaps between
    evaluations are the epochs' training times (see `_epoch_times`).
    """

    def accuracy(state):
        start = time.perf_counter()
        value = runner.accuracy(state)
        calls.append((start, time.perf_counter()))
        return value

    return dataclasses.replace(runner, accuracy=accuracy)


def _epoch_times(result: demo.RunResult, calls) -> list[float]:
    """Cumulative training time (s) at the end of each epoch.

    Epochs after the first: from the end of one evaluation to the start of
    the next. The first: the rest of ``result.train_time`` (its compiled
    first step is excluded there).
    """
    later = [start - calls[i][1] for i, (start, _) in enumerate(calls[1:])]
    first = result.train_time - sum(later)
    cumulative, total = [], 0.0
    for seconds in [first, *later]:
        total += seconds
        cumulative.append(total)
    return cumulative


def _runner(name, model, variables, optimizer, digits, args, mesh, steps):
    if name == PLAIN:
        return demo.plain_runner(model, variables, optimizer, digits)
    return demo.boost_runner(
        name,
        name,
        None,
        model,
        variables,
        optimizer,
        digits,
        total_steps=steps,
        param_groups=args.param_groups,
        mesh=mesh,
    )


def run_seed(seed, model, optimizer, digits, args, mesh) -> dict[str, dict]:
    """Every arm from seed `seed`'s initialization and data order."""
    variables = model.init(
        jax.random.PRNGKey(seed), digits.x_train[:1], train=False
    )
    steps = args.epochs * data.steps_per_epoch(
        len(digits.x_train), args.batch_size
    )
    order = ARMS if seed % 2 == 0 else tuple(reversed(ARMS))
    runs = {}
    for name in order:
        load = os.getloadavg()
        runner = _runner(
            name, model, variables, optimizer, digits, args, mesh, steps
        )
        calls: list[tuple[float, float]] = []
        result = demo.train(
            _timed_accuracy(runner, calls),
            digits,
            epochs=args.epochs,
            batch_size=args.batch_size,
            seed=seed,
            target=args.target,
        )
        runs[name] = {
            "result": result,
            "epoch_times": _epoch_times(result, calls),
            "load_average_before": list(load),
        }
        print(
            f"seed {seed} {name:<11}: test acc {result.final_accuracy:.3f}, "
            f"compile {result.compile_time:.1f} s, train "
            f"{result.train_time:.1f} s, time to {args.target:.0%} "
            + (
                "-"
                if result.time_to_target is None
                else f"{result.time_to_target:.2f} s"
            )
            + f" (load {load[0]:.1f})",
            flush=True,
        )
    return {name: runs[name] for name in ARMS}


def _epochs_to(accuracies: list[float], target: float) -> int | None:
    return next((i + 1 for i, a in enumerate(accuracies) if a >= target), None)


def _epoch_seconds(run: dict) -> float:
    """Median training time of one epoch (compile excluded)."""
    times = run["epoch_times"]
    return statistics.median(
        b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)
    )


def summarize(per_seed: list[dict[str, dict]], target: float) -> dict:
    """Medians and spreads of each arm over the seeds, vs plain Optax."""
    summary = {}
    for name in ARMS:
        results = [runs[name]["result"] for runs in per_seed]
        plains = [runs[PLAIN]["result"] for runs in per_seed]
        speedups = [
            (p.time_to_target / r.time_to_target if r.time_to_target else 0.0)
            if p.time_to_target
            else None
            for r, p in zip(results, plains, strict=True)
        ]
        deltas = [
            100 * (r.final_accuracy - p.final_accuracy)
            for r, p in zip(results, plains, strict=True)
        ]
        epoch_seconds = [_epoch_seconds(runs[name]) for runs in per_seed]
        summary[name] = {
            "time_to_target": _spread([r.time_to_target for r in results]),
            "speedup": _spread(speedups),
            "final_accuracy": _spread([r.final_accuracy for r in results]),
            "accuracy_delta_points": _spread(deltas),
            "mean_accuracy_delta_points": statistics.fmean(deltas),
            "compile_time": _spread([r.compile_time for r in results]),
            "train_time": _spread([r.train_time for r in results]),
            "seeds_reaching_target": sum(
                r.time_to_target is not None for r in results
            ),
            # Time to target = epochs to target x time per epoch: the two
            # factors apart (the second is the steady-state step cost).
            "epochs_to_target": _spread(
                [_epochs_to(r.accuracies, target) for r in results]
            ),
            "epoch_time": _spread(epoch_seconds),
            "epoch_time_ratio": _spread(
                [
                    seconds / _epoch_seconds(runs[PLAIN])
                    for seconds, runs in zip(
                        epoch_seconds, per_seed, strict=True
                    )
                ]
            ),
        }
    return summary


def verdicts(summary: dict) -> dict:
    out = {}
    for level, (min_speedup, max_drop) in TARGETS.items():
        speedup = summary[level]["speedup"]["median"]
        delta = summary[level]["accuracy_delta_points"]["median"]
        fast = speedup is not None and speedup >= min_speedup
        accurate = delta >= -max_drop
        out[level] = {
            "min_speedup": min_speedup,
            "max_accuracy_drop_points": max_drop,
            "median_speedup": speedup,
            "median_accuracy_delta_points": delta,
            "meets_speedup": fast,
            "meets_accuracy": accurate,
            "met": fast and accurate,
        }
    return out


def _range(spread, fmt: str, unit: str = "") -> str:
    if spread["median"] is None:
        return "-"
    return (
        f"{spread['median']:{fmt}}{unit} "
        f"({spread['min']:{fmt}}-{spread['max']:{fmt}})"
    )


def format_summary(summary: dict, target: float, seeds: int) -> str:
    """The demo's table with medians over seeds and (min-max) spreads."""
    header = (
        f"{'level':<12} {'test acc':>19} {'vs plain':>9} {'compile':>19} "
        f"{f'epochs to {target:.0%}':>14} {f'time to {target:.0%}':>21} "
        f"{'speed-up':>18} {'epoch time':>18}"
    )
    lines = [header, "-" * len(header)]
    for name in ARMS:
        s = summary[name]
        reached = s["seeds_reaching_target"]
        lines.append(
            f"{name:<12} {_range(s['final_accuracy'], '.3f'):>19} "
            f"{s['accuracy_delta_points']['median']:>+6.2f} pt "
            f"{_range(s['compile_time'], '.1f', ' s'):>19} "
            f"{_range(s['epochs_to_target'], 'g'):>14} "
            f"{_range(s['time_to_target'], '.2f', ' s'):>21} "
            f"{_range(s['speedup'], '.2f', 'x'):>18} "
            f"{_range(s['epoch_time_ratio'], '.2f', 'x'):>18}"
            + ("" if reached == seeds else f"  {reached}/{seeds} reached")
        )
    lines.append(
        f"median over {seeds} seed(s) (min-max); vs plain = median per-seed "
        "difference in test-accuracy points; compile = step functions and\n"
        f"first step; time to {target:.0%} = other steps, accuracy checked "
        f"after each epoch; speed-up = plain's time to {target:.0%} / the "
        "level's, per seed;\nepoch time = the level's median training time "
        "per epoch / plain's, per seed."
    )
    return "\n".join(lines)


def _run_json(run: dict) -> dict:
    r = run["result"]
    return {
        "final_accuracy": r.final_accuracy,
        "compile_time": r.compile_time,
        "train_time": r.train_time,
        "time_to_target": r.time_to_target,
        "accuracies": r.accuracies,
        "epoch_times": run["epoch_times"],
        "load_average_before": run["load_average_before"],
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument(
        "--out",
        default=os.path.join(_common.RESULTS_DIR, "time_to_accuracy.json"),
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=8,
        help="devices of O2's data-parallel mesh (on a CPU, simulated)",
    )
    parser.add_argument(
        "--param-groups",
        type=int,
        default=10,
        help="gradient freezing's parameter groups (MindSpore's default 10)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        # A smoke test: fewer step functions and collectives to compile (the
        # small ResNet has too few layers for 10 groups anyway).
        args.epochs, args.seeds, args.devices, args.param_groups = 1, 1, 2, 2
    load_start = os.getloadavg()
    # Before any other backend use: simulates the devices on a CPU.
    mesh = demo.data_parallel_mesh(args.devices, args.batch_size)
    digits = data.load_digits()
    model = (
        models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        if args.quick
        else models.ResNet()
    )
    optimizer = optax.sgd(args.learning_rate, momentum=0.9)
    print(
        f"boostax {boostax.__version__} time to accuracy: "
        f"ResNet{tuple(model.stage_sizes)} on digits ({len(digits.x_train)} "
        f"train / {len(digits.x_test)} test), {args.epochs} epochs, batch "
        f"{args.batch_size}, SGD(momentum 0.9, lr {args.learning_rate}), "
        f"{args.seeds} seed(s), {jax.devices()[0]}; O2 data-parallel on "
        f"{mesh.devices.size} device(s); load average {load_start[0]:.1f}",
        flush=True,
    )
    start = time.perf_counter()
    per_seed = []
    for seed in range(args.seeds):
        per_seed.append(run_seed(seed, model, optimizer, digits, args, mesh))
        print(
            demo.format_table(
                [per_seed[-1][name]["result"] for name in ARMS], args.target
            ).split("\ncompile =")[0],
            flush=True,
        )
    summary = summarize(per_seed, args.target)
    checks = verdicts(summary)
    load_end = os.getloadavg()
    print(format_summary(summary, args.target, args.seeds))
    for level, check in checks.items():
        speedup = check["median_speedup"]
        print(
            f"target {level}: >= {check['min_speedup']}x within "
            f"{check['max_accuracy_drop_points']} point(s): "
            + ("-" if speedup is None else f"{speedup:.2f}x")
            + f", {check['median_accuracy_delta_points']:+.2f} points -> "
            + ("met" if check["met"] else "NOT met")
        )
    print(
        f"load average (1 min) {load_start[0]:.1f} at start, "
        f"{load_end[0]:.1f} at end, on {os.cpu_count()} CPUs"
    )
    result = {
        "benchmark": "time_to_accuracy",
        "quick": args.quick,
        "device": str(jax.devices()[0]),
        "model": f"ResNet{tuple(model.stage_sizes)} widths "
        f"{tuple(model.widths)}",
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "seeds": list(range(args.seeds)),
        "optimizer": f"sgd(lr={args.learning_rate}, momentum=0.9)",
        "target_accuracy": args.target,
        "o2_devices": f"{mesh.devices.size} x {jax.devices()[0].platform}"
        + (" (simulated)" if jax.default_backend() == "cpu" else ""),
        "grad_freeze_param_groups": args.param_groups,
        "load_average": {
            "start": list(load_start),
            "end": list(load_end),
            "cpu_count": os.cpu_count(),
        },
        "wall_seconds": time.perf_counter() - start,
        "targets": checks,
        "summary": summary,
        "runs": {
            name: [_run_json(runs[name]) for runs in per_seed] for name in ARMS
        },
    }
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
