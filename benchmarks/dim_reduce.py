# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""DimReduce vs continuing SGD: MindSpore's two-stage tutorial in miniature.

On the example ResNet (digits), per setting and seed:

- stage 1: SGD (momentum 0.9, constant learning rate) for ``epochs``
  epochs, recording a snapshot of the params (`boostax.Trajectory`) every
  ``snapshot_every`` steps after the first ``discard_epochs`` epochs (42
  snapshots in both settings);
- the explained-variance ratio of the trajectory's principal directions
  (`boostax.explained_variance_ratio`) and the PCA matrix ``P``
  (`boostax.pca_components`, randomized as MindSpore);
- stage 2, every arm from the same final stage-1 state (params, BatchNorm
  statistics; SGD keeps its momentum):

  - ``dim_reduce_k<k>``: ``--dr-epochs`` epochs of `boostax.dim_reduce(P)`
    (MindSpore's defaults; it replaces the optimizer) with boostax's train
    step, for each ``--n-components`` k; BatchNorm statistics keep updating
    in the main forward (the line-search trials do not move them);
  - ``dim_reduce_random_k<k>``: the same with a random orthonormal ``P``
    (control: does the trajectory's subspace matter, or only DimReduce's
    small residual-momentum step, ``alpha = 0.001``?);
  - ``sgd``: ``--sgd-epochs`` more epochs of the stage-1 SGD; its first
    ``--dr-epochs`` epochs are the equal-epoch comparison (``sgd_short``);
  - ``sgd_lr_div10``: ``--dr-epochs`` epochs of the same SGD (same momentum
    buffer) at a tenth of the learning rate (control: a plain learning-rate
    drop; off the subspace, DimReduce's residual step is momentum-0.9 SGD
    at ``alpha = 0.001``, 50x below stage 1's rate).

The settings: ``converged`` stops stage 1 after 8 epochs, where this small
problem is already solved (train loss ~5e-4); ``early_stop`` after 3, still
improving, closer to the tutorial (stage 1 cut at 70 of 90 planned epochs).

Test accuracy, test loss and train loss (evaluation mode) are recorded every
half epoch; wall time excludes compilation and evaluation. Compilation is
reported once per step function: one DimReduce step per k serves every seed
and setting (each run puts its own ``P`` into the state, the step's only
use of it). Medians over ``--seeds`` seeds. The per-step cost of DimReduce
against SGD is also measured with interleaved repetitions (robust to the
load of a shared machine, unlike the sequential stage-2 times).

    python benchmarks/dim_reduce.py            # ~9 min on 2 CPU cores
    python benchmarks/dim_reduce.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time

import _common
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

import boostax
from boostax.examples import data, models

# Stage-1 length and snapshot sampling: 42 snapshots each (21 steps/epoch).
SETTINGS = {
    "converged": {"epochs": 8, "discard_epochs": 2, "snapshot_every": 3},
    "early_stop": {"epochs": 3, "discard_epochs": 1, "snapshot_every": 1},
}
QUICK_SETTINGS = {
    "quick": {"epochs": 1, "discard_epochs": 0, "snapshot_every": 2},
}
METRICS = ("test_accuracy", "test_loss", "train_loss")


def _evaluator(model, digits):
    """``evaluate(state) -> dict`` of `METRICS`, in evaluation mode."""

    @jax.jit
    def metrics(params, model_state, x, y):
        logits = model.apply({"params": params, **model_state}, x, train=False)
        loss = models.cross_entropy(logits, y)
        return loss, jnp.mean(jnp.argmax(logits, -1) == y)

    x_test, y_test = jnp.asarray(digits.x_test), jnp.asarray(digits.y_test)
    x_train, y_train = jnp.asarray(digits.x_train), jnp.asarray(digits.y_train)

    def evaluate(state):
        test_loss, test_accuracy = metrics(
            state.params, state.model_state, x_test, y_test
        )
        train_loss, _ = metrics(
            state.params, state.model_state, x_train, y_train
        )
        return {
            "test_accuracy": float(test_accuracy),
            "test_loss": float(test_loss),
            "train_loss": float(train_loss),
        }

    return evaluate


def _train(step, state, digits, args, *, seed, first_epoch, epochs, on_step):
    """Runs `epochs` epochs; evaluates every half epoch (untimed).

    ``on_step(epoch, i, state)`` runs after each step and returns the
    seconds to leave out of the timing (or None).

    Returns:
      ``(state, curve, seconds)``: `curve` has one entry per half epoch
      (``epoch`` counted from the start of this call), `seconds` the wall
      time of the steps alone (the step must be compiled already).
    """
    steps = data.steps_per_epoch(len(digits.x_train), args.batch_size)
    checkpoints = {steps // 2, steps}
    curve, seconds = [], 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        batches = data.batches(
            digits.x_train,
            digits.y_train,
            args.batch_size,
            seed=seed,
            epoch=first_epoch + epoch,
        )
        for i, batch in enumerate(batches, start=1):
            state, _ = step(state, batch)
            if on_step is not None:
                seconds -= on_step(epoch, i, state) or 0.0
            if i in checkpoints:
                jax.block_until_ready(state)
                seconds += time.perf_counter() - start
                curve.append(
                    {"epoch": epoch + i / steps, **args.evaluate(state)}
                )
                start = time.perf_counter()
    return state, curve, seconds


def _random_rows(k, n, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, k)))
    return q.T.astype(np.float32)


class Steps:
    """The compiled train steps, shared by every seed and setting."""

    def __init__(self, model, digits, args):
        self.model, self.args = model, args
        self.batch = _common.first_batch(digits, args.batch_size)
        self.sgd = boostax.make_train_step(
            optax.sgd(args.learning_rate, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
        )
        # Same optimizer state as `sgd` (momentum trace, then the scale).
        self.sgd_low = boostax.make_train_step(
            optax.sgd(args.learning_rate / 10, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
        )
        self.dim_reduce: dict[int, boostax.TrainStep] = {}
        self.compile_seconds: dict[str, float] = {}
        # The latest stage-2 starting point of each step: (step, state).
        self.stage2_start: dict[str, tuple] = {}

    def init_sgd(self, variables):
        state = self.sgd.init(variables)
        if "sgd" not in self.compile_seconds:
            start = time.perf_counter()
            self.sgd.compile_all(state, self.batch)
            self.compile_seconds["sgd"] = time.perf_counter() - start
        return state

    def compile_sgd_low(self, state):
        if "sgd_lr_div10" not in self.compile_seconds:
            start = time.perf_counter()
            self.sgd_low.compile_all(state, self.batch)
            self.compile_seconds["sgd_lr_div10"] = time.perf_counter() - start

    def init_dim_reduce(self, variables, matrix):
        """The DimReduce step for ``P``'s k, and its state with this P."""
        k = matrix.shape[0]
        if k not in self.dim_reduce:
            self.dim_reduce[k] = boostax.make_train_step(
                boostax.dim_reduce(matrix),
                model=self.model,
                loss=models.cross_entropy,
            )
        ts = self.dim_reduce[k]
        state = ts.init(variables)
        state = state.replace(
            opt_state=state.opt_state._replace(pca_matrix=jnp.asarray(matrix))
        )
        name = f"dim_reduce_k{k}"
        if name not in self.compile_seconds:
            start = time.perf_counter()
            ts.compile_all(state, self.batch)
            self.compile_seconds[name] = time.perf_counter() - start
        return ts, state


def run_seed(seed, setting, model, digits, steps_, args) -> dict:
    """Stage 1, the PCA, and every stage-2 arm, for one seed."""
    variables = _common.init_variables(
        model, jax.random.PRNGKey(seed), digits.x_train[:1], train=False
    )
    state = steps_.init_sgd(variables)

    # Stage 1, recording the trajectory.
    steps = data.steps_per_epoch(len(digits.x_train), args.batch_size)
    discard, every = setting["discard_epochs"], setting["snapshot_every"]
    trajectory = boostax.Trajectory(
        (setting["epochs"] - discard) * steps // every
    )
    record_seconds = 0.0

    def record(epoch, i, state):
        nonlocal record_seconds
        if epoch < discard or ((epoch - discard) * steps + i) % every:
            return None
        jax.block_until_ready(state.params)  # the step itself: timed
        start = time.perf_counter()
        trajectory.record(state.params)  # the copy to the host: not timed
        seconds = time.perf_counter() - start
        record_seconds += seconds
        return seconds

    state, stage1_curve, stage1_seconds = _train(
        steps_.sgd,
        state,
        digits,
        args,
        seed=seed,
        first_epoch=0,
        epochs=setting["epochs"],
        on_step=record,
    )
    snapshots = len(trajectory)
    result = {
        "seed": seed,
        "snapshots": snapshots,
        "explained_variance_ratio": boostax.explained_variance_ratio(
            trajectory, snapshots
        ).tolist(),
        "stage1": {
            "curve": stage1_curve,
            "train_seconds": stage1_seconds,
            "steps": setting["epochs"] * steps,
            "snapshot_seconds": record_seconds,
            **stage1_curve[-1],
        },
        "pca_seconds": {},
        "arms": {},
    }

    # Stage 2: every arm from the same state.
    start_point = {**stage1_curve[-1], "epoch": 0.0}

    def stage2(step, state, epochs, on_step=None):
        """`epochs` epochs after stage 1: ``(curve, seconds)``."""
        _, curve, seconds = _train(
            step,
            state,
            digits,
            args,
            seed=seed,
            first_epoch=setting["epochs"],
            epochs=epochs,
            on_step=on_step,
        )
        return curve, seconds

    def record(curve, seconds, epochs, **extra):
        """A stage-2 arm's result, its curve from the end of stage 1."""
        return {
            "curve": [start_point, *curve],
            "train_seconds": seconds,
            "steps": epochs * steps,
            **extra,
            **curve[-1],
        }

    steps_.stage2_start["sgd"] = (steps_.sgd, state)
    variables = {"params": state.params, **state.model_state}
    matrices = {}
    for k in args.n_components:
        start = time.perf_counter()
        matrices[f"dim_reduce_k{k}"] = boostax.pca_components(trajectory, k)
        result["pca_seconds"][str(k)] = time.perf_counter() - start
    if args.random_control:
        k = max(args.n_components)
        n = ravel_pytree(state.params)[0].size
        matrices[f"dim_reduce_random_k{k}"] = _random_rows(k, n, seed + 1000)
    for name, matrix in matrices.items():
        ts, dr_state = steps_.init_dim_reduce(variables, matrix)
        if "random" not in name:
            steps_.stage2_start[name] = (ts, dr_state)
        step_sizes = []

        def collect(epoch, i, s, step_sizes=step_sizes):
            step_sizes.append(s.opt_state.step_size)  # no sync

        curve, seconds = stage2(ts, dr_state, args.dr_epochs, collect)
        sizes = np.asarray(jax.device_get(step_sizes))
        result["arms"][name] = {
            "n_components": int(matrix.shape[0]),
            **record(
                curve,
                seconds,
                args.dr_epochs,
                accepted_fraction=float(np.mean(sizes > 0)),
                step_size_counts={
                    f"{r:g}": int(np.sum(np.isclose(sizes, r)))
                    for r in sorted(set(np.round(sizes, 6).tolist()))
                },
            ),
        }

    if args.lr_drop_control:
        steps_.compile_sgd_low(state)
        curve, seconds = stage2(steps_.sgd_low, state, args.dr_epochs)
        result["arms"]["sgd_lr_div10"] = record(curve, seconds, args.dr_epochs)

    curve, seconds = stage2(steps_.sgd, state, args.sgd_epochs)
    result["arms"]["sgd"] = record(curve, seconds, args.sgd_epochs)
    # The first dr_epochs of "sgd".
    short = [c for c in curve if c["epoch"] <= args.dr_epochs]
    result["arms"]["sgd_short"] = record(
        short, seconds * args.dr_epochs / args.sgd_epochs, args.dr_epochs
    )
    return result


def summarize(per_seed, args) -> dict:
    """Per-seed values and medians of every arm."""
    arms = {"stage1_end": [r["stage1"] for r in per_seed]}
    for name in per_seed[0]["arms"]:
        arms[name] = [r["arms"][name] for r in per_seed]
    stage2_epochs = {"stage1_end": 0, "sgd": args.sgd_epochs}
    summary = {}
    for name, runs in arms.items():
        entry = {"stage2_epochs": stage2_epochs.get(name, args.dr_epochs)}
        for key in (*METRICS, "train_seconds"):
            entry[key] = [r[key] for r in runs]
            entry[f"median_{key}"] = statistics.median(entry[key])
        entry["median_ms_per_step"] = statistics.median(
            1e3 * r["train_seconds"] / r["steps"] for r in runs
        )
        if "accepted_fraction" in runs[0]:
            entry["accepted_fraction"] = [r["accepted_fraction"] for r in runs]
        summary[name] = entry
    base = summary["sgd_short"]
    for entry in summary.values():
        entry["median_points_vs_sgd_short"] = 100 * (
            entry["median_test_accuracy"] - base["median_test_accuracy"]
        )
        entry["median_test_loss_vs_sgd_short"] = (
            entry["median_test_loss"] / base["median_test_loss"]
        )
    return summary


def measure_step_time(steps_, digits, args) -> dict:
    """Per-step time of SGD and DimReduce, interleaved (as the other
    benchmarks), from the last stage-2 starting point over one epoch of
    real batches: the stage-2 times above are sequential, so the load of a
    shared machine moves them."""
    batches = [
        tuple(jnp.asarray(t) for t in batch)
        for batch in data.batches(
            digits.x_train,
            digits.y_train,
            args.batch_size,
            seed=0,
            epoch=10**6,
        )
    ]

    def runner(step, state):
        position = 0

        def run_steps():
            nonlocal state, position
            for _ in range(len(batches)):
                state, _ = step(state, batches[position % len(batches)])
                position += 1
            return state

        return run_steps

    samples = boostax.measure.interleaved_timings(
        {name: runner(*pair) for name, pair in steps_.stage2_start.items()},
        repetitions=args.repetitions,
        steps=len(batches),
    )
    return {
        name: {
            "median_step_ms": 1e3 * statistics.median(values),
            "step_time_ratio_vs_sgd": boostax.measure.paired_ratio(
                values, samples["sgd"]
            ),
        }
        for name, values in samples.items()
    }


def run_setting(name, setting, model, digits, steps_, args) -> dict:
    per_seed = []
    for seed in range(args.seeds):
        per_seed.append(run_seed(seed, setting, model, digits, steps_, args))
        print(f"{name}: seed {seed} done", flush=True)
    ratios = np.array([r["explained_variance_ratio"] for r in per_seed])
    cumulative = np.cumsum(ratios, axis=1)
    tops = sorted({1, 2, 5, 10, *args.n_components})
    summary = summarize(per_seed, args)
    headline = f"dim_reduce_k{max(args.n_components)}"
    return {
        **setting,
        "snapshots": per_seed[0]["snapshots"],
        "explained_variance": {
            "median_ratio": np.median(ratios, axis=0).tolist(),
            "median_cumulative": np.median(cumulative, axis=0).tolist(),
            **{
                f"median_cumulative_top{k}": float(
                    np.median(cumulative[:, k - 1])
                )
                for k in tops
                if k <= cumulative.shape[1]
            },
        },
        "summary": summary,
        "headline_arm": headline,
        "dim_reduce_beats_sgd_short": summary[headline]["median_test_accuracy"]
        > summary["sgd_short"]["median_test_accuracy"],
        "per_seed": per_seed,
    }


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__, "dim_reduce.json", **_common.DIGITS_FLAGS, repetitions=5
    )
    parser.add_argument(
        "--settings", nargs="+", choices=sorted(SETTINGS), default=None
    )
    parser.add_argument("--n-components", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--dr-epochs", type=int, default=2)
    parser.add_argument("--sgd-epochs", type=int, default=10)
    parser.add_argument(
        "--random-control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run DimReduce in a random subspace",
    )
    parser.add_argument(
        "--lr-drop-control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also continue SGD at a tenth of the learning rate",
    )
    args = _common.parse(
        parser,
        argv,
        **_common.DIGITS_QUICK,
        n_components=[8],
        random_control=False,
        lr_drop_control=False,
        dr_epochs=1,
        sgd_epochs=1,
        repetitions=1,
    )
    settings = (
        QUICK_SETTINGS
        if args.quick
        else {name: SETTINGS[name] for name in args.settings or SETTINGS}
    )
    device = _common.device(args.device)
    with jax.default_device(device):
        workload = _common.digits_workload(args)
        model, digits = workload.model, workload.digits
        args.evaluate = _evaluator(model, digits)
        steps_ = Steps(model, digits, args)
        results = {
            name: run_setting(name, setting, model, digits, steps_, args)
            for name, setting in settings.items()
        }
        step_time = measure_step_time(steps_, digits, args)
    result = {
        "benchmark": "dim_reduce",
        "quick": args.quick,
        "device": str(device),
        "model": _common.describe(model),
        "n_params": _n_params(model, digits),
        "batch_size": args.batch_size,
        "steps_per_epoch": data.steps_per_epoch(
            len(digits.x_train), args.batch_size
        ),
        "seeds": args.seeds,
        "optimizer": f"sgd(lr={args.learning_rate} constant, momentum=0.9)",
        "n_components": args.n_components,
        "dim_reduce_hyperparameters": {
            "rho": 0.55,
            "gamma": 0.9,
            "alpha": 0.001,
            "sigma": 0.4,
            "max_trials": 2,
            "pca": "randomized (oversampling 10, 1 power iteration)",
        },
        "dr_epochs": args.dr_epochs,
        "sgd_epochs": args.sgd_epochs,
        "random_control": args.random_control,
        "lr_drop_control": args.lr_drop_control,
        "compile_seconds": steps_.compile_seconds,
        "step_time": step_time,
        "settings": results,
    }
    _print_table(result)
    _common.write_result(args.out, result)
    return result


def _n_params(model, digits) -> int:
    variables = jax.eval_shape(
        lambda x: _common.init_variables(
            model, jax.random.PRNGKey(0), x, train=False
        ),
        digits.x_train[:1],
    )
    return sum(x.size for x in jax.tree.leaves(variables["params"]))


def _print_table(result) -> None:
    print(
        f"{result['model']}, N={result['n_params']} params; compile (s): "
        + ", ".join(
            f"{k} {v:.1f}" for k, v in result["compile_seconds"].items()
        )
    )
    for name, setting in result["settings"].items():
        ev = setting["explained_variance"]
        print(
            f"\n{name}: stage 1 = {setting['epochs']} epochs, "
            f"{setting['snapshots']} snapshots; explained variance (median "
            "cumulative): "
            + ", ".join(
                f"top{key.rsplit('top', 1)[1]} {value:.3f}"
                for key, value in ev.items()
                if key.startswith("median_cumulative_top")
            )
        )
        header = (
            f"{'arm':<22}{'epochs':>7}{'test acc per seed':>26}"
            f"{'median':>8}{'pts':>7}{'test loss':>10}{'train loss':>11}"
            f"{'time s':>8}{'ms/step':>8}"
        )
        print(header)
        print("-" * len(header))
        for arm, s in setting["summary"].items():
            seeds = " ".join(f"{a:.4f}" for a in s["test_accuracy"])
            print(
                f"{arm:<22}{s['stage2_epochs']:>7}{seeds:>26}"
                f"{s['median_test_accuracy']:>8.4f}"
                f"{s['median_points_vs_sgd_short']:>+7.2f}"
                f"{s['median_test_loss']:>10.4f}"
                f"{s['median_train_loss']:>11.4f}"
                f"{s['median_train_seconds']:>8.2f}"
                f"{s['median_ms_per_step']:>8.1f}"
            )
    print(
        "(pts: median test accuracy minus sgd_short's, in points; times "
        "exclude compilation and evaluation)\n\nstep time, interleaved: "
        + ", ".join(
            f"{name} {t['median_step_ms']:.1f} ms "
            f"(x{t['step_time_ratio_vs_sgd']:.2f})"
            for name, t in result["step_time"].items()
        )
    )


if __name__ == "__main__":
    main()
