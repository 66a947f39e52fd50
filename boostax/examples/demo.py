# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The demo: the example ResNet on digits, plain Optax vs every boost level.

Run ``python -m boostax.examples.demo`` (``--help`` for options). It trains
the bundled ResNet with a hand-written Optax step and with
``boostax.auto_boost`` at O0, O1 and O2 from the same initialization and data
order, and prints: final test accuracy, training wall time (compilation
included, evaluation excluded), time to a target test accuracy, and the
speed-up over plain Optax, then the algorithms of O1 and O2 alone (manual
mode). O2's AdaSum combines data-parallel devices: the O2 rows train on a mesh
of ``--devices`` devices (on a CPU, simulated ones that share its cores, so
their times show the cost of the collectives, not a parallel speed-up), with
AdaSum across every device (``common.device_number`` 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import optax
from tqdm import tqdm

import boostax
from boostax.examples import baseline, data, models


@dataclasses.dataclass
class RunResult:
    """What one training run measured (seconds).

    `compile_time` is compiling every step function (one per freeze depth)
    and the first step;
    `train_time` and `time_to_target` count the other steps only, so they
    compare steady-state speed. Evaluation is never timed.
    """

    name: str
    final_accuracy: float | None = None
    compile_time: float | None = None
    train_time: float | None = None
    time_to_target: float | None = None
    accuracies: list[float] = dataclasses.field(default_factory=list)
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Runner:
    """How to init, step and evaluate one way of training."""

    name: str
    init: Callable[[], Any]
    step: Callable[[Any, Any], Any]
    accuracy: Callable[[Any], float]
    # Compiles every step function ahead of time (one per freeze depth).
    compile: Callable[[Any, Any], Any] | None = None


def plain_runner(model, variables, optimizer, digits) -> Runner:
    step = baseline.make_plain_step(
        model, optimizer, models.cross_entropy, train=True
    )

    predict = baseline.make_plain_predict(model, train=False)
    return Runner(
        "plain optax",
        lambda: baseline.init_plain_state(variables, optimizer),
        lambda state, batch: step(state, batch)[0],
        lambda state: baseline.accuracy(
            lambda x: predict(state, x), digits.x_test, digits.y_test
        ),
    )


# Single algorithms of a level, run in manual mode: (row name, level, config).
ALGORITHM_ROWS = (
    (
        "O1 less_bn",
        "O1",
        {"boost": {"mode": "manual", "less_bn": True, "grad_freeze": False}},
    ),
    (
        "O1 freeze",
        "O1",
        {"boost": {"mode": "manual", "less_bn": False, "grad_freeze": True}},
    ),
    (
        "O2 adasum",
        "O2",
        {
            "boost": {
                "mode": "manual",
                "less_bn": False,
                "grad_freeze": False,
                "adasum": True,
            }
        },
    ),
)


def boost_runner(
    name,
    level,
    config,
    model,
    variables,
    optimizer,
    digits,
    total_steps,
    param_groups=10,
    mesh=None,
) -> Runner:
    # Like MindSpore's ModelZoo: the freezing sequence spans the run.
    config = {
        **(config or {}),
        "grad_freeze": {
            "total_steps": total_steps,
            "param_groups": param_groups,
        },
        "common": {"device_number": 1},  # AdaSum across every device
    }
    adasum = boostax.boost_config(level, config).is_enabled("adasum")
    with warnings.catch_warnings():
        # On one device AdaSum has nothing to combine; the header says so.
        warnings.filterwarnings("ignore", "AdaSum", UserWarning)
        train_step = boostax.auto_boost(
            level,
            config,
            optimizer=optimizer,
            model=model,
            loss=models.cross_entropy,
            sample_inputs=digits.x_train[:1],
            mesh=mesh if adasum else None,
        )
    return Runner(
        name,
        lambda: train_step.init(variables),
        lambda state, batch: train_step(state, batch)[0],
        lambda state: baseline.accuracy(
            lambda x: train_step.predict(state, x),
            digits.x_test,
            digits.y_test,
        ),
        train_step.compile_all,
    )


def train(
    runner: Runner, digits, *, epochs, batch_size, seed, target
) -> RunResult:
    """Trains for `epochs`, evaluating test accuracy after each epoch."""
    result = RunResult(runner.name)
    steps = data.steps_per_epoch(len(digits.x_train), batch_size)
    state = runner.init()
    train_time = 0.0
    with tqdm(
        total=epochs * steps,
        desc=f"{runner.name:>11}",
        file=sys.stderr,
        leave=False,
        mininterval=0.5,
    ) as bar:
        for epoch in range(epochs):
            start = time.perf_counter()
            for batch in data.batches(
                digits.x_train,
                digits.y_train,
                batch_size,
                seed=seed,
                epoch=epoch,
            ):
                if result.compile_time is None and runner.compile:
                    runner.compile(state, batch)
                state = runner.step(state, batch)
                bar.update()
                if result.compile_time is None:
                    jax.block_until_ready(state)
                    result.compile_time = time.perf_counter() - start
                    start = time.perf_counter()
            jax.block_until_ready(state)
            train_time += time.perf_counter() - start
            accuracy = runner.accuracy(state)
            result.accuracies.append(accuracy)
            bar.set_postfix(test_acc=f"{accuracy:.3f}")
            if result.time_to_target is None and accuracy >= target:
                result.time_to_target = train_time
    result.final_accuracy = result.accuracies[-1]
    result.train_time = train_time
    return result


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def format_table(results: Sequence[RunResult], target: float) -> str:
    """The comparison table, speed-ups relative to the first result."""
    reference = results[0]
    header = (
        f"{'level':<12} {'test acc':>9} {'compile':>9} {'train time':>11} "
        f"{f'time to {target:.0%}':>12} {'speed-up':>9}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        if r.note:
            lines.append(f"{r.name:<12} {r.note}")
            continue
        speedup = "-"
        if r.time_to_target and reference.time_to_target:
            speedup = f"{reference.time_to_target / r.time_to_target:.2f}x"
        lines.append(
            f"{r.name:<12} {r.final_accuracy:>9.3f} "
            f"{_seconds(r.compile_time):>9} {_seconds(r.train_time):>11} "
            f"{_seconds(r.time_to_target):>12} {speedup:>9}"
        )
    lines.append(
        "compile = the step functions (one per freeze depth) and the first "
        f"step; train time and time to {target:.0%}\ntest accuracy = the "
        "other steps; speed-up = plain optax's time to "
        f"{target:.0%} / the level's. One run: a few percent either way is "
        "noise."
    )
    return "\n".join(lines)


def data_parallel_mesh(devices: int, batch_size: int) -> jax.sharding.Mesh:
    """A 1-D mesh of up to `devices` devices that divide `batch_size`.

    On a CPU whose backend has not started yet, `devices` devices are
    simulated (``jax_num_cpu_devices``); otherwise the available ones are
    used.
    """
    try:
        jax.config.update("jax_num_cpu_devices", devices)
    except RuntimeError:  # the backend already runs: use its devices
        pass
    n = min(devices, len(jax.devices()))
    while batch_size % n:
        n -= 1
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument(
        "--target",
        type=float,
        default=0.95,
        help="test accuracy for the time-to-target column",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 epoch of a smaller ResNet (a smoke test)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=8,
        help="devices of the O2 rows' data-parallel mesh (on a CPU, "
        "simulated: must be set before JAX starts)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    mesh = data_parallel_mesh(args.devices, args.batch_size)

    digits = data.load_digits()
    model = (
        models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        if args.quick
        else models.ResNet()
    )
    epochs = 1 if args.quick else args.epochs
    variables = model.init(
        jax.random.PRNGKey(args.seed), digits.x_train[:1], train=False
    )
    optimizer = optax.sgd(args.learning_rate, momentum=0.9)
    runners: list[Runner | RunResult] = [
        plain_runner(model, variables, optimizer, digits)
    ]
    rows = [(level, level, None) for level in boostax.LEVELS]
    for name, level, config in rows + list(ALGORITHM_ROWS):
        try:
            runners.append(
                boost_runner(
                    name,
                    level,
                    config,
                    model,
                    variables,
                    optimizer,
                    digits,
                    total_steps=epochs
                    * data.steps_per_epoch(
                        len(digits.x_train), args.batch_size
                    ),
                    # The small ResNet has too few layers for 10 groups.
                    param_groups=3 if args.quick else 10,
                    mesh=mesh,
                )
            )
        except boostax.AlgorithmNotImplementedError as e:
            missing = ", ".join(e.algorithms)
            runners.append(RunResult(name, note=f"not built yet: {missing}"))
    print(
        f"boostax {boostax.__version__} demo: ResNet{tuple(model.stage_sizes)}"
        f" on digits ({len(digits.x_train)} train / {len(digits.x_test)} "
        f"test), {epochs} epochs, batch {args.batch_size}, SGD(momentum 0.9, "
        f"lr {args.learning_rate}), seed {args.seed}, {jax.devices()[0]}; "
        f"O2 rows data-parallel on {mesh.devices.size} device(s)"
        + (": AdaSum has nothing to combine" if mesh.devices.size == 1 else ""),
        flush=True,
    )
    results = [
        r
        if isinstance(r, RunResult)
        else train(
            r,
            digits,
            epochs=epochs,
            batch_size=args.batch_size,
            seed=args.seed,
            target=args.target,
        )
        for r in runners
    ]
    print(format_table(results, args.target))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=2)
    return results


if __name__ == "__main__":
    main()
