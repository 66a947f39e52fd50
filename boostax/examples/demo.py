# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The demo: the example ResNet on digits, plain Optax vs every boost level.

Run ``python -m boostax.examples.demo`` (``--help`` for options; about five
minutes on two CPU cores, one with ``--quick``). It trains the bundled
ResNet with a hand-written Optax step and with ``boostax.auto_boost`` at O0,
O1, boostax's O1 recipe (``boostax.recipe``) and O2, then the algorithms of
O1 and O2 alone (manual mode), from the
same initialization and data order, and prints the speed-up over plain
Optax taken apart (see `boostax.examples.speedup`): steps to a target test
accuracy (evaluated every 1/8 epoch), the steady-state step-time ratio
(interleaved repetitions after training), FLOPs and bytes ratios from
`boostax.cost_report`, the seconds training waited for compilation (freeze
depths compile in background threads), the break-even training length, and
the speed-up with and without compilation.

O0 computes exactly what plain Optax computes: its row shows what noise
looks like. O2's AdaSum combines data-parallel devices: the O2 rows train on
a mesh of ``--devices`` devices (on a CPU, simulated ones that share its
cores, so their step times show the cost of the collectives, not a parallel
speed-up), with AdaSum across every device (``common.device_number`` 1).

JAX's persistent compilation cache is on (``--no-compilation-cache`` turns
it off): a second run reads the executables instead of compiling them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

import jax
from tqdm import tqdm

import boostax
from boostax.examples import compilation_cache, speedup


def train_with_progress(
    arm: speedup.Arm, workload: speedup.Workload, seed: int
) -> speedup.Run:
    """`speedup.train_to_target` over the whole budget, with a progress bar.

    The bar shows the compilation wait apart and leaves it out of its ETA
    (which then estimates training only).
    """
    waited = 0.0
    with tqdm(
        total=workload.total_steps,
        desc=f"{arm.name:>11}",
        file=sys.stderr,
        leave=False,
        mininterval=0.5,
        smoothing=0,  # the average rate, from a start moved past the waits
    ) as bar:
        postfix: dict[str, str] = {}

        def progress(steps, accuracy, wait):
            nonlocal waited
            if wait > waited:
                bar.start_t += wait - waited
                waited = wait
            postfix["compile wait"] = f"{wait:.1f}s"
            pending = arm.train_step.pending_compiles if arm.train_step else 0
            if pending:
                postfix["compiling"] = str(pending)
            else:
                postfix.pop("compiling", None)
            if accuracy is not None:
                postfix["test acc"] = f"{accuracy:.3f}"
            bar.set_postfix(postfix, refresh=False)
            bar.update()

        return speedup.train_to_target(
            arm, workload, seed, full_budget=True, progress=progress
        )


def _row(plain, arm, run, cost, report) -> dict[str, Any]:
    row = speedup.row(
        plain,
        {
            "steps": run.steps_to_target,
            "step_cost_ratio": cost["ratio"],
            "compile": run.compile_wait,
            "final_accuracy": run.final_accuracy,
        },
        report,
    )
    if arm.data_parallel:
        sent = report.weighted["collective_bytes"] / 1e6
        row["note"] = (
            f"simulated devices: wall time not judged; {sent:.2f} MB sent "
            "per device and step"
        )
    return row


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument(
        "--target",
        type=float,
        default=0.97,
        help="test accuracy for the steps-to-target column",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 epoch of a smaller ResNet, the levels only, short timings "
        "(a smoke test)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=8,
        help="devices of the O2 rows' data-parallel mesh (on a CPU, "
        "simulated: must be set before JAX starts)",
    )
    parser.add_argument(
        "--repetitions",
        type=int,
        default=15,
        help="interleaved repetitions of the step-time measurement",
    )
    parser.add_argument("--json", help="also write the results to this file")
    compilation_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    cache = compilation_cache.from_arguments(args)
    mesh = speedup.data_parallel_mesh(args.devices, args.batch_size)

    workload = dataclasses.replace(
        speedup.digits_workload(quick=args.quick, target=args.target),
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
    )
    if not args.quick:
        workload = dataclasses.replace(workload, epochs=args.epochs)
    arms = [speedup.plain_arm(workload)]
    rows: list[tuple[str, str, Any]] = [
        (level, level, None) for level in boostax.LEVELS
    ]
    # boostax's O1 recipe, beside MindSpore's O1.
    rows.insert(2, ("O1 recipe", "O1", boostax.recipe()))
    if not args.quick:  # each level's algorithms alone
        rows += list(speedup.ALGORITHM_ROWS)
    for name, level, config in rows:
        arms.append(
            speedup.level_arm(workload, level, config, name=name, mesh=mesh)
        )
    print(
        f"boostax {boostax.__version__} demo: {workload.description}; "
        f"{len(workload.digits.x_train)} train / {len(workload.digits.x_test)}"
        f" test digits, {workload.epochs} epoch(s), test accuracy every "
        f"{workload.eval_every} steps, seed {args.seed}, {jax.devices()[0]}; "
        f"O2 rows data-parallel on {mesh.devices.size} device(s); "
        f"compilation cache: {cache or 'off'}",
        flush=True,
    )
    runs = {
        arm.name: train_with_progress(arm, workload, args.seed) for arm in arms
    }
    repetitions, steps = (3, 2) if args.quick else (args.repetitions, 10)
    costs = speedup.step_costs(
        arms, workload, repetitions=repetitions, steps=steps
    )
    plain_arm = arms[0]
    reports = speedup.cost_reports(arms, workload)
    plain_run = runs[plain_arm.name]
    plain = {
        "steps": plain_run.steps_to_target,
        "seconds": costs[plain_arm.name]["seconds"],
        "compile": plain_arm.compile_wait,
        "final_accuracy": plain_run.final_accuracy,
    }
    table = {
        plain_arm.name: {
            **speedup.row(plain, {**plain, "step_cost_ratio": 1.0}),
            "flops_ratio": 1.0,
            "bytes_ratio": 1.0,
            "projected_speedup": 1.0 if plain["steps"] else None,
        }
    }
    for arm in arms[1:]:
        table[arm.name] = _row(
            plain, arm, runs[arm.name], costs[arm.name], reports[arm.name]
        )
    print(speedup.format_table(table, workload.target))
    accelerator = next(iter(reports.values())).accelerator.name
    print(speedup.legend(accelerator))
    print(
        "One seed: benchmarks/speedup.py repeats this over seeds and on a "
        "CIFAR-shaped workload."
    )
    result = {
        "workload": workload.description,
        "target": workload.target,
        "seed": args.seed,
        "compilation_cache": cache,
        "rows": table,
        "runs": {
            name: {
                k: v for k, v in dataclasses.asdict(run).items() if k != "state"
            }
            for name, run in runs.items()
        },
        "step_costs": costs,
        "cost_reports": {name: r.as_dict() for name, r in reports.items()},
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=str)
    return result


if __name__ == "__main__":
    main()
