# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The demo: does boost reach plain Optax's accuracy sooner?

Run ``python -m boostax.examples.demo`` (``--help`` for options; about
4 minutes on two idle CPU cores the first time, one with ``--quick``).
It runs the budgets protocol of `boostax.examples.budgets` on the bundled
example ResNet and scikit-learn's 8x8 digits: plain Optax (a hand-written
step), MindSpore's O1, boostax's O1 recipe (`boostax.o1_recipe`) and its
recipe (`boostax.recipe`, without flips: `DEMO_ROWS`) each train
for 1/4, 1/2, 1 and 1.5x a full budget (8 epochs, where plain Optax
plateaus) with a warm-up and a cosine stretched to each budget, from 3
seeds. It prints, per arm, the final test accuracy and time at each
budget, the time to plain Optax's full-budget accuracy as a speed-up
(median, min-max over the seeds, misses) and the seconds its first run
waited for compilation, then the answer per arm: the question and
protocol of the README's headline, on a model small enough for a few
minutes.

``--steps-to-target`` instead trains once per level at a constant
learning rate and prints the speed-up over plain Optax taken apart (see
`boostax.examples.speedup`): steps to a target test accuracy (evaluated
every 1/8 epoch), the steady-state step-time ratio (interleaved
repetitions after training), FLOPs and bytes ratios from
`boostax.measure.cost_report`, the seconds training waited for compilation
(freeze depths compile in background threads), the break-even training length,
and the speed-up with and without compilation, for O0, O1, the O1 recipe, O2
and the algorithms of O1 and O2 alone (manual mode). O0 computes exactly
what plain Optax computes: its row shows what noise looks like. O2's
AdaSum combines data-parallel devices: the O2 rows train on a mesh of
``--devices`` devices (on a CPU, simulated ones that share its cores, so
their step times show the cost of the collectives, not a parallel
speed-up), with AdaSum across every device (``common.device_number`` 1).

JAX's persistent compilation cache is on (``--no-compilation-cache`` turns
it off): a second run reads the executables instead of compiling them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import Any

import jax
from tqdm import tqdm

import boostax
from boostax.examples import budgets, compilation_cache, speedup


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


