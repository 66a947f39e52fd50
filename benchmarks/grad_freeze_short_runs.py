# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing's saving on short runs, inside the freezing warm-up.

The O1 recipe (`boostax.o1_recipe`: LessBN + progressive freezing) against plain
Optax on ``digits32`` (`boostax.examples.speedup.digits32_workload`, the
budget protocol's warm-up + cosine schedule) for runs of 6, 12 and 24
epochs (252, 504 and 1,008 steps): all of them end inside or just past the
default freezing warm-up (`freeze_warmup_steps`, 1,024 steps). For each:

- **compile wait**: seconds training waited for compilation, cold, against
  plain Optax's compile of its one step (target: at most 1.5x);
- **step cost**: each program the run ran timed interleaved with plain
  Optax's step (`boostax.measure.interleaved_timings`, median of the
  per-repetition ratios, `budgets.depth_step_costs`), weighted by the run's
  programs: today's warm-up (``segments``), the warm-up before the segments (the
  lead,
  then one warm-up program that computes every gradient: ``one warm-up
  program``) and every depth's own program from the first step
  (``freeze_warmup_steps=0``: ``own programs``);
- **wall**: each training loop's wall time, waits and the background
  compiles' share of the two cores included, as a ratio to plain's.

    python benchmarks/grad_freeze_short_runs.py --no-compilation-cache
    python benchmarks/grad_freeze_short_runs.py --quick   # smoke test
    python benchmarks/grad_freeze_short_runs.py --cond-probe
    python benchmarks/grad_freeze_short_runs.py --compile-probe

``--cond-probe`` times the alternative of one program for every depth that
skips a frozen layer's weight gradient with a traced predicate: six 3x3
convolutions (batch 32, 32x32x16), the gradient of each kernel computed
under ``lax.cond`` in a custom VJP, against the plain gradient.
``--compile-probe`` compiles plain Optax's step and the recipe's lead
program (depth 0's own: what every run above waits for) alternately, three
times: on a loaded machine one compile's time swings with the load.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
import time

import _common
import jax
import numpy as np

import boostax
from boostax.examples import budgets, speedup

EPOCHS = (6, 12, 24)
COMPILE_WAIT_MAX = 1.5  # x plain Optax's compile


def _loop(arm, workload, seed=0):
    """Trains `arm` over `workload`: (state, wall seconds, compile wait)."""
    state = arm.init(seed)
    wait = arm.compile_wait
    start = time.perf_counter()
    for epoch in range(workload.epochs):
        for batch in workload.batches(seed, epoch):
            state, _ = arm.step(state, batch)
    jax.block_until_ready(state)
    return state, time.perf_counter() - start, arm.compile_wait - wait


# `TrainStep.program_at`'s key of the warm-up program (every gradient
# computed, the frozen ones zeroed), and the prefix of one from group k.
WARMUP_PROGRAM = "masked"
_FROM_GROUP = "masked from "


def _program_name(key) -> str:
    """A program's name as `boostax.measure.cost_report` prints it."""
    if key == WARMUP_PROGRAM:
        return "warm-up"
    if isinstance(key, str) and key.startswith(_FROM_GROUP):
        return f"warm-up from depth {key[len(_FROM_GROUP) :]}"
    return f"depth {key}"


def _schedules(train_step, steps: int) -> dict[str, list]:
    """The program of each of `steps` steps: today's, with one warm-up
    program after the lead (before the segments), and without warm-up."""
    freezing = train_step.freezing
    warmup = train_step.freeze_warmup_steps
    today = [train_step.program_at(p) for p in range(steps)]
    # The lead: the opening positions that run their depth's own program
    # (an int key; the warm-up programs' keys are strings).
    lead = next(
        (p for p, key in enumerate(today) if not isinstance(key, int)),
        steps,
    )
    own = [freezing.canonical_depth(freezing.depth(p)) for p in range(steps)]
    one = [
        own[p] if p < lead or p >= warmup else WARMUP_PROGRAM
        for p in range(steps)
    ]
    return {"segments": today, "one warm-up program": one, "own programs": own}


def measure(epochs: int, quick: bool, repetitions: int, steps: int):
    base = speedup.digits32_workload(quick=quick)
    workload = dataclasses.replace(base, epochs=epochs, schedule="cosine")
    plain = speedup.plain_arm(workload)
    recipe = speedup.level_arm(
        workload, "O1", boostax.o1_recipe(), name="recipe"
    )
    plain_state, plain_wall, _ = _loop(plain, workload)
    recipe_state, recipe_wall, wait = _loop(recipe, workload)
    run_steps = int(recipe_state.step)
    schedules = _schedules(recipe.train_step, run_steps)
    programs = {p for s in schedules.values() for p in s}
    plain_seconds, costs = budgets.depth_step_costs(
        [plain, recipe],
        workload,
        repetitions=repetitions,
        steps=steps,
        programs={"plain optax": {None}, "recipe": programs},
    )
    by_program = costs["recipe"]
    names = {key: _program_name(key) for key in by_program}
    return {
        "epochs": epochs,
        "steps": run_steps,
        "programs_run": {
            names[k]: n
            for k, n in collections.Counter(schedules["segments"]).items()
        },
        "plain_compile_seconds": plain.compile_seconds,
        "recipe_compile_wait": wait,
        "compile_wait_ratio": wait / plain.compile_seconds,
        "recipe_compile_seconds": {
            names.get(k, str(k)): v
            for k, v in recipe.train_step.compile_seconds.items()
        },
        "plain_seconds_per_step": plain_seconds,
        "step_cost_by_program": {names[k]: v for k, v in by_program.items()},
        "step_cost_ratio": {
            name: float(np.mean([by_program[p] for p in schedule]))
            for name, schedule in schedules.items()
        },
        "wall_seconds": {"plain optax": plain_wall, "recipe": recipe_wall},
        # The recipe's loop waits for its compiles; plain's compiled before.
        "wall_ratio_with_compile": recipe_wall
        / (plain_wall + plain.compile_seconds),
        "final_accuracy": {
            "plain optax": speedup.accuracy(
                plain, plain_state, workload.digits
            ),
            "recipe": speedup.accuracy(recipe, recipe_state, workload.digits),
        },
    }


def cond_probe(repetitions: int = 7) -> dict[str, float]:
    """Milliseconds per gradient: plain, and each kernel's gradient under
    ``lax.cond`` (predicate True: computed; False: zeros)."""
    dims = ("NHWC", "HWIO", "NHWC")

    def conv(x, w):
        return jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=dims
        )

    @jax.custom_vjp
    def conv_skip(x, w, train):
        return conv(x, w)

    def forward(x, w, train):
        return conv(x, w), (x, w, train)

    def backward(residuals, g):
        x, w, train = residuals
        dx = jax.vjp(lambda x: conv(x, w), x)[1](g)[0]
        dw = jax.lax.cond(
            train,
            lambda: jax.vjp(lambda w: conv(x, w), w)[1](g)[0],
            lambda: jax.numpy.zeros_like(w),
        )
        return dx, dw, None

    conv_skip.defvjp(forward, backward)

    def loss(params, x, layer):
        for w in params:
            x = jax.nn.relu(layer(x, w))
        return (x**2).mean()

    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (32, 32, 32, 16))
    params = [
        0.1 * jax.random.normal(jax.random.fold_in(key, i), (3, 3, 16, 16))
        for i in range(6)
    ]
    plain = jax.jit(jax.grad(lambda p, x: loss(p, x, conv)))
    skip = jax.jit(
        jax.grad(lambda p, x, t: loss(p, x, lambda x, w: conv_skip(x, w, t)))
    )

    def milliseconds(f, *args):
        jax.block_until_ready(f(*args))
        times = []
        for _ in range(repetitions):
            start = time.perf_counter()
            jax.block_until_ready(f(*args))
            times.append(time.perf_counter() - start)
        return 1e3 * float(np.median(times))

    return {
        "plain_ms": milliseconds(plain, params, x),
        "cond_taken_ms": milliseconds(skip, params, x, jax.numpy.array(True)),
        "cond_skipped_ms": milliseconds(
            skip, params, x, jax.numpy.array(False)
        ),
    }


