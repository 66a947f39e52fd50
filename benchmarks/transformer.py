# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Boost algorithms on a byte-level transformer: which apply, what each saves.

A small pre-LayerNorm decoder-only transformer (`models.NNXTransformer`)
learns the next byte of Python's standard library (the ``*.py`` files of
its top-level directory; every 10th file held out for validation; see
`boostax.examples.text`), with AdamW under warm-up + cosine
(`boostax.examples.language_model`). Each arm below trains the same
budget from the same seeds on the same batches, measured as the ResNet
benchmark measures the levels (`benchmarks/speedup.py`):

- **steps to target**: the first step (validation loss every
  ``eval_every`` steps) whose validation loss is at or below the target:
  plain Optax's median validation loss at ``--target-fraction`` (80%) of
  its budget. Median and min-max over the seeds; misses counted.
- **step cost**: interleaved repetitions against plain Optax
  (`boostax.measure.interleaved_timings`), each arm walking its whole training
  sequence once (so a freezing schedule's every depth is timed in its
  share): the ratio of total times, and the median and quartiles of the
  per-repetition ratios; FLOPs and bytes ratios from
  `boostax.measure.cost_report` (weighted over a freezing sequence); compile
  seconds.
- **bitwise**: whether each seed's final params equal plain Optax's bit for
  bit (O0 must).

The arms (`ARMS`, data: one line each): O0; O1 at its defaults (LessBN,
centralization and MindSpore's freezing); gradient centralization; LessBN
(O1's options: it finds no BatchNorm and says so; its FN head is not placed
on the per-position logits, the report says why; centralization still
applies); gradient freezing in the model's call
order with MindSpore's schedule (interval, ``freeze_p`` 0.7), a lighter one
(``freeze_p`` 0.9) and boostax's progressive one; gradient accumulation (4
micro-steps, the schedule over the updates); a dynamic loss scale; AdaSum
across 8 simulated CPU devices (steps to target and costs from XLA only:
wall time on simulated devices that share two cores is not judged, and not
timed); sequence-length warm-up (Composer's defaults: the first 30% of the
updates train on the first 8, 16, ... positions of each window, one
compiled program per length; `boostax.seq_len_warmup`); DimReduce (plain
for the first half of the budget while recording the weight trajectory,
then DimReduce in its PCA subspace). Controls, run
when named: plain Optax (O0) at 2x and 4x the peak learning rate.

The full run writes its training curves first (``"complete": false``),
then the measurements. The README's figures come from two processes (AdaSum
needs the 8 devices, which the single-device timings are better without):

    python benchmarks/transformer.py --arms O0 O1 centralization \
        "LessBN (O1)" "freeze MindSpore" "freeze light" "freeze progressive" \
        "accumulation x4" "dynamic loss scale" DimReduce     # ~26 min
    python benchmarks/transformer.py --arms "AdaSum 8 devices" "O0 lr x2" \
        "O0 lr x4" --out benchmarks/results/transformer_adasum.json
    python benchmarks/transformer.py --quick   # smoke test
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import _common
import jax
import numpy as np

import boostax
from boostax.examples import language_model as lm
from boostax.examples import models, speedup, text

PLAIN = speedup.PLAIN
SEEDS = 3
TARGET_FRACTION = 0.8
# DimReduce: plain Optax for this share of the budget, snapshots over its
# last `DIM_REDUCE_RECORD` of it, then DimReduce with k components.
DIM_REDUCE_START = 0.5
DIM_REDUCE_RECORD = 0.8
DIM_REDUCE_SNAPSHOTS = 40
DIM_REDUCE_COMPONENTS = 32

_ONLY = {"mode": "manual", "less_bn": False, "grad_freeze": False}


def _freeze(freeze_type: int, freeze_p: float) -> dict:
    return {
        "boost": {**_ONLY, "grad_freeze": True},
        "grad_freeze": {"freeze_type": freeze_type, "freeze_p": freeze_p},
    }


