# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Validation loss against training time over budgets, on a transformer.

The budget protocol of the ResNets (`boostax.examples.budgets`,
``benchmarks/speedup.py --budgets``) on a byte-level language model: every
arm trains at 1/4, 1/2, 1 and 1.5x a full budget with AdamW's warm-up (5%)
+ cosine stretched to each, 3 seeds per budget and 5 at the full one; its
final validation loss (lower is better) against its time gives a curve,
and the speed-up is the time plain Optax needs for its own full-budget loss
(median over seeds) over the time the arm's curve needs to reach it (per
seed, interpolated; past 1x where the arm is slower; "not reached" if even
1.5x misses). Time is steps x the interleaved step-cost ratio, each arm
walking its whole largest-budget sequence against plain Optax
(``benchmarks/transformer.py``'s `step_costs`); the compile wait is added
in a second column.

The workload (`workload`): the ``NNXTransformer`` of the transformer
benchmark, sized for this protocol on two CPU cores: context 128 (where
sequence-length warm-up has room), 4 blocks of width 128 (4 heads), batch
32, 800 steps at full budget (about 3.5 minutes for plain Optax on 2 quiet
cores, 0.26 s a step; 3.3 M training bytes, about one pass over the
training split). The corpus is the standard library's top-level ``*.py``
files read whole, every 5th file held out: 3.6 MB to train on, 1.1 MB of
validation, all of it evaluated (tiled into 128-byte windows, 8.7 k of
them) once at the end of each run.

Noise, reported next to every gap (``noise``): the standard error of the
mean validation loss over windows (and over blocks of 64 consecutive
windows, which allows for the correlation of neighbouring windows), the
spread of plain Optax's full-budget loss over its 5 seeds, and per arm the
standard error of its per-window loss difference from plain Optax of the
same seed (paired: the gap's own noise on this validation set).

Arms (`ARMS`): plain Optax, O1 (mode "auto": on this model, which has no
BatchNorm, it switches neither LessBN nor freezing on, so it trains plain
Optax's step), MindSpore's O1 (mode "manual", both on), each algorithm
alone (centralization, LessBN, MindSpore's and progressive freezing,
accumulation, a dynamic loss scale) and `boostax.text_recipe`: since
2026-12-06 sequence-length warm-up (Composer's defaults) alone, the "seq
warm-up" arm bit for bit, so that arm runs only when named (`VARIANTS`).
The text recipe before, centralization with Composer's warm-up, is
"centralization + seq warm-up" (run when named). The runs of both are in
``results/transformer_budgets.json``. AdaSum (8 simulated devices sharing
two cores: its wall time is not judged) and DimReduce (two stages) are in
``benchmarks/transformer.py`` only.

Variants of sequence-length warm-up tried (`VARIANTS`, run when named): its
paper (Li, Zhang and He 2022, "The Stability-Efficiency Dilemma") finds its
gain in stability, a larger learning rate that diverges or hurts without
it; so "plain lr x2" (plain Optax at peak 1.2e-2) against "seq warm-up lr
x2" (the warm-up at 1.2e-2); "seq warm-up step 32" (lengths 32, 64, 96, 128:
4 programs to compile instead of 16) and "seq warm-up 0.15" (over the first
15% of the updates instead of 30%: fewer short, cheap steps, fewer bytes
lost). One seed at the full budget, plain's runs reused:

    python benchmarks/transformer_budgets.py --arms "plain lr x2" \
        "seq warm-up lr x2" "seq warm-up step 32" "seq warm-up 0.15" \
        --budget-fractions 1 --seeds 1 --full-budget-seeds 1 \
        --reuse-plain benchmarks/results/transformer_budgets.json \
        --out benchmarks/results/transformer_budgets_variants.json  # ~1 h

Methods that buy loss per step, tried the same way (`VARIANTS`): "Muon"
(Optax's `optax.contrib.muon` in place of AdamW, at the same peak rate and
schedule: `lm.Workload.optimizer`'s ``muon``), "seq warm-up + Muon", and
"seq warm-up + EMA 0.98" (an average of the weights, evaluated):

    python benchmarks/transformer_budgets.py --arms Muon \
        "seq warm-up + Muon" "seq warm-up + EMA 0.98" \
        --budget-fractions 1 --seeds 1 --full-budget-seeds 1 \
        --reuse-plain benchmarks/results/transformer_budgets.json \
        --out benchmarks/results/transformer_budgets_variants2.json

Full runs on two quiet cores, each about 50 minutes an arm (training:
11.75 full budgets an arm; timing: 1.5; evaluation: 17 passes over 1.1 MB),
cold compiles (the compile column). Training is deterministic, so a run
can be done in parts: ``--reuse`` takes every arm's runs found in earlier
results (and their per-window losses, for the noise) and trains only the
missing budgets and seeds; a run cut short resumes from its
``.partial.json``, written after every run it trains (e.g. the runs below
extended to 3 seeds, 5 at the full budget, with ``--reuse
benchmarks/results/transformer_budgets.json``). ``--train-only`` stops
there, before the step costs: one arm a process, each adding its runs to
the partial file, timed together at the end by ``--reuse`` of that file on
a quiet machine. Plain Optax's runs are reused by later processes:

    python benchmarks/transformer_budgets.py --no-compilation-cache \
        --arms O1 "centralization + seq warm-up" "seq warm-up"  # ~3.5 h
    python benchmarks/transformer_budgets.py --no-compilation-cache \
        --arms centralization "LessBN (O1)" "freeze MindSpore" \
        "freeze progressive" "accumulation x4" "dynamic loss scale" \
        --reuse-plain benchmarks/results/transformer_budgets.json \
        --out benchmarks/results/transformer_budgets_algorithms.json  # ~5 h
    # or in parts, one arm a process (the first with --reuse-plain), then
    # the step costs of them all:
    python benchmarks/transformer_budgets.py --no-compilation-cache \
        --train-only --arms centralization \
        --reuse benchmarks/results/transformer_budgets_algorithms.partial.json \
        --out benchmarks/results/transformer_budgets_algorithms.json
    python benchmarks/transformer_budgets.py --arms O1 centralization \
        --reuse benchmarks/results/transformer_budgets_algorithms.partial.json \
        --out benchmarks/results/transformer_budgets_algorithms.json
    python benchmarks/transformer_budgets.py \
        --retime benchmarks/results/transformer_budgets.json  # times only
    python benchmarks/transformer_budgets.py --quick       # smoke test

``--retime`` trains nothing: it reads an earlier result's runs (their
losses do not depend on the machine) and measures the step costs again,
for a result whose timing ran on a loaded machine.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import _common
import numpy as np
import transformer

import boostax
from boostax.examples import budgets, schedules, text
from boostax.examples import language_model as lm

PLAIN = transformer.PLAIN
FULL_STEPS = 800
# The y axis of the figure: this many nats above plain's full-budget loss.
PLOT_SPAN = 0.3
# Blocks of consecutive validation windows for the batch-means standard
# error (64 windows of 128 bytes: 8 KB, most of a file).
NOISE_BLOCK = 64
RESULT = "transformer_budgets.json"


def workload(*, quick: bool = False) -> lm.Workload:
    """The transformer, its corpus and its full budget (see the module).

    Sized on two CPU cores (plain Optax; the machine was shared by other
    jobs, so these are rough): width 128 x 4 blocks at batch 32 took 0.26
    s a step at load 0.5 (0.54 s at load 4-5), 0.88 M parameters; 6
    blocks or width 192 at batch 16 took about as long for half the bytes
    a step. 800 steps keep plain's full budget near 3.5 minutes. Peak
    learning rate: at 200 steps (seed 0) 3e-3, 6e-3 and 1.2e-2 ended at
    2.392, 2.397 and 2.532 nats; 6e-3, half the rate that already hurts.
    Evaluating the 1.1 MB validation split takes about 35 s loaded (about
    90 steps' worth); it is not part of any arm's time.
    """
    if quick:
        corpus = text.load_stdlib()  # 32 KB a file: a fast smoke test
        return dataclasses.replace(
            lm.Workload.quick(corpus),
            # Half of 24 steps still spans sequence-length warm-up's three
            # length increments (context 32) within its first 30%.
            steps=24,
            warmup_steps=None,
            warmup_fraction=schedules.WARMUP_FRACTION,
            validation_windows=None,
        )
    corpus = text.load_stdlib(max_file_bytes=None, validation_every=5)
    return lm.Workload(
        corpus,
        context=128,
        d_model=128,
        num_heads=4,
        num_blocks=4,
        batch_size=32,
        steps=FULL_STEPS,
        learning_rate=6e-3,
        warmup_steps=None,
        warmup_fraction=schedules.WARMUP_FRACTION,
        validation_windows=None,
    )


# --------------------------------------------------------------------------
# The arms.

_ONLY = {"mode": "manual", "less_bn": False, "grad_freeze": False}
# Composer's defaults (duration 0.3, lengths from 8 by 8).
_SEQ_WARMUP = transformer.ARMS["seq-len warm-up"]


def _seq_warmup(
    learning_rate_scale: float = 1.0, **section: Any
) -> transformer.ArmSpec:
    """Sequence-length warm-up with `section`'s keys over Composer's
    defaults, at the peak learning rate times `learning_rate_scale`."""
    return dataclasses.replace(
        _SEQ_WARMUP,
        config={
            "seq_len_warmup": {
                **_SEQ_WARMUP.config["seq_len_warmup"],
                **section,
            }
        },
        learning_rate_scale=learning_rate_scale,
    )


#: ``name: spec`` or ``name: spec(budget steps)``; the algorithms alone are
#: `benchmarks/transformer.py`'s arms.
ARMS: dict[str, transformer.ArmSpec | Callable[[int], Any]] = {
    **{
        name: transformer.ARMS[name]
        for name in (
            "O1",
            "MindSpore's O1",
            "centralization",
            "LessBN (O1)",
            "freeze MindSpore",
            "freeze progressive",
            "accumulation x4",
            "dynamic loss scale",
        )
    },
    "seq warm-up": _SEQ_WARMUP,
    # Its `seq_len_warmup.total_steps` is set to the budget's updates.
    "text recipe": lambda steps: transformer.ArmSpec(
        "O1", boostax.text_recipe(total_steps=steps)
    ),
    # The text recipe until 2026-12-06 (its runs in
    # results/transformer_budgets.json): LessBN's centralization by layer
    # (no FN head) with Composer's warm-up.
    "centralization + seq warm-up": transformer.ArmSpec(
        "O1",
        {
            "boost": {**_ONLY, "less_bn": True},
            "less_bn": {"fn_flag": False, "gc_flag": True},
            "seq_len_warmup": {"enabled": True},
        },
    ),
    # Variants of sequence-length warm-up (`VARIANTS`, module docstring):
    # its paper's gain is stability at a larger rate, so plain at 2x too.
    "plain lr x2": transformer.CONTROLS["O0 lr x2"],
    "seq warm-up lr x2": _seq_warmup(learning_rate_scale=2.0),
    "seq warm-up step 32": _seq_warmup(min_seq_length=32, step_size=32),
    "seq warm-up 0.15": _seq_warmup(duration=0.15),
    # Methods that buy loss per step, tried on top (`VARIANTS`): Optax's
    # Muon for AdamW, alone and with the warm-up; an EMA of the weights.
    "Muon": transformer.ArmSpec(muon=True),
    "seq warm-up + Muon": dataclasses.replace(_SEQ_WARMUP, muon=True),
    "seq warm-up + EMA 0.98": dataclasses.replace(
        _SEQ_WARMUP,
        config={
            **_SEQ_WARMUP.config,
            "weight_averaging": {"enabled": True, "decay": 0.98},
        },
    ),
}
#: Arms run only when named (``--arms``), not by default: one-seed probes,
#: the text recipe that was (its runs are in the results), and "seq
#: warm-up", which the text recipe now is, bit for bit (a default run would
#: train it twice).
VARIANTS = (
    "seq warm-up",
    "centralization + seq warm-up",
    "plain lr x2",
    "seq warm-up lr x2",
    "seq warm-up step 32",
    "seq warm-up 0.15",
    "Muon",
    "seq warm-up + Muon",
    "seq warm-up + EMA 0.98",
)


def maker(name: str) -> budgets.Maker:
    """Builds arm `name` for a budget's workload."""
    if name == PLAIN:
        return budgets.Maker(PLAIN, transformer.plain_arm)
    spec = ARMS[name]

    def make(budget_workload):
        chosen = spec(budget_workload.steps) if callable(spec) else spec
        return transformer.boost_arm(name, chosen, budget_workload)

    return budgets.Maker(name, make)


# --------------------------------------------------------------------------
# Training and timing (the budgets protocol's `Protocol`).


def scale(full: lm.Workload, fraction: float) -> lm.Workload:
    """`full` trained for `fraction` of its steps, schedule stretched."""
    return dataclasses.replace(full, steps=max(1, round(fraction * full.steps)))


class Recorder:
    """Trains runs for `budgets.measure`, keeping each run's per-window
    validation losses (`losses`) for the noise estimates.

    With `partial` (a path), every run trained so far is written there
    (``runs`` as in a result, and the full budget's per-window losses
    beside it) after each run, so a run cut short can be resumed with
    ``--reuse``: the protocol takes hours on two cores.
    """

    def __init__(self, partial: str | None = None):
        self.losses: dict[tuple[str, float, int], np.ndarray] = {}
        self.partial = partial
        self.trained: dict[str, list[budgets.BudgetRun]] = {}

    def train(self, arm, workload: lm.Workload, fraction: float, seed: int):
        """Trains the whole budget, evaluating once at the end."""
        # An arm's first run waits for its compilation (plain Optax's
        # compiles when built); later runs of the same arm do not.
        before = getattr(arm, "recorded_wait", 0.0)
        state = arm.init(seed)
        for batch in workload.batches(seed):
            state, _ = arm.step(state, batch)
        losses = lm.validation_losses(arm.predict, state, workload)
        self.losses[(arm.name, fraction, seed)] = losses
        arm.recorded_wait = arm.compile_wait
        run = budgets.BudgetRun(
            fraction,
            seed,
            workload.steps,
            float(losses.mean()),
            None,
            arm.compile_wait - before,
        )
        self.trained.setdefault(arm.name, []).append(run)
        if self.partial:
            self.write(self.partial, self.trained)
        return run

    def write(self, path: str, runs: dict) -> None:
        """`runs` as a result's ``runs`` at `path`, and the full budget's
        per-window losses beside it (`write_window_losses`)."""
        with open(path, "w") as f:
            json.dump(
                {
                    "runs": {
                        name: [dataclasses.asdict(r) for r in arm_runs]
                        for name, arm_runs in runs.items()
                    }
                },
                f,
                indent=1,
            )
        self.write_window_losses(path)

    def write_window_losses(self, result: str) -> None:
        """Every arm's full-budget per-window losses (``arm/seed`` keys)
        beside `result`, for the noise of a later ``--reuse``."""
        np.savez(
            _window_losses_path(result),
            **{
                f"{name}/{seed}": losses
                for (name, fraction, seed), losses in self.losses.items()
                if fraction == budgets.FULL
            },
        )

    def remove_partial(self) -> None:
        """Deletes the partial files (the finished result holds them)."""
        for path in (self.partial, _window_losses_path(self.partial)):
            if os.path.exists(path):
                os.remove(path)


def step_costs(
    arms,
    workload: lm.Workload,
    *,
    repetitions: int,
    steps: int,
    programs: dict | None = None,
):
    """Plain Optax's seconds per step and each arm's ratio to it, each arm
    walking `repetitions` x `steps` steps of its sequence, interleaved
    (``transformer.step_costs``). `programs` (`budgets.Protocol`) must be
    ``{None}`` per arm: these runs record no depths (one ratio covers the
    sequence)."""
    if programs is not None and any(
        set(ran) != {None} for ran in programs.values()
    ):
        raise ValueError(
            "The text protocol times each arm's whole sequence: its runs "
            f"record no depths, so `programs` must be {{None}} per arm, got "
            f"{programs}."
        )
    walk = dataclasses.replace(workload, steps=repetitions * steps)
    costs = transformer.step_costs(arms, walk, repetitions=repetitions)
    return costs[PLAIN]["seconds"], {
        name: {None: cost["ratio"]} for name, cost in costs.items()
    }


# --------------------------------------------------------------------------
# Noise and the compile column.


def standard_error(values: np.ndarray, block: int = 1) -> float:
    """Standard error of the mean of `values`, from the means of blocks of
    `block` consecutive values (batch means: neighbours may correlate)."""
    count = len(values) // block
    means = values[: count * block].reshape(count, block).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(count))


def noise(
    recorder: Recorder,
    summary: dict,
    names,
    earlier: dict[tuple[str, int], tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """The noise of the validation loss, next to each arm's full-budget gap
    (`module docstring`); a reused run whose per-window losses were not
    kept takes its gap from `earlier` (`_earlier_gaps`)."""
    full = budgets.FULL
    plain = {
        seed: losses
        for (arm, fraction, seed), losses in recorder.losses.items()
        if arm == PLAIN and fraction == full
    }
    finals = [float(v.mean()) for v in plain.values()]
    first = plain[min(plain)]
    out: dict[str, Any] = {
        "windows": len(first),
        "window_sem": standard_error(first),
        "block_sem": standard_error(first, NOISE_BLOCK),
        "block_windows": NOISE_BLOCK,
        "plain_seed_std": statistics.stdev(finals) if len(finals) > 1 else None,
        "plain_seed_range": [min(finals), max(finals)],
        "arms": {},
    }
    for name in names:
        seeds, gaps, sems = [], [], []
        for seed, reference in sorted(plain.items()):
            losses = recorder.losses.get((name, full, seed))
            if losses is not None:
                difference = losses - reference
                gap = float(difference.mean())
                sem = standard_error(difference, NOISE_BLOCK)
            elif (name, seed) in (earlier or {}):
                gap, sem = earlier[(name, seed)]
            else:
                continue
            seeds.append(seed)
            gaps.append(gap)
            sems.append(sem)
        out["arms"][name] = {
            "seeds": seeds,
            "full_budget_gap": gaps,
            "gap_block_sem": sems,
            "gap_median": statistics.median(gaps),
            "gap_block_sem_median": statistics.median(sems),
            "full_budget_loss_delta": summary["arms"][name][
                "full_budget_accuracy_delta"
            ],
        }
    return out


def with_compile(summary: dict, runs: dict) -> dict[str, Any]:
    """Per arm and seed: the speed-up with each one's compile wait added to
    its time: the longest wait of its runs (each budget builds the arm
    anew; the first, on a cold cache, compiles everything)."""
    waits = {
        name: max(r.compile_wait for r in arm_runs)
        for name, arm_runs in runs.items()
    }
    reference = summary["plain_seconds_to_target"]
    out = {}
    for name, arm in summary["arms"].items():
        values = {
            seed: None
            if value is None
            else (reference + waits[PLAIN]) / (reference / value + waits[name])
            for seed, value in arm["speedup"].items()
        }
        out[name] = {
            "compile_wait": waits[name],
            "speedup": values,
            "speedup_median": budgets._median(values.values()),
        }
    return out


def format_noise(noise_: dict, compile_: dict) -> str:
    lines = [
        f"validation: {noise_['windows']} windows; standard error of the "
        f"mean loss {noise_['window_sem']:.4f} over windows, "
        f"{noise_['block_sem']:.4f} over blocks of "
        f"{noise_['block_windows']}; plain's full-budget seeds: std "
        + (
            "-"
            if noise_["plain_seed_std"] is None
            else f"{noise_['plain_seed_std']:.4f}"
        )
        + ", range {:.4f}-{:.4f}".format(*noise_["plain_seed_range"]),
        f"{'arm':<24} {'loss gap at 1x':>14} {'+- paired SE':>12} "
        f"{'speed-up w/ compile':>19}",
    ]
    for name, arm in noise_["arms"].items():
        speed = compile_[name]["speedup_median"]
        lines.append(
            f"{name:<24} {arm['gap_median']:>+14.4f} "
            f"{arm['gap_block_sem_median']:>12.4f} "
            f"{'-' if speed is None else f'{speed:.2f}':>19}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------


def _window_losses_path(result: str) -> str:
    return os.path.splitext(result)[0] + "_window_losses.npz"


def _load_window_losses(
    recorder: Recorder, result: str, arms: tuple[str, ...] | None = None
) -> None:
    """The full budget's per-window losses stored beside `result` (``arm/seed``
    keys): every arm's, or those of `arms` (the arms whose runs are
    reused: another arm's losses would enter its noise without its run)."""
    with np.load(_window_losses_path(result)) as stored:
        for key in stored.files:
            name, seed = key.rsplit("/", 1)
            if arms is None or name in arms:
                recorder.losses[(name, budgets.FULL, int(seed))] = stored[key]


def _earlier_gaps(result: dict) -> dict[tuple[str, int], tuple[float, float]]:
    """``{(arm, seed): (gap, paired SE)}`` of an earlier result's noise, for
    reused runs whose per-window losses were not kept (results written
    before they were list no seeds: theirs are 0, 1, ...)."""
    out = {}
    for name, arm in ((result.get("noise") or {}).get("arms") or {}).items():
        gaps = arm["full_budget_gap"]
        seeds = arm.get("seeds", range(len(gaps)))
        for seed, gap, sem in zip(
            seeds, gaps, arm["gap_block_sem"], strict=True
        ):
            out[(name, seed)] = (gap, sem)
    return out


class _TrainingDone(Exception):
    """Raised where the step costs would be measured (``--train-only``)."""


def _stop_after_training(*args, **kwargs):
    """The step costs of ``--train-only``: none, every run is trained and
    in the partial file."""
    raise _TrainingDone


def _retimed_arguments(args) -> dict:
    """The earlier result `args.retime` names; its budgets, seeds, full
    budget and arms set on `args` (the runs are reused only where every one
    of them matches)."""
    with open(args.retime) as f:
        earlier = json.load(f)
    runs = earlier["runs"]
    plain_runs = runs[PLAIN]
    args.budget_fractions = earlier["fractions"]
    args.budget_steps = earlier["full_budget_steps"]
    args.seeds = sum(
        r["fraction"] == plain_runs[0]["fraction"] for r in plain_runs
    )
    args.full_budget_seeds = sum(
        r["fraction"] == budgets.FULL for r in plain_runs
    )
    args.arms = [name for name in runs if name != PLAIN]
    return earlier


def main(argv=None) -> dict:
    parser = _common.argument_parser(__doc__, RESULT, seeds=3, repetitions=6)
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=list(ARMS),
        default=None,
        help="arms beside plain Optax (default: all but `VARIANTS`; "
        "--quick: O1 and the text recipe)",
    )
    parser.add_argument(
        "--budget-fractions",
        type=float,
        nargs="+",
        default=list(budgets.BUDGETS),
        help="fractions of the full budget; must include 1 (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--full-budget-seeds",
        type=int,
        default=5,
        help="seeds at the full budget (--seeds at the others)",
    )
    parser.add_argument(
        "--budget-steps",
        type=int,
        default=None,
        help=f"the full budget in steps (default: {FULL_STEPS})",
    )
    parser.add_argument(
        "--reuse-plain",
        metavar="JSON",
        help="take plain Optax's runs (deterministic) from an earlier "
        "result of this benchmark instead of training them again; their "
        "time comes from this run's step costs, their per-window losses "
        "(for the noise) from the .npz written beside it",
    )
    parser.add_argument(
        "--reuse",
        metavar="JSON",
        nargs="+",
        default=[],
        help="take every arm's runs (deterministic) found in these results "
        "of this benchmark (or their .partial.json, written after each "
        "run) and train only the missing budgets and seeds; their time "
        "comes from this run's step costs",
    )
    parser.add_argument(
        "--retime",
        metavar="JSON",
        help="take every arm's runs (deterministic), budgets, seeds and "
        "noise from an earlier result of this benchmark; train nothing and "
        "time the step costs again (e.g. on a quiet machine)",
    )
    parser.add_argument(
        "--train-only",
        action="store_true",
        help="train the missing runs into the .partial.json beside --out "
        "and stop there, without step costs or a result: a protocol run in "
        "parts (one arm a process, machines shared), timed once at the end "
        "with --reuse of the partial files on a quiet machine",
    )
    args = _common.parse(parser, argv, seeds=1, repetitions=2)
    if args.train_only and args.retime:
        raise ValueError(
            "--train-only trains and does not time, --retime times and "
            "does not train: give one of them."
        )
    if sum(map(bool, (args.retime, args.reuse_plain, args.reuse))) > 1:
        raise ValueError(
            "--retime reuses every arm's runs and trains nothing, --reuse "
            "every arm's runs it finds, --reuse-plain plain's only: give "
            "one of them."
        )
    if args.quick:
        args.full_budget_seeds = 2
        args.budget_fractions = [0.5, 1.0, 1.5]
    earlier = None
    if args.retime:
        earlier = _retimed_arguments(args)
    fractions = budgets.check_budgets(args.budget_fractions)
    names = args.arms or (
        ["O1", "text recipe"]
        if args.quick
        else [name for name in ARMS if name not in VARIANTS]
    )
    full = workload(quick=args.quick)
    if args.budget_steps:
        full = dataclasses.replace(full, steps=args.budget_steps)
    source = full.corpus.source
    windows = len(full.validation[0])
    print(
        f"{full.description}\ncorpus: Python {source.python}, "
        f"{source.files} files, {source.train_bytes} training bytes, "
        f"{source.validation_bytes} validation bytes ({windows} windows "
        f"of {full.context}); budgets {list(fractions)} x {full.steps} "
        f"steps; {args.seeds} seeds, {args.full_budget_seeds} at the full "
        f"budget; arms: {', '.join([PLAIN, *names])}",
        flush=True,
    )
    reuse = None
    recorder = Recorder(partial=os.path.splitext(args.out)[0] + ".partial.json")
    earlier_gaps: dict = {}
    if earlier is not None:
        reuse = budgets.runs_from_json(earlier["runs"])
        _load_window_losses(recorder, args.retime)
    if args.reuse_plain:
        with open(args.reuse_plain) as f:
            plain_runs = json.load(f)["runs"][PLAIN]
        reuse = budgets.runs_from_json({PLAIN: plain_runs})
        _load_window_losses(recorder, args.reuse_plain, arms=(PLAIN,))
    if args.reuse:
        reuse = {}
        for path in args.reuse:
            with open(path) as f:
                stored = json.load(f)
            for name, arm_runs in budgets.runs_from_json(
                stored["runs"]
            ).items():
                # A run found in several results (plain Optax's, kept by
                # each partial file) is the same run: taken once.
                known = {(r.fraction, r.seed) for r in reuse.get(name, [])}
                reuse.setdefault(name, []).extend(
                    r for r in arm_runs if (r.fraction, r.seed) not in known
                )
            _load_window_losses(recorder, path)
            earlier_gaps.update(_earlier_gaps(stored))
    if reuse:
        # The partial file keeps the reused runs too: it alone resumes.
        recorder.trained = {name: list(r) for name, r in reuse.items()}
    largest = scale(full, fractions[-1]).steps
    start = time.perf_counter()
    try:
        runs, summary = budgets.measure(
            [maker(PLAIN), *(maker(name) for name in names)],
            full,
            budgets=fractions,
            seeds=args.seeds,
            full_budget_seeds=args.full_budget_seeds,
            repetitions=args.repetitions,
            steps=math.ceil(largest / args.repetitions),
            progress=lambda line: print(line, flush=True),
            reuse=reuse,
            protocol=budgets.Protocol(
                scale,
                recorder.train,
                _stop_after_training if args.train_only else step_costs,
                budgets.LOSS,
            ),
        )
    except _TrainingDone:
        print(
            f"trained; every run so far is in {recorder.partial} (time "
            "them with --reuse on a quiet machine)",
            flush=True,
        )
        return {"runs": recorder.trained}
    print(budgets.format_summary(summary))
    if earlier is not None:
        noise_ = earlier["noise"]  # losses only: timing does not touch it
    elif any(key[0] == PLAIN for key in recorder.losses):
        noise_ = noise(recorder, summary, names, earlier_gaps)
    else:
        noise_ = None
    compile_ = with_compile(summary, runs)
    if noise_ is not None:
        print(format_noise(noise_, compile_))
    plot = os.path.splitext(args.out)[0] + ".png"
    budgets.plot(
        summary,
        plot,
        f"byte-level transformer: final validation loss vs time, schedule "
        f"stretched to each budget\n(medians and min-max over seeds; "
        f"{args.full_budget_seeds} at the full budget)",
        span=PLOT_SPAN,
    )
    print(f"wrote {plot}")
    result = {
        "benchmark": "transformer_budgets",
        "quick": args.quick,
        "workload": full.description,
        "corpus": {
            k: v
            for k, v in source._asdict().items()
            if k not in ("train_files", "validation_files")
        },
        "validation_windows": windows,
        "full_budget_steps": full.steps,
        "fractions": list(fractions),
        "plain_runs_reused_from": args.reuse_plain,
        "runs_reused_from": args.reuse,
        "retimed_from": args.retime,
        "wall_seconds": time.perf_counter() - start,
        "load_average_end": list(os.getloadavg()),
        "summary": summary,
        "noise": noise_,
        "with_compile": compile_,
        "plot": os.path.relpath(plot, os.path.dirname(__file__)),
        "runs": {
            name: [dataclasses.asdict(r) for r in arm_runs]
            for name, arm_runs in runs.items()
        },
    }
    _common.write_result(args.out, result)
    recorder.write_window_losses(args.out)
    recorder.remove_partial()
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