def compile_probe(repetitions: int = 3) -> dict[str, list[float]]:
    """Seconds to compile plain Optax's step and the recipe's depth-0
    program (tracing included, as a step's compile wait counts it)."""
    workload = dataclasses.replace(
        speedup.digits32_workload(), epochs=24, schedule="cosine"
    )
    batch = next(workload.batches(0, 0))
    seconds: dict[str, list[float]] = {"plain optax": [], "recipe lead": []}
    for _ in range(repetitions):
        seconds["plain optax"].append(
            speedup.plain_arm(workload).compile_seconds
        )
        recipe = speedup.level_arm(workload, "O1", boostax.o1_recipe())
        state = recipe.init(0)
        start = time.perf_counter()
        recipe.train_step.lower(state, batch, depth=0).compile()
        seconds["recipe lead"].append(time.perf_counter() - start)
    return seconds


def main(argv=None):
    parser = _common.argument_parser(
        __doc__, "grad_freeze_short_runs.json", repetitions=10, steps=5
    )
    parser.add_argument("--epochs", type=int, nargs="+", default=EPOCHS)
    parser.add_argument("--cond-probe", action="store_true")
    parser.add_argument("--compile-probe", action="store_true")
    args = _common.parse(parser, argv, epochs=[1], repetitions=2, steps=1)
    cache = None if args.no_compilation_cache else args.compilation_cache
    payload = {
        "command": "python benchmarks/grad_freeze_short_runs.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "environment": _common.environment(),
        "quick": args.quick,
        "compilation_cache_dir": cache,
        "load_average": os.getloadavg(),
    }
    if args.cond_probe or args.compile_probe:
        if args.quick:
            probe = {"skipped": "quick"}
        elif args.cond_probe:
            probe = cond_probe()
        else:
            probe = compile_probe()
        print(probe)
        payload["cond_probe" if args.cond_probe else "compile_probe"] = probe
        if args.out:
            _common.write_result(args.out, payload)
        return payload
    start = time.perf_counter()
    rows = []
    for epochs in args.epochs:
        row = measure(epochs, args.quick, args.repetitions, args.steps)
        rows.append(row)
        print(
            f"{row['epochs']:>3} epochs {row['steps']:>5} steps: "
            f"compile wait {row['recipe_compile_wait']:.1f} s vs plain "
            f"{row['plain_compile_seconds']:.1f} s "
            f"({row['compile_wait_ratio']:.2f}x); step cost "
            + ", ".join(
                f"{k} {v:.3f}" for k, v in row["step_cost_ratio"].items()
            )
            + f"; wall {row['wall_ratio_with_compile']:.3f}x",
            flush=True,
        )
    payload.update(
        wall_seconds=time.perf_counter() - start,
        compile_wait_max=COMPILE_WAIT_MAX,
        runs=rows,
    )
    if args.out:
        _common.write_result(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