#: Flags of one mode only (a flag given in the other mode is refused).
STEPS_TO_TARGET_FLAGS = ("target", "seed", "devices")
BUDGETS_FLAGS = ("seeds", "budgets")
#: The budgets mode's seeds (both trained at every budget) and, with
#: ``--quick``, its budgets (`budgets.BUDGETS` otherwise).
SEEDS = 3  # odd: plain's target (the median) is one seed's accuracy
QUICK_BUDGETS = (0.5, 1.0, 1.5)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps-to-target",
        action="store_true",
        help="instead of the budgets: one run per level to --target at a "
        "constant learning rate, the speed-up taken apart",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        help="the full budget, where plain Optax plateaus (default: 8; 2 "
        "with --quick); with --steps-to-target, the epochs trained "
        "(default: 15; 1 with --quick)",
    )
    parser.add_argument("--batch-size", type=int, help="default: 64")
    parser.add_argument("--learning-rate", type=float, help="default: 0.05")
    parser.add_argument(
        "--budgets",
        type=float,
        nargs="+",
        help="fractions of the full budget trained; must include 1 "
        f"(default: {' '.join(map(str, budgets.BUDGETS))}; "
        f"{' '.join(map(str, QUICK_BUDGETS))} with --quick)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        help=f"seeds per budget (default: {SEEDS}; 1 with --quick)",
    )
    parser.add_argument(
        "--target",
        type=float,
        help="with --steps-to-target: the test accuracy to reach "
        "(default: 0.97)",
    )
    parser.add_argument(
        "--seed", type=int, help="with --steps-to-target: default 0"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smaller ResNet, fewer epochs, seeds and timings (a smoke "
        "test); with --steps-to-target, the levels only",
    )
    parser.add_argument(
        "--devices",
        type=int,
        help="with --steps-to-target: devices of the O2 rows' data-parallel "
        "mesh (on a CPU, simulated: must be set before JAX starts; default: "
        "8)",
    )
    parser.add_argument(
        "--repetitions",
        type=int,
        help="interleaved repetitions of the step-time measurement "
        "(default: 10; 15 with --steps-to-target; 3 with --quick)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    compilation_cache.add_arguments(parser)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments, each mode's flags checked and its defaults set."""
    parser = _parser()
    args = parser.parse_args(argv)
    other, mode = (
        (BUDGETS_FLAGS, "the budgets (without --steps-to-target)")
        if args.steps_to_target
        else (STEPS_TO_TARGET_FLAGS, "--steps-to-target")
    )
    for flag in other:
        if getattr(args, flag) is not None:
            parser.error(f"--{flag} applies to {mode} only")
    for flag in ("epochs", "batch_size", "seeds", "repetitions", "devices"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(
                f"--{flag.replace('_', '-')} must be >= 1, got {value}"
            )
    if args.steps_to_target:
        args.target = 0.97 if args.target is None else args.target
        args.seed = args.seed or 0
        args.devices = args.devices or 8
        args.repetitions = args.repetitions or (3 if args.quick else 15)
    else:
        args.seeds = args.seeds or (1 if args.quick else SEEDS)
        try:
            args.budgets = budgets.check_budgets(
                args.budgets
                or (QUICK_BUDGETS if args.quick else budgets.BUDGETS)
            )
        except ValueError as error:
            parser.error(f"--budgets: {error}")
        args.repetitions = args.repetitions or (3 if args.quick else 10)
    return args


def _workload(args: argparse.Namespace, **kwargs) -> speedup.Workload:
    """The example ResNet on the 8x8 digits, with the flags' sizes."""
    workload = speedup.digits_workload(quick=args.quick, **kwargs)
    given = {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
    }
    return dataclasses.replace(
        workload, **{k: v for k, v in given.items() if v is not None}
    )


def _recording(maker: budgets.Maker, first: dict[str, speedup.Arm]):
    """`maker`, keeping the first arm it makes in `first` (its compile
    wait is the one a user waits for first: later budgets' steps may come
    from JAX's compilation cache)."""

    def make(workload):
        arm = maker.make(workload)
        first.setdefault(maker.name, arm)
        return arm

    return budgets.Maker(maker.name, make)


def _recipe(total_steps: int) -> dict:
    """`boostax.recipe` for the 8x8 digits: no test-time flips (a
    mirror changes a digit), and sizes in steps of 2 pixels (Composer's 4
    would round 0.75 of 8 back up to 8: nothing to resize)."""
    config = boostax.recipe(total_steps, flips=None)
    config["progressive_resizing"]["size_increment"] = 2
    return config


#: The demo's arms beside plain Optax: MindSpore's O1 and the O1 recipe
#: (`budgets.ROWS`), and `boostax.recipe`, the methods that paid on
#: images (`_recipe`).
DEMO_ROWS = (*budgets.ROWS, ("recipe", "O1", _recipe))


def answer(summary: dict[str, Any]) -> str:
    """Whether each arm reaches plain Optax's full-budget accuracy sooner,
    in one line per arm."""
    target = summary["target_accuracy"]
    lines = [
        f"Does boost reach plain Optax's full-budget accuracy "
        f"({target:.2%}) sooner here?"
    ]
    for name, arm in list(summary["arms"].items())[1:]:
        spread = budgets.speedup_spread(arm)
        missed = f"{spread.misses} of {spread.seeds} seeds never reach it"
        if spread.median is None:
            verdict = f"no: {missed}"
        else:
            speed = (
                f"{spread.median:.2f}x plain's speed ({spread.min:.2f}-"
                f"{spread.max:.2f}x over the seeds that reach it)"
            )
            if spread.median <= 1:
                verdict = f"no: {speed}"
            elif spread.misses:
                verdict = f"on the median seed only: {speed}"
            else:
                verdict = f"yes: {speed}"
            verdict += f"; {missed}" if spread.misses else ""
        delta = arm["full_budget_accuracy_delta"] * 100
        full = arm["budgets"][str(budgets.FULL)]["relative_time_median"]
        lines.append(
            f"  {name}: {verdict}; at the full budget {delta:+.2f} points "
            f"in {full:.2f}x plain's time"
        )
    return "\n".join(lines)


def why_not(summary: dict[str, Any]) -> str | None:
    """The measured reason no arm pays here, when plain Optax reaches its
    full-budget accuracy on a smaller budget already: ``None`` if some arm
    pays or plain needs its whole budget."""
    arms = list(summary["arms"].values())
    if any((arm["speedup_median"] or 0) > 1 for arm in arms[1:]):
        return None
    target = summary["target_accuracy"]
    plain = arms[0]["budgets"]
    reached = sorted(
        float(fraction)
        for fraction, budget in plain.items()
        if budget["accuracy_median"] >= target
    )
    if not reached or reached[0] >= budgets.FULL:
        return None
    return (
        f"Why not here (measured above): plain Optax already reaches its "
        f"full-budget accuracy ({target:.2%}) at {reached[0]:g}x its "
        f"budget, so an arm pays here only if it gets there in less than "
        f"{reached[0]:g}x plain's time."
    )


def time_to_accuracy(
    args: argparse.Namespace, cache: str | None
) -> dict[str, Any]:
    """The budgets protocol on the example ResNet: plain Optax, O1 and the
    O1 recipe (`budgets.ROWS`), and the recipe (`DEMO_ROWS`); prints
    the table and the answer."""
    workload = _workload(args)
    if args.epochs is None:  # the full budget: where plain Optax plateaus
        workload = dataclasses.replace(workload, epochs=workload.plateau_epochs)
    epochs = [budgets.budget(workload, f).epochs for f in args.budgets]
    first: dict[str, speedup.Arm] = {}
    makers = [_recording(m, first) for m in budgets.makers(DEMO_ROWS)]
    header = (
        f"boostax {boostax.__version__} demo: does boost reach plain Optax's "
        f"accuracy sooner? {workload.description}; "
        f"{len(workload.digits.x_train)} train / "
        f"{len(workload.digits.x_test)} test digits; full budget "
        f"{workload.epochs} epochs, trained at {list(args.budgets)} of it "
        f"({', '.join(map(str, epochs))} epochs) with a warm-up and a cosine "
        f"stretched to each; {args.seeds} seed(s); {jax.devices()[0]}; "
        f"compilation cache: {cache or 'off'}"
    )
    print(textwrap.fill(header, width=100), flush=True)
    runs_total = len(makers) * args.seeds * len(args.budgets)
    done = 0

    def progress(line):
        nonlocal done
        done += 1
        print(f"[{done}/{runs_total}] {line}", file=sys.stderr, flush=True)
        if done == runs_total:
            print(
                "timing every compiled step, interleaved with plain Optax's",
                file=sys.stderr,
                flush=True,
            )

    runs, summary = budgets.measure(
        makers,
        workload,
        budgets=args.budgets,
        seeds=args.seeds,
        full_budget_seeds=args.seeds,
        repetitions=args.repetitions,
        steps=2 if args.quick else 5,
        progress=progress,
    )
    waits = {name: arm.compile_wait for name, arm in first.items()}
    print(
        budgets.format_time_to_target(
            summary,
            labels=[f"{e} epoch{'s' * (e != 1)}" for e in epochs],
            compile_waits=waits,
            compile_legend="seconds the arm's first run waited for "
            "compilation (plain: its ahead-of-time compile), cold unless JAX's "
            "compilation cache holds its steps from an earlier run",
        )
    )
    print()
    for line in answer(summary).splitlines():
        print(textwrap.fill(line, width=100, subsequent_indent="    "))
    reason = why_not(summary)
    if reason:
        print(textwrap.fill(reason, width=100))
    print(
        textwrap.fill(
            "The README's headline measures the same on two image "
            "workloads with 5 seeds and 2,000 or 450 test images "
            "(benchmarks/image_methods.py), where the recipe, its settings "
            "chosen on validation, reaches plain's accuracy 1.48x and 1.60x "
            "sooner. --steps-to-target takes a constant-rate run apart.",
            width=100,
        )
    )
    return {
        "mode": "budgets",
        "workload": workload.description,
        "full_budget_epochs": workload.epochs,
        "budgets": list(args.budgets),
        "epochs": epochs,
        "seeds": args.seeds,
        "compilation_cache": cache,
        "compile_wait": waits,
        "summary": summary,
        "runs": {
            name: [dataclasses.asdict(r) for r in arm_runs]
            for name, arm_runs in runs.items()
        },
    }


def steps_to_target(
    args: argparse.Namespace, cache: str | None
) -> dict[str, Any]:
    """One run per level to a target at a constant learning rate, the
    speed-up taken apart (`speedup.format_table`)."""
    workload = _workload(args, target=args.target)
    # Before JAX starts its backend (the 8x8 digits load without it).
    mesh = speedup.data_parallel_mesh(args.devices, workload.batch_size)
    arms = [speedup.plain_arm(workload)]
    rows: list[tuple[str, str, Any]] = [
        (level, level, None) for level in boostax.LEVELS
    ]
    # boostax's O1 recipe, beside MindSpore's O1.
    rows.insert(2, ("O1 recipe", "O1", boostax.o1_recipe()))
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
    costs = speedup.step_costs(
        arms,
        workload,
        repetitions=args.repetitions,
        steps=2 if args.quick else 10,
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
    return {
        "mode": "steps_to_target",
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


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the demo (`argv`: its command-line arguments); returns its
    results (what ``--json`` writes)."""
    args = _parse(argv)
    cache = compilation_cache.from_arguments(args)
    start = time.perf_counter()
    run = steps_to_target if args.steps_to_target else time_to_accuracy
    result = run(args, cache)
    result["wall_seconds"] = time.perf_counter() - start
    print(f"({result['wall_seconds'] / 60:.1f} minutes)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=str)
    return result


if __name__ == "__main__":
    main()
