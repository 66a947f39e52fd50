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

import statistics

import _common

import boostax
from boostax.examples import baseline, models

TARGET_RATIO = 1.03


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__, "step_overhead.json", **_common.STEP_FLAGS, repetitions=41
    )
    args = _common.parse(parser, argv, **_common.STEP_QUICK, repetitions=3)
    workload = _common.digits_workload(args)
    model = workload.model
    batch, variables = _common.timing_inputs(workload)
    optimizer = workload.optimizer()

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
        "model": _common.describe(model),
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
