# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Overhead of boostax's step: ``auto_boost("O0")`` vs the hand-written step.

Both train the example ResNet on digits with the same optimizer, params and
batch. Reported: median seconds per step of each (interleaved repetitions),
the median per-repetition ratio boostax / hand-written (target <= 1.03: the
abstraction costs nothing), and FLOPs and memory of both compiled steps,
which should be identical.

    python benchmarks/step_overhead.py            # full run, writes results/
    python benchmarks/step_overhead.py --quick    # smoke test (the test suite)
"""

from __future__ import annotations

import argparse
import os
import statistics

import _common
import jax
import jax.numpy as jnp
import optax

import boostax
from boostax.examples import baseline, compilation_cache, data, models

TARGET_RATIO = 1.03


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repetitions", type=int, default=41)
    parser.add_argument(
        "--steps", type=int, default=20, help="steps per timed repetition"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--out", default=os.path.join(_common.RESULTS_DIR, "step_overhead.json")
    )
    compilation_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compilation_cache.from_arguments(args)
    if args.quick:
        args.repetitions, args.steps = 3, 2

    model = (
        models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        if args.quick
        else models.ResNet()
    )
    digits = data.load_digits()
    batch = (
        jnp.asarray(digits.x_train[: args.batch_size]),
        jnp.asarray(digits.y_train[: args.batch_size]),
    )
    variables = _common.init_variables(
        model, jax.random.PRNGKey(0), batch[0], train=False
    )
    optimizer = optax.sgd(0.05, momentum=0.9)

    plain_step = baseline.make_plain_step(
        model, optimizer, models.cross_entropy, train=True
    )
    plain_state = baseline.init_plain_state(variables, optimizer)
    boost_step = boostax.auto_boost(
        "O0", optimizer=optimizer, model=model, loss=models.cross_entropy
    )
    boost_state = boost_step.init(variables)

    samples = boostax.interleaved_timings(
        {
            "plain": _common.step_runner(
                plain_step, plain_state, batch, args.steps
            ),
            "boostax_O0": _common.step_runner(
                boost_step, boost_state, batch, args.steps
            ),
        },
        repetitions=args.repetitions,
        steps=args.steps,
    )
    ratio = boostax.paired_ratio(samples["boostax_O0"], samples["plain"])
    result = {
        "benchmark": "step_overhead",
        "quick": args.quick,
        "model": f"ResNet{tuple(model.stage_sizes)} widths "
        f"{tuple(model.widths)}",
        "batch_size": args.batch_size,
        "repetitions": args.repetitions,
        "steps_per_repetition": args.steps,
        "plain": {
            "median_step_ms": 1e3 * statistics.median(samples["plain"]),
            **boostax.executable_cost(
                plain_step.lower(plain_state, batch).compile()
            )._asdict(),
        },
        "boostax_O0": {
            "median_step_ms": 1e3 * statistics.median(samples["boostax_O0"]),
            **boostax.executable_cost(
                boost_step.lower(boost_state, batch).compile()
            )._asdict(),
        },
        "ratio_boostax_over_plain": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }
    print(
        f"step time boostax O0 / hand-written Optax: {ratio:.3f} "
        f"(target <= {TARGET_RATIO}); plain "
        f"{result['plain']['median_step_ms']:.2f} ms, boostax "
        f"{result['boostax_O0']['median_step_ms']:.2f} ms per step; FLOPs "
        f"{result['plain']['flops']:.4g} vs {result['boostax_O0']['flops']:.4g}"
    )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
