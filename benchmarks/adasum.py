# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""AdaSum vs plain averaging on 8 simulated CPU devices.

The data-parallel train step (``boostax.DataParallel``) over 8 host CPU
devices with ``reduction="adasum"`` (each replica runs the optimizer on its
own gradient; the updates are AdaSum'd), ``"adasum_gradients"`` (gradients
AdaSum'd, one optimizer) and ``"mean"`` (plain averaging, ``lax.pmean``):

- cost: median step time of each reduction as a ratio to ``"mean"``
  (interleaved repetitions, same model, same global batch), FLOPs and
  memory (``cost_analysis``/``memory_analysis``), and the bytes each device
  sends in the compiled step's collectives, against the gradient bytes;
- the paper's claim in miniature (Maleki et al., MLSys 2021): at a large
  global batch (512 = 8 x 64) on the digits, epochs to a target test
  accuracy with AdaSum vs averaging at the same learning rates (the
  small-batch rate and scaled versions; momentum SGD, cosine decay over a
  fixed epoch budget), 3 seeds, with a one-device batch-64 reference.

The 8 devices are simulated on the host CPU: step times include no network,
so the ratios measure the extra computation and collective steps only.

    python benchmarks/adasum.py [--quick]
"""

from __future__ import annotations

import math
import os
import statistics
import time
from typing import NamedTuple

import _common
import jax
import numpy as np
import optax

import boostax
from boostax.examples import baseline, data, models

# Before any backend use: 8 host CPU devices, whatever XLA_FLAGS says.
NUM_DEVICES = 8
jax.config.update("jax_num_cpu_devices", NUM_DEVICES)

REDUCTIONS = ("mean", "adasum", "adasum_gradients")
# Steps per timing sample (about 0.1 s of work each on 2 CPU cores).
STEPS = {"mlp": 20, "resnet_small": 5, "resnet": 2}

# --------------------------------------------------------------------------
# Models and steps.


def _model(name: str):
    """``(model, flat_inputs, init_kwargs)``."""
    if name == "mlp":
        return models.MLP(), True, {}
    if name == "resnet_small":
        return (
            models.ResNet(stage_sizes=(1, 1), widths=(16, 32)),
            False,
            {"train": False},
        )
    if name == "resnet":
        return models.ResNet(), False, {"train": False}
    raise ValueError(name)


def _train_step(model, optimizer, mesh, reduction):
    return boostax.make_train_step(
        optimizer,
        model=model,
        loss=models.cross_entropy,
        data_parallel=boostax.DataParallel(mesh, reduction=reduction),
    )


# --------------------------------------------------------------------------
# (a) Cost.


def measure_cost(name: str, mesh, args) -> dict:
    model, flat, kwargs = _model(name)
    digits = data.load_digits(flat=flat)
    batch = _common.first_batch(digits, args.batch_size)
    variables = _common.init_variables(
        model, jax.random.PRNGKey(0), batch[0][:1], **kwargs
    )
    param_bytes = sum(
        x.size * x.dtype.itemsize for x in jax.tree.leaves(variables["params"])
    )
    optimizer = optax.sgd(args.learning_rate, momentum=0.9)
    runs, per_reduction = {}, {}
    steps = args.steps or STEPS[name]
    reductions = REDUCTIONS if not args.quick else ("mean", "adasum")
    for reduction in reductions:
        ts = _train_step(model, optimizer, mesh, reduction)
        state = ts.init(variables)
        start = time.perf_counter()
        compiled = ts.lower(state, batch).compile()
        compile_seconds = time.perf_counter() - start
        sent, counts = boostax.measure.collective_bytes(compiled.as_text())
        per_reduction[reduction] = {
            "compile_seconds": compile_seconds,
            **boostax.measure.executable_cost(compiled)._asdict(),
            "collective_bytes_per_device": sent,
            "collective_bytes_over_gradient_bytes": sent / param_bytes,
            "collective_ops": counts,
        }
        sharded = ts.data_parallel.shard_batch(batch)
        runs[reduction] = _common.step_runner(compiled, state, sharded, steps)
    print(f"timing {name} ({', '.join(reductions)})", flush=True)
    samples = boostax.measure.interleaved_timings(
        runs, repetitions=args.repetitions, steps=steps
    )
    mean = per_reduction["mean"]
    for reduction, r in per_reduction.items():
        r["median_step_ms"] = 1e3 * statistics.median(samples[reduction])
        r["step_time_ratio_vs_mean"] = boostax.measure.paired_ratio(
            samples[reduction], samples["mean"]
        )
        ratios = np.asarray(samples[reduction]) / np.asarray(samples["mean"])
        r["step_time_ratio_quartiles"] = [
            float(q) for q in np.percentile(ratios, [25, 75])
        ]
        if r["flops"] and mean["flops"]:
            r["flops_ratio_vs_mean"] = r["flops"] / mean["flops"]
        if r["temp_bytes"] is not None and mean["temp_bytes"]:
            r["temp_bytes_ratio_vs_mean"] = r["temp_bytes"] / mean["temp_bytes"]
    return {
        "model": _common.describe(model),
        "gradient_bytes": param_bytes,
        "global_batch": args.batch_size,
        "repetitions": args.repetitions,
        "steps_per_sample": steps,
        "reductions": per_reduction,
    }


# --------------------------------------------------------------------------
# (b) Epochs to a target accuracy at a large batch.


def _epochs_to(accuracies, target) -> int | None:
    for epoch, accuracy in enumerate(accuracies, start=1):
        if accuracy >= target:
            return epoch
    return None


def _train(ts, variables, digits, batch_size, seed, epochs) -> list[float]:
    """Test accuracy after each epoch."""
    state = ts.init(variables)
    accuracies = []
    for epoch in range(epochs):
        for batch in data.batches(
            digits.x_train, digits.y_train, batch_size, seed=seed, epoch=epoch
        ):
            state, _ = ts(state, batch)
        accuracies.append(
            baseline.accuracy(
                lambda x, state=state: ts.predict(state, x),
                digits.x_test,
                digits.y_test,
            )
        )
    return accuracies


class Convergence(NamedTuple):
    """Test accuracy per epoch over the seeds, against the target.

    Attributes:
      epochs_to_target: per seed, the first epoch at the target (``None``:
        not reached).
      median_epochs_to_target: ``None`` when most seeds never reach it.
    """

    epochs_to_target: list[int | None]
    median_epochs_to_target: float | None
    seeds_reaching_target: int
    final_accuracy: list[float]
    median_final_accuracy: float
    best_accuracy: list[float]
    accuracy_per_epoch: list[list[float]]


def _summary(runs: list[list[float]], target: float) -> Convergence:
    epochs = [_epochs_to(a, target) for a in runs]
    finals = [a[-1] for a in runs]
    # "Not reached" counts as later than any epoch.
    median = statistics.median(math.inf if e is None else e for e in epochs)
    return Convergence(
        epochs_to_target=epochs,
        median_epochs_to_target=None if math.isinf(median) else median,
        seeds_reaching_target=sum(e is not None for e in epochs),
        final_accuracy=finals,
        median_final_accuracy=statistics.median(finals),
        best_accuracy=[max(a) for a in runs],
        accuracy_per_epoch=runs,
    )


def measure_convergence(mesh, args) -> dict:
    model = models.MLP()
    digits = data.load_digits(flat=True)
    per_device = args.global_batch // NUM_DEVICES

    def optimizer(lr, batch_size):
        steps = args.epochs * data.steps_per_epoch(
            len(digits.x_train), batch_size
        )
        return optax.sgd(optax.cosine_decay_schedule(lr, steps), momentum=0.9)

    def variables(seed):
        return _common.init_variables(
            model, jax.random.PRNGKey(seed), digits.x_train[:1]
        )

    seeds = range(args.seeds)
    # The small-batch reference: one device, the per-replica batch.
    reference_step = boostax.make_train_step(
        optimizer(args.base_lr, per_device),
        model=model,
        loss=models.cross_entropy,
    )
    reference = _summary(
        [
            _train(
                reference_step,
                variables(s),
                digits,
                per_device,
                s,
                args.epochs,
            )
            for s in seeds
        ],
        args.target,
    )
    results = {}
    for scale in args.lr_scales:
        lr = args.base_lr * scale
        print(f"training at lr {lr:g}", flush=True)
        row = {}
        for reduction in ("mean", "adasum"):
            ts = _train_step(
                model, optimizer(lr, args.global_batch), mesh, reduction
            )
            row[reduction] = _summary(
                [
                    _train(
                        ts,
                        variables(s),
                        digits,
                        args.global_batch,
                        s,
                        args.epochs,
                    )
                    for s in seeds
                ],
                args.target,
            )
        results[f"lr_x{scale:g}"] = {"learning_rate": lr, **row}
    return {
        "model": _common.describe(model),
        "optimizer": "sgd(cosine_decay(lr, epochs x steps), momentum=0.9)",
        "global_batch": args.global_batch,
        "per_device_batch": per_device,
        "steps_per_epoch": data.steps_per_epoch(
            len(digits.x_train), args.global_batch
        ),
        "train_examples": len(digits.x_train),
        "test_examples": len(digits.x_test),
        "epochs": args.epochs,
        "seeds": args.seeds,
        "target_accuracy": args.target,
        "base_learning_rate": args.base_lr,
        "reference_one_device": {
            "batch_size": per_device,
            "learning_rate": args.base_lr,
            "steps_per_epoch": data.steps_per_epoch(
                len(digits.x_train), per_device
            ),
            **reference._asdict(),
        },
        "learning_rates": results,
    }


# --------------------------------------------------------------------------


def _fmt_epochs(epochs) -> str:
    return ",".join("-" if e is None else str(e) for e in epochs)


def _fmt_median(value) -> str:
    return "not reached" if value is None else f"{value:g}"


def _fmt_convergence(c: Convergence) -> str:
    return (
        f"{_fmt_epochs(c.epochs_to_target):>14} "
        f"{_fmt_median(c.median_epochs_to_target):>11} "
        f"{c.median_final_accuracy:>6.3f}"
    )


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__,
        "adasum.json",
        repetitions=15,
        steps=None,  # per model: `STEPS`
        batch_size=512,
        learning_rate=0.05,
        epochs=40,
        seeds=3,
    )
    parser.add_argument(
        "--models", default="mlp,resnet_small,resnet", help="timed models"
    )
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--base-lr", type=float, default=0.05)
    parser.add_argument(
        "--lr-scales", default="0.5,1,2,4,8", help="multiples of --base-lr"
    )
    parser.add_argument("--target", type=float, default=0.95)
    args = _common.parse(
        parser,
        argv,
        models="mlp",
        repetitions=2,
        steps=2,
        epochs=2,
        seeds=1,
        lr_scales="1",
    )
    args.lr_scales = [float(s) for s in args.lr_scales.split(",")]
    devices = jax.devices()
    if len(devices) < NUM_DEVICES:
        raise RuntimeError(
            f"AdaSum's benchmark needs {NUM_DEVICES} devices, got "
            f"{len(devices)}."
        )
    mesh = jax.make_mesh(
        (NUM_DEVICES,), ("data",), devices=devices[:NUM_DEVICES]
    )
    load = {"before": os.getloadavg()[0]}
    start = time.perf_counter()
    cost = {
        name: measure_cost(name, mesh, args) for name in args.models.split(",")
    }
    cost_seconds = time.perf_counter() - start
    start = time.perf_counter()
    convergence = measure_convergence(mesh, args)
    convergence_seconds = time.perf_counter() - start
    load["after"] = os.getloadavg()[0]
    result = {
        "benchmark": "adasum",
        "quick": args.quick,
        "devices": f"{NUM_DEVICES} x {devices[0].device_kind} (simulated)",
        "cost": cost,
        "convergence": convergence,
        "seconds": {"cost": cost_seconds, "convergence": convergence_seconds},
        # Other work on the machine makes the step-time ratios noisier.
        "load_average_1min": load,
    }

    print(f"\nstep time and collectives on {NUM_DEVICES} simulated devices")
    for c in cost.values():
        for reduction, r in c["reductions"].items():
            q = r["step_time_ratio_quartiles"]
            print(
                f"  {c['model']:<28} {reduction:<17} step time "
                f"x{r['step_time_ratio_vs_mean']:.3f} of mean (IQR "
                f"{q[0]:.2f}-{q[1]:.2f}); sends "
                f"{r['collective_bytes_per_device'] / 1e3:9.1f} kB/device "
                f"= {r['collective_bytes_over_gradient_bytes']:.2f}x the "
                f"gradient bytes ({c['gradient_bytes'] / 1e3:.1f} kB)"
            )
    conv = convergence
    ref = conv["reference_one_device"]
    print(
        f"\nepochs to {conv['target_accuracy']:.0%} test accuracy, global "
        f"batch {conv['global_batch']} on {NUM_DEVICES} devices, "
        f"{conv['epochs']} epochs, per seed (- = not reached)"
    )
    print(
        f"  reference: 1 device, batch {ref['batch_size']}, lr "
        f"{ref['learning_rate']:g}: {_fmt_epochs(ref['epochs_to_target'])}"
        f" (final {ref['median_final_accuracy']:.3f})"
    )
    print(
        f"  {'lr':>7} | {'mean: epochs':>14} {'median':>11} {'final':>6} | "
        f"{'adasum: epochs':>14} {'median':>11} {'final':>6}"
    )
    for row in conv["learning_rates"].values():
        m, a = row["mean"], row["adasum"]
        print(
            f"  {row['learning_rate']:>7g} | "
            f"{_fmt_convergence(m)} | {_fmt_convergence(a)}"
        )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
