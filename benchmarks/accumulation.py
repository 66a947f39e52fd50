# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient accumulation: boostax vs ``optax.MultiSteps``.

For an inner Adam and an inner Muon (``optax.contrib.muon``: Newton-Schulz
iterations, an expensive optimizer) over k = 4 micro-steps, on the parameter
shapes of four 256x256 dense layers:

- inner-optimizer FLOPs per micro-step (``cost_analysis``): MultiSteps runs
  the inner update on every micro-step; boostax on one in k;
- memory of the compiled update (``memory_analysis``): arguments (state)
  and temporaries;
- median time of a full k-micro-step cycle, interleaved, as a ratio.

    python benchmarks/accumulation.py [--quick]
"""

from __future__ import annotations

import math
import statistics

import _common
import jax
import jax.numpy as jnp
import numpy as np
import optax

import boostax

INNER = {
    "adam": lambda: optax.adam(1e-3),
    "muon": lambda: optax.contrib.muon(1e-3),
}


def cycle_runner(tx, params, grads, k, cycles):
    """A function running `cycles` cycles of k accumulation micro-steps."""
    update = jax.jit(tx.update)
    state = tx.init(params)

    def run():
        nonlocal state, params
        for _ in range(cycles):
            for g in grads[:k]:
                updates, state = update(g, state, params)
                params = optax.apply_updates(params, updates)
        return params

    return run


def measure(name, params, grads, k, args) -> dict:
    inner = INNER[name]()
    ours = boostax.gradient_accumulation(inner, k)
    multi = optax.MultiSteps(inner, k).gradient_transformation()

    def compiled(fn, *xs):
        return jax.jit(fn).lower(*xs).compile()

    inner_flops = compiled(
        inner.update, grads[0], inner.init(params), params
    ).cost_analysis()["flops"]
    # What boostax adds to a micro-step besides the inner update (its running
    # mean, counters and reset), as MultiSteps' figure holds its own: the
    # same accumulation around an inner step that computes nothing.
    bare = boostax.gradient_accumulation(optax.identity(), k)
    accumulate_flops = compiled(
        bare.update, grads[0], bare.init(params), params
    ).cost_analysis()["flops"]
    multi_compiled = compiled(
        multi.update, grads[0], multi.init(params), params
    )
    ours_compiled = compiled(ours.update, grads[0], ours.init(params), params)
    samples = boostax.measure.interleaved_timings(
        {
            "boostax": cycle_runner(ours, params, grads, k, args.cycles),
            "multisteps": cycle_runner(multi, params, grads, k, args.cycles),
        },
        repetitions=args.repetitions,
        steps=args.cycles,
    )
    ours_memory = ours_compiled.memory_analysis()
    multi_memory = multi_compiled.memory_analysis()
    return {
        "inner_flops_per_update": inner_flops,
        "multisteps_flops_per_micro_step": multi_compiled.cost_analysis()[
            "flops"
        ],
        "boostax_flops_per_micro_step": inner_flops / k + accumulate_flops,
        "flops_ratio": (inner_flops / k + accumulate_flops)
        / multi_compiled.cost_analysis()["flops"],
        "boostax_state_bytes": ours_memory.argument_size_in_bytes,
        "multisteps_state_bytes": multi_memory.argument_size_in_bytes,
        "boostax_temp_bytes": ours_memory.temp_size_in_bytes,
        "multisteps_temp_bytes": multi_memory.temp_size_in_bytes,
        "cycle_ms": {n: 1e3 * statistics.median(v) for n, v in samples.items()},
        "time_ratio": boostax.measure.paired_ratio(
            samples["boostax"], samples["multisteps"]
        ),
    }


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__, "accumulation.json", repetitions=21
    )
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--cycles", type=int, default=10)
    args = _common.parse(parser, argv, width=32, repetitions=2, cycles=1)
    rng = np.random.default_rng(0)
    params = {
        f"dense_{i}": jnp.asarray(
            rng.normal(size=(args.width, args.width)), jnp.float32
        )
        for i in range(4)
    }
    grads = [
        jax.tree.map(
            lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32),
            params,
        )
        for _ in range(args.k)
    ]
    param_bytes = sum(4 * math.prod(p.shape) for p in params.values())
    results = {
        name: measure(name, params, grads, args.k, args) for name in INNER
    }
    result = {
        "benchmark": "accumulation",
        "quick": args.quick,
        "k": args.k,
        "params": f"4 x ({args.width}, {args.width}) float32",
        "param_bytes": param_bytes,
        "inner": results,
    }
    for name, r in results.items():
        extra = r["boostax_temp_bytes"] - r["multisteps_temp_bytes"]
        print(
            f"{name}: FLOPs per micro-step x{r['flops_ratio']:.3f} of "
            f"MultiSteps; temp bytes {r['boostax_temp_bytes']} vs "
            f"{r['multisteps_temp_bytes']} (+{extra / param_bytes:.2f} "
            f"param sizes); cycle time x{r['time_ratio']:.3f}"
        )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