@dataclasses.dataclass(frozen=True)
class ArmSpec:
    """How one arm builds its train step.

    Attributes:
      level, config: `boostax.auto_boost`'s (the freezing sequence's
        ``total_steps`` is set to the budget).
      options: more keyword arguments of `boostax.auto_boost` (e.g.
        ``loss_scale=``; a precision policy's ``precision=``).
      centralize: wrap the optimizer in
        `boostax.with_gradient_centralization`.
      mesh: train data-parallel on the 8-device mesh (AdaSum).
      dim_reduce: plain Optax, then DimReduce (`DimReduce`).
      learning_rate_scale: the peak learning rate times this (a control:
        an algorithm that enlarges the steps is compared with plain Optax
        at a larger rate).
      muon: Optax's Muon instead of AdamW (`lm.Workload.optimizer`).
    """

    level: str = "O0"
    config: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    centralize: bool = False
    mesh: bool = False
    dim_reduce: bool = False
    learning_rate_scale: float = 1.0
    muon: bool = False


# The arms beside plain Optax, one line each: a mixed-precision arm is
# ``"bf16": ArmSpec(options={"precision": ...})``.
ARMS: dict[str, ArmSpec] = {
    "O0": ArmSpec(),
    # In mode "auto" the level switches nothing on here (no BatchNorm).
    "O1": ArmSpec("O1"),
    # MindSpore's O1 as is; the empty section is where the freezing
    # sequence's length, the budget's, goes.
    "MindSpore's O1": ArmSpec(
        "O1",
        {
            "boost": {"mode": "manual", "less_bn": True, "grad_freeze": True},
            "grad_freeze": {},
        },
    ),
    "centralization": ArmSpec(centralize=True),
    "LessBN (O1)": ArmSpec("O1", {"boost": {**_ONLY, "less_bn": True}}),
    "freeze MindSpore": ArmSpec("O1", _freeze(1, 0.7)),
    "freeze light": ArmSpec("O1", _freeze(1, 0.9)),
    "freeze progressive": ArmSpec("O1", _freeze(2, 0.7)),
    "accumulation x4": ArmSpec(
        "O1",
        {
            "boost": {**_ONLY, "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 4},
        },
    ),
    "dynamic loss scale": ArmSpec(
        options={"loss_scale": boostax.DynamicLossScale()}
    ),
    "AdaSum 8 devices": ArmSpec(
        "O2", {"boost": {**_ONLY, "adasum": True}}, mesh=True
    ),
    # Composer's defaults (duration 0.3, lengths from 8 by 8); its
    # `total_steps` is set to the budget's updates.
    "seq-len warm-up": ArmSpec(config={"seq_len_warmup": {"enabled": True}}),
    "DimReduce": ArmSpec(dim_reduce=True),
}
# Controls, run when named (--arms): O0 (plain Optax) at larger peak
# learning rates. AdaSum sums nearly orthogonal updates of 8 devices, which
# takes larger steps than averaging: is its gain a learning rate's?
CONTROLS: dict[str, ArmSpec] = {
    "O0 lr x0.5": ArmSpec(learning_rate_scale=0.5),
    "O0 lr x2": ArmSpec(learning_rate_scale=2.0),
    "O0 lr x4": ArmSpec(learning_rate_scale=4.0),
}


@dataclasses.dataclass
class Arm:
    """One arm, built: ``init(seed) -> state``, ``step``, ``predict``."""

    name: str
    init: Callable[[int], Any]
    step: Callable[[Any, Any], Any]
    predict: Callable[[Any, Any], Any]
    train_step: Any = None  # its boostax.TrainStep (None: plain Optax)
    compile_seconds: float = 0.0
    data_parallel: bool = False
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def compile_wait(self) -> float:
        if self.train_step is None:
            return self.compile_seconds
        return self.train_step.compile_wait_seconds


def plain_arm(workload: lm.Workload) -> Arm:
    """The hand-written NNX + Optax step, compiled ahead of time."""
    plain = lm.plain_step(workload.model(0), workload.optimizer())
    arm = Arm(PLAIN, lambda seed: plain.init(workload.model(seed)), None, None)
    arm.predict = plain.predict
    batch = next(workload.batches(0))
    start = time.perf_counter()
    arm.step = plain.step.lower(arm.init(0), batch).compile()
    arm.compile_seconds = time.perf_counter() - start
    return arm


def _updates(workload: lm.Workload, spec: ArmSpec) -> int:
    """Optimizer updates in the budget (fewer with accumulation)."""
    sections = {
        name: keys
        for name, keys in (spec.config or {}).items()
        if name != "seq_len_warmup"  # its total_steps is set from these
    }
    config = boostax.boost_config(spec.level, sections)
    if config.is_enabled("grad_accumulation"):
        return workload.steps // config.grad_accumulation.grad_accumulation_step
    return workload.steps


def boost_arm(
    name: str, spec: ArmSpec, workload: lm.Workload, mesh=None
) -> Arm:
    """`boostax.auto_boost` as `spec` says (see `ArmSpec`)."""
    config = {key: dict(value) for key, value in (spec.config or {}).items()}
    if config.get("seq_len_warmup", {}).get("enabled"):
        config["seq_len_warmup"]["total_steps"] = _updates(workload, spec)
    enabled = boostax.boost_config(spec.level, config).is_enabled
    # An arm that freezes names the section: in mode "auto" the level
    # freezes nothing on this model (it has no BatchNorm).
    if enabled("grad_freeze") and "grad_freeze" in config:
        section = config["grad_freeze"]
        section["total_steps"] = workload.steps
        section.setdefault("param_groups", workload.param_groups)
    if enabled("adasum"):
        config["common"] = {"device_number": 1}  # each device a node
    optimizer = dataclasses.replace(
        workload,
        learning_rate=workload.learning_rate * spec.learning_rate_scale,
    ).optimizer(_updates(workload, spec), muon=spec.muon)
    if spec.centralize:
        # Each kernel over its layer's fan-in (attention projections by
        # `in`, the output projection by (heads, head_dim), no embedding).
        optimizer = boostax.with_gradient_centralization(
            optimizer,
            axes=boostax.gradient_centralization_axes(
                workload.model(0), workload.sample_inputs
            ),
        )
    notes: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_step = boostax.auto_boost(
            spec.level,
            config,
            optimizer=optimizer,
            model=workload.model(0),
            loss=models.cross_entropy,
            sample_inputs=workload.sample_inputs,
            mesh=mesh if spec.mesh else None,
            **spec.options,
        )
    if caught:  # what boostax says of this model (LessBN: no BatchNorm)
        notes["warnings"] = [str(w.message) for w in caught]
    if train_step.less_bn_report is not None:  # the step's own, traced once
        notes["less_bn_report"] = str(train_step.less_bn_report)
    return Arm(
        name,
        lambda seed: train_step.init(workload.model(seed)),
        train_step,
        train_step.predict,
        train_step=train_step,
        data_parallel=spec.mesh,
        notes=notes,
    )


def centralized_leaves(workload: lm.Workload) -> dict[str, Any]:
    """Which parameters MindSpore's centralization rules change here, each
    over the fan-in axes of its layer."""
    import flax.nnx as nnx

    model = workload.model(0)
    params = nnx.state(model, nnx.Param)
    mask = boostax.gradient_centralization_mask(
        params,
        axes=boostax.gradient_centralization_axes(
            model, workload.sample_inputs, params
        ),
    )
    names = [
        "/".join(str(getattr(k, "key", k)) for k in path)
        for path, on in jax.tree_util.tree_flatten_with_path(mask)[0]
        if on
    ]
    return {
        "count": len(names),
        "of": len(jax.tree.leaves(params)),
        "leaves": names,
    }


def freezing_groups(train_step) -> dict[str, Any] | None:
    """The first trainable leaf of each freeze depth, and the depths'
    shares of the sequence."""
    freezing = train_step.freezing
    if freezing is None:
        return None
    depths, counts = np.unique(freezing.sequence, return_counts=True)
    return {
        "groups": len(freezing.groups),
        "first_trained_leaf": [
            "/".join(map(str, group[0])) for group in freezing.groups
        ],
        "depth_share": {
            int(d): float(c / counts.sum())
            for d, c in zip(depths, counts, strict=True)
        },
    }


# --------------------------------------------------------------------------
# Training.


class DimReduce:
    """Plain Optax (the O0 step) for the first half of the budget, recording
    the weight trajectory, then `boostax.dim_reduce` in its PCA subspace.

    One DimReduce step is compiled (for the first seed's P); later seeds
    put their own P into its state, the step's only use of it.
    """

    def __init__(self, workload: lm.Workload, stage1: Arm, components: int):
        self.workload, self.stage1 = workload, stage1
        self.components = components
        self.train_step = None
        self.states: dict[int, Any] = {}  # seed -> DimReduce's first state
        self.pca_seconds: list[float] = []
        self.explained: list[float] = []

    def run(self, seed: int, target: float | None = None) -> lm.Run:
        w = self.workload
        start = int(w.steps * DIM_REDUCE_START)
        first = int(start * (1 - DIM_REDUCE_RECORD))
        every = max(1, (start - first) // DIM_REDUCE_SNAPSHOTS)
        trajectory = boostax.Trajectory((start - first) // every + 1)

        def record(step, state):
            if step > first and (step - first) % every == 0:
                trajectory.record(state.params)

        stage1 = lm.train(
            self.stage1.step,
            self.stage1.init(seed),
            w,
            seed=seed,
            predict=self.stage1.predict,
            steps=start,
            on_step=record,
        )
        clock = time.perf_counter()
        k = min(self.components, len(trajectory) - 1)
        matrix = boostax.pca_components(trajectory, k, seed=seed)
        self.pca_seconds.append(time.perf_counter() - clock)
        self.explained.append(
            float(boostax.explained_variance_ratio(trajectory, k).sum())
        )
        if self.train_step is None:
            self.train_step = boostax.make_train_step(
                boostax.dim_reduce(matrix),
                model=w.model(0),
                loss=models.cross_entropy,
            )
        ts = self.train_step
        state = ts.init(w.model(seed))
        state = state.replace(
            params=stage1.state.params,
            opt_state=state.opt_state._replace(
                pca_matrix=jax.numpy.asarray(matrix)
            ),
        )
        self.states[seed] = state
        stage2 = lm.train(ts, state, w, seed=seed, first_step=start)
        curve = stage1.curve + stage2.curve
        return lm.Run(
            curve,
            lm.steps_to(curve, target),
            stage1.seconds + stage2.seconds,
            stage2.state,
        )


def dim_reduce_arm(workload, stage1: Arm, components: int) -> Arm:
    runner = DimReduce(workload, stage1, components)
    arm = Arm(
        "DimReduce",
        lambda seed: runner.states[seed],
        None,
        None,
        data_parallel=False,
    )
    arm.runner = runner
    return arm


def train_arm(arm: Arm, workload: lm.Workload, seed: int) -> lm.Run:
    runner = getattr(arm, "runner", None)
    if runner is not None:
        run = runner.run(seed)
        arm.train_step = arm.step = runner.train_step
        arm.predict = runner.train_step.predict
        return run
    return lm.train(
        arm.step, arm.init(seed), workload, seed=seed, predict=arm.predict
    )


# --------------------------------------------------------------------------
# Step costs.


def step_costs(arms, workload, *, repetitions: int) -> dict[str, dict]:
    """Interleaved step times, each arm walking its whole sequence once,
    from its first step (its programs compiled beforehand).

    Each arm starts from seed 0's initial state and trains on one batch;
    ``repetitions`` samples of ``budget / repetitions`` steps each. Returns
    per arm its seconds per step (median sample), the ratio of its total
    time to plain Optax's (``ratio``: what the budget costs), and the
    median and quartiles of the per-repetition ratios.
    """
    steps = max(1, workload.steps // repetitions)
    batch = next(workload.batches(0))
    for arm in arms:
        # Every program compiled first (plain Optax's is, ahead of time),
        # so that no untimed warm-up call walks the sequence's first steps:
        # the timed samples cover steps 0 to the budget, the short early
        # lengths of a sequence-length warm-up and the freeze depths' share
        # included.
        if arm.train_step is not None:
            arm.train_step.compile_all(arm.init(0), batch)
    runs = {
        arm.name: _common.step_runner(arm.step, arm.init(0), batch, steps)
        for arm in arms
    }
    samples = boostax.measure.interleaved_timings(
        runs, repetitions=repetitions, steps=steps, warmup=False
    )
    reference = samples[arms[0].name]
    costs = {}
    for arm in arms:
        q1, median, q3 = speedup.ratio_quartiles(samples[arm.name], reference)
        costs[arm.name] = {
            "seconds": statistics.median(samples[arm.name]),
            "ratio": sum(samples[arm.name]) / sum(reference),
            "ratio_median": median,
            "ratio_q1": q1,
            "ratio_q3": q3,
            "samples": samples[arm.name],
        }
    return costs


# --------------------------------------------------------------------------
# Summary.


class Spread(NamedTuple):
    """Per-seed values: median, min, max of those present, misses."""

    median: float | None
    min: float | None
    max: float | None
    misses: int
    values: list


def spread(values) -> Spread:
    present = [v for v in values if v is not None]
    misses = len(values) - len(present)
    if not present:
        return Spread(None, None, None, misses, list(values))
    return Spread(
        statistics.median(present),
        min(present),
        max(present),
        misses,
        list(values),
    )


def pick_target(plain_runs, fraction: float) -> float:
    """Plain Optax's median validation loss at `fraction` of its budget."""
    losses = []
    for run in plain_runs:
        steps = [s for s, _ in run.curve]
        at = min(steps, key=lambda s: abs(s - fraction * steps[-1]))
        losses.append(dict(run.curve)[at])
    return statistics.median(losses)


def summarize(arm, runs, plain_runs, cost, report, target, plain) -> dict:
    steps = [lm.steps_to(r.curve, target) for r in runs]
    plain_steps = [lm.steps_to(r.curve, target) for r in plain_runs]
    ratio = cost["ratio"] if cost else None
    per_seed = [
        speedup.decompose(
            p,
            s,
            plain["seconds"],
            ratio or 1.0,
            plain["compile"],
            arm.compile_wait,
        )
        for p, s in zip(plain_steps, steps, strict=True)
    ]
    out = {
        "steps_to_target": spread(steps),
        "steps_ratio": spread([r["steps_ratio"] for r in per_seed]),
        "final_validation_loss": spread([r.final_loss for r in runs]),
        "step_cost": None
        if cost is None
        else {k: v for k, v in cost.items() if k != "samples"},
        "step_time_samples": None if cost is None else cost["samples"],
        "speedup": None
        if arm.data_parallel or cost is None
        else spread([r["speedup"] for r in per_seed]),
        "flops_ratio": None if report is None else report.ratios["flops"],
        "bytes_ratio": None
        if report is None
        else report.ratios["bytes_accessed"],
        "compile_seconds": arm.compile_wait,
        "same_curve_as_plain": [
            r.curve == p.curve for r, p in zip(runs, plain_runs, strict=True)
        ],
        "params_bitwise_equal_to_plain": [
            _common.bitwise_equal(r.state.params, p.state.params)
            for r, p in zip(runs, plain_runs, strict=True)
        ],
        "train_seconds": [r.seconds for r in runs],
        "notes": arm.notes,
    }
    if arm.data_parallel:
        out["notes"] = {
            **arm.notes,
            "wall_time": "simulated devices sharing the CPU: not judged",
        }
    return out


def _fmt(value, spec, none="-"):
    return none if value is None else format(value, spec)


def format_table(summary: dict, target: float) -> str:
    header = (
        f"{'arm':<19} {f'steps to {target:.3f}':>16} {'misses':>6} "
        f"{'x step time (IQR)':>19} {'x FLOPs':>7} {'x bytes':>7} "
        f"{'compile':>7} {'speed-up':>8} {'final loss':>10} {'bitwise':>7}"
    )
    lines = [header, "-" * len(header)]
    for name, s in summary.items():
        st = s["steps_to_target"]
        steps = (
            "-"
            if st.median is None
            else f"{st.median:g} ({st.min:g}-{st.max:g})"
        )
        cost = s["step_cost"]
        time_ratio = (
            "-"
            if cost is None
            else f"{cost['ratio']:.3f} ({cost['ratio_q1']:.2f}-"
            f"{cost['ratio_q3']:.2f})"
        )
        if name == PLAIN:
            time_ratio = "1"
        speed = s["speedup"]
        lines.append(
            f"{name:<19} {steps:>16} {st.misses:>6} {time_ratio:>19} "
            f"{_fmt(s['flops_ratio'], '.3f'):>7} "
            f"{_fmt(s['bytes_ratio'], '.3f'):>7} "
            f"{s['compile_seconds']:>6.1f}s "
            f"{_fmt(None if speed is None else speed.median, '.2f'):>8} "
            f"{s['final_validation_loss'].median:>10.4f} "
            f"{str(all(s['params_bitwise_equal_to_plain'])):>7}"
        )
    return "\n".join(lines)


def freezing_verdict(summary: dict) -> dict[str, Any]:
    """Which freezing schedule pays: median speed-up over plain > 1 with
    no missed seed."""
    verdict = {}
    for name, s in summary.items():
        if not name.startswith("freeze"):
            continue
        speed = s["speedup"]
        verdict[name] = {
            "speedup_median": speed.median,
            "misses": s["steps_to_target"].misses,
            "pays": speed.median is not None
            and speed.median > 1
            and s["steps_to_target"].misses == 0,
        }
    return verdict


# --------------------------------------------------------------------------


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__, "transformer.json", seeds=SEEDS, repetitions=10
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="training steps (default: the workload's, 500)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="AdamW's peak learning rate (default: the workload's)",
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        default=list(ARMS),
        choices=[*ARMS, *CONTROLS],
        help="arms beside plain Optax (default: all but the controls, "
        f"{', '.join(CONTROLS)})",
    )
    parser.add_argument(
        "--target-fraction",
        type=float,
        default=TARGET_FRACTION,
        help="target = plain's median validation loss at this fraction of "
        "its budget (default: %(default)s)",
    )
    parser.add_argument("--accelerator", default=None)
    args = _common.parse(parser, argv, seeds=1, repetitions=2)
    specs = {name: {**ARMS, **CONTROLS}[name] for name in args.arms}
    corpus = text.load_stdlib()
    workload = lm.Workload.quick(corpus) if args.quick else lm.Workload(corpus)
    if args.budget:
        workload = dataclasses.replace(workload, steps=args.budget)
    if args.learning_rate:
        workload = dataclasses.replace(
            workload, learning_rate=args.learning_rate
        )
    mesh = None
    if any(spec.mesh for spec in specs.values()):
        # Before the backend starts: 8 simulated CPU devices.
        mesh = speedup.data_parallel_mesh(8, workload.batch_size)
    source = corpus.source
    print(
        f"{workload.description}\ncorpus: Python {source.python}, "
        f"{source.files} files ({len(source.train_files)} train, "
        f"{len(source.validation_files)} validation), "
        f"{source.train_bytes} + {source.validation_bytes} bytes; "
        f"{args.seeds} seeds; arms: {', '.join(specs)}",
        flush=True,
    )
    plain = plain_arm(workload)
    arms = [plain]
    for name, spec in specs.items():
        if spec.dim_reduce:
            stage1 = boost_arm("O0 (stage 1)", ArmSpec(), workload)
            components = 4 if args.quick else DIM_REDUCE_COMPONENTS
            arms.append(dim_reduce_arm(workload, stage1, components))
        else:
            arms.append(boost_arm(name, spec, workload, mesh))
    runs: dict[str, list[lm.Run]] = {arm.name: [] for arm in arms}
    for seed in range(args.seeds):
        for arm in arms if seed % 2 == 0 else reversed(arms):
            clock = time.perf_counter()
            run = train_arm(arm, workload, seed)
            runs[arm.name].append(run)
            print(
                f"seed {seed} {arm.name:<19} final validation loss "
                f"{run.final_loss:.4f} ({time.perf_counter() - clock:.0f} s)",
                flush=True,
            )
    target = pick_target(runs[PLAIN], args.target_fraction)
    # The training is most of the run: kept before the measurements after it.
    _common.write_result(
        args.out,
        {
            "quick": args.quick,
            "complete": False,
            "target": target,
            "curves": {n: [r.curve for r in rs] for n, rs in runs.items()},
        },
    )
    single = [arm for arm in arms if not arm.data_parallel]
    costs = step_costs(single, workload, repetitions=args.repetitions)
    # Data-parallel arms are not timed: wall time on simulated devices that
    # share two cores says nothing, and under load their in-process
    # collectives can miss XLA's 40 s rendezvous timeout (a crash).
    batch = next(workload.batches(0))
    reports = {}
    for arm in arms[1:]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # said once, when built
            reports[arm.name] = boostax.measure.cost_report(
                arm.train_step,
                arm.init(0),
                batch,
                baseline=None if arm.data_parallel else plain.step,
                **(
                    {"accelerator": args.accelerator}
                    if args.accelerator
                    else {}
                ),
            )
    plain_cost = {
        "seconds": costs[PLAIN]["seconds"],
        "compile": plain.compile_seconds,
    }
    summary = {
        arm.name: summarize(
            arm,
            runs[arm.name],
            runs[PLAIN],
            costs.get(arm.name),
            reports.get(arm.name),
            target,
            plain_cost,
        )
        for arm in arms
    }
    for arm in arms:
        if arm.train_step is not None:
            groups = freezing_groups(arm.train_step)
            if groups:
                summary[arm.name]["freezing"] = groups
    dim_reduce = next((a for a in arms if hasattr(a, "runner")), None)
    if dim_reduce is not None:
        summary["DimReduce"]["notes"] = {
            "start_step": int(workload.steps * DIM_REDUCE_START),
            "components": dim_reduce.runner.components,
            "explained_variance": dim_reduce.runner.explained,
            "pca_seconds": dim_reduce.runner.pca_seconds,
        }
    print(
        f"\ntarget: validation loss {target:.4f} (plain's median at "
        f"{args.target_fraction:.0%} of {workload.steps} steps), evaluated "
        f"every {workload.eval_every} steps"
    )
    print(format_table(summary, target))
    verdict = freezing_verdict(summary)
    for name, v in verdict.items():
        print(
            f"{name}: {'pays' if v['pays'] else 'does not pay'} "
            f"(median speed-up {_fmt(v['speedup_median'], '.2f')}, "
            f"{v['misses']} missed)"
        )
    for arm in arms:
        for warning in arm.notes.get("warnings", []):
            print(f"{arm.name}: boostax warns: {warning}")
    result = {
        "quick": args.quick,
        "complete": True,
        "workload": workload.description,
        "corpus": source._asdict(),
        "budget_steps": workload.steps,
        "eval_every": workload.eval_every,
        "seeds": list(range(args.seeds)),
        "target": target,
        "target_fraction": args.target_fraction,
        "timing": {
            "repetitions": args.repetitions,
            "steps_per_repetition": max(1, workload.steps // args.repetitions),
        },
        "centralized_leaves": centralized_leaves(workload),
        "freezing_verdict": verdict,
        "summary": summary,
        "cost_reports": {n: r.as_dict() for n, r in reports.items()},
        "curves": {name: [r.curve for r in rs] for name, rs in runs.items()},
    }
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
