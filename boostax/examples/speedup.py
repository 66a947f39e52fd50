# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A speed-up over plain Optax, taken apart so that noise cannot fake it.

Time to a target accuracy is the product of three things measured apart:

- **steps to target**: training steps until test accuracy first reaches the
  target, evaluated every 1/8 epoch or more often. It does not depend on
  the hardware, and a level that computes what plain Optax computes (O0)
  takes exactly as many steps, bit for bit.
- **step cost**: the steady-state time of one step as a ratio to plain
  Optax's, from interleaved repetitions (`boostax.measure.interleaved_timings`),
  with FLOPs and bytes-accessed ratios from `boostax.measure.cost_report` beside
  it.
- **compile**: how long training waited for compilation (with background
  compilation, only what training could not overlap), and the break-even:
  the training length, in plain steps, after which the level is ahead.

Then::

    speed-up              = (plain steps x plain step time)
                            / (level steps x level step time)
    speed-up with compile = (plain steps x plain step time + plain compile)
                            / (level steps x level step time + level wait)

The demo (one seed) and ``benchmarks/speedup.py`` (several seeds, two
workloads) both use this module.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import optax

import boostax
from boostax.examples import baseline, data, models, schedules, shapes

PLAIN = "plain optax"


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model, its data and how it trains.

    Attributes:
      name: short name.
      description: one line for tables.
      model: a Linen model taking ``train``.
      digits: the data (`data.load_digits`).
      batch_size: examples per step.
      learning_rate: of SGD with momentum 0.9.
      target: test accuracy whose first crossing ends the count of steps.
      epochs: the training budget (and the freezing sequence's length).
      crop_padding: `data.random_crop` augmentation (0: none).
      param_groups: gradient freezing's groups (MindSpore's default 10).
      schedule: ``"constant"`` learning rate, or ``"cosine"``: a warm-up
        and cosine decay stretched over the budget (`budgets`).
      plateau_epochs: the full budget of the budget protocol: where plain
        Optax's final accuracy (warm-up + cosine) stops improving.
    """

    name: str
    description: str
    model: Any
    digits: data.Digits
    batch_size: int
    learning_rate: float
    target: float
    epochs: int
    crop_padding: int = 0
    param_groups: int = 10
    schedule: str = "constant"
    plateau_epochs: int = 12

    @property
    def steps_per_epoch(self) -> int:
        return data.steps_per_epoch(len(self.digits.x_train), self.batch_size)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def eval_every(self) -> int:
        """Steps between evaluations: at most 1/8 epoch."""
        return max(1, self.steps_per_epoch // 8)

    def optimizer(self) -> optax.GradientTransformation:
        if self.schedule == "cosine":
            return schedules.scheduled_sgd(self.learning_rate, self.total_steps)
        return optax.sgd(self.learning_rate, momentum=0.9)

    def batches(self, seed: int, epoch: int):
        return data.batches(
            self.digits.x_train,
            self.digits.y_train,
            self.batch_size,
            seed=seed,
            epoch=epoch,
            crop_padding=self.crop_padding,
        )

    def variables(self, seed: int):
        """The model's initial variables for `seed`."""
        return self._init(jax.random.PRNGKey(seed), self.digits.x_train[:1])

    @functools.cached_property
    def _init(self):
        # One compiled init instead of many small eager operations (seconds
        # for a ResNet).
        return jax.jit(functools.partial(self.model.init, train=False))


def digits_workload(*, quick: bool = False, target: float = 0.97) -> Workload:
    """The example ResNet on the 8x8 digits (the demo's workload)."""
    model = (
        models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        if quick
        else models.ResNet()
    )
    return Workload(
        name="digits",
        description=f"ResNet{tuple(model.stage_sizes)} basic blocks, digits "
        "8x8x1, batch 64, SGD(0.05, momentum 0.9)",
        model=model,
        digits=data.load_digits(),
        batch_size=64,
        learning_rate=0.05,
        target=target,
        epochs=1 if quick else 15,
        param_groups=3 if quick else 10,
        plateau_epochs=2 if quick else 8,
    )


def digits32_workload(*, quick: bool = False, target: float = 0.95) -> Workload:
    """Bottleneck ResNet on the digits at CIFAR's shape, 32x32x3.

    The digits, resized to 32x32 and copied to three channels, with random
    4-pixel crops: real data that installs with scikit-learn, at the shape
    whose convolutions dominate a CIFAR ResNet's step (so the savings of
    LessBN and freezing show as they would there), and a harder task than
    the 8x8 digits (about 7 epochs to 95%).
    """
    model = models.BottleneckResNet(
        stage_sizes=(1, 1) if quick else (2, 2, 2),
        widths=(8, 16) if quick else (8, 16, 32),
    )
    return Workload(
        name="digits32",
        description=f"BottleneckResNet{tuple(model.stage_sizes)} widths "
        f"{tuple(model.widths)}, digits 32x32x3 + random crops, batch 32, "
        "SGD(0.05, momentum 0.9)",
        model=model,
        digits=data.load_digits(image_size=32, channels=3),
        batch_size=32,
        learning_rate=0.05,
        target=target,
        epochs=1 if quick else 20,
        crop_padding=4,
        param_groups=3 if quick else 10,
        # Plain Optax, warm-up + cosine (benchmarks/speedup.py --budgets
        # at 24 epochs): median test accuracy 99.33% at 12 epochs (3 seeds)
        # and at 24 (5 seeds), 3 errors of 450 -- plateaued by 12.
        plateau_epochs=2 if quick else 12,
    )


def shapes_workload(*, quick: bool = False, target: float = 0.8) -> Workload:
    """A basic-block BatchNorm ResNet on generated 20x20x3 shapes in clutter.

    `shapes.load_shapes`: ten shape classes at random position, scale,
    rotation and colour over random gradients with clutter and noise,
    3,000 training images (a fifth of them carved for validation by
    ``benchmarks/image_methods.py``) and 2,000 test images, all drawn
    independently (no download). Plain Optax is not saturated there
    (about 82% at its full budget, where the test set's sampling noise is
    0.9 point). Global average pooling before the classifier, so inputs of
    any size work (progressive resizing). Sized so that the whole
    image-methods protocol runs in well under an hour on two CPU cores.
    """
    model = models.ResNet(
        stage_sizes=(1, 1) if quick else (1, 1, 1),
        widths=(8, 16) if quick else (8, 16, 32),
    )
    config = shapes.ShapesConfig(
        train=400 if quick else 3000, test=200 if quick else 2000, size=20
    )
    return Workload(
        name="shapes",
        description=f"ResNet{tuple(model.stage_sizes)} basic blocks widths "
        f"{tuple(model.widths)}, shapes {config.size}x{config.size}x3 "
        f"({config.train} train, {config.test} test), batch 64, "
        "SGD(0.2, momentum 0.9)",
        model=model,
        digits=shapes.load_shapes(config),
        batch_size=64,
        learning_rate=0.2,
        target=target,
        epochs=1 if quick else 8,
        param_groups=3 if quick else 10,
        # Plain Optax, warm-up + cosine over 8 epochs of the 2,400 images
        # left after validation (296 steps): 81-83% test accuracy (2 seeds).
        plateau_epochs=1 if quick else 8,
    )


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "digits": digits_workload,
    "digits32": digits32_workload,
}
#: The image workloads of ``benchmarks/image_methods.py``.
IMAGE_WORKLOADS: dict[str, Callable[..., Workload]] = {
    "digits32": digits32_workload,
    "shapes": shapes_workload,
}


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


@dataclasses.dataclass
class Arm:
    """One way of training a workload: plain Optax or a boost level.

    Attributes:
      name: ``"plain optax"`` or the level (or a row name).
      init: ``init(seed) -> state``.
      step: ``step(state, batch) -> (state, metrics)``.
      predict: ``predict(state, inputs) -> logits``.
      train_step: the `boostax.TrainStep` of a level (``None`` for plain).
      compile_seconds: plain Optax's compile time (levels: read from
        `train_step`).
      data_parallel: whether it trains on a mesh (simulated devices on a
        CPU: its wall time is not judged).
    """

    name: str
    init: Callable[[int], Any]
    step: Callable[[Any, Any], Any]
    predict: Callable[[Any, Any], Any]
    train_step: Any = None
    compile_seconds: float = 0.0
    data_parallel: bool = False

    @property
    def compile_wait(self) -> float:
        """Seconds training has waited for compilation so far."""
        if self.train_step is None:
            return self.compile_seconds
        return self.train_step.compile_wait_seconds


def plain_arm(workload: Workload) -> Arm:
    """The hand-written Optax + Flax step, compiled ahead of time."""
    optimizer = workload.optimizer()
    step = baseline.make_plain_step(
        workload.model, optimizer, models.cross_entropy, train=True
    )
    predict = baseline.make_plain_predict(workload.model, train=False)
    arm = Arm(
        PLAIN,
        lambda seed: baseline.init_plain_state(
            workload.variables(seed), optimizer
        ),
        step,
        predict,
    )
    batch, state = next(workload.batches(0, 0)), arm.init(0)
    start = time.perf_counter()
    arm.step = step.lower(state, batch).compile()
    arm.compile_seconds = time.perf_counter() - start
    return arm


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


def level_arm(
    workload: Workload,
    level: str,
    config: dict | None = None,
    *,
    name: str | None = None,
    mesh=None,
) -> Arm:
    """`boostax.auto_boost` at `level`: its freezing sequence spans the
    workload's budget, AdaSum (if on) runs across every device of `mesh`."""
    config = dict(config or {})
    enabled = boostax.boost_config(level, config).is_enabled
    # Only the sections of the algorithms that are on (another would warn).
    if enabled("grad_freeze"):
        config["grad_freeze"] = {
            **config.get("grad_freeze", {}),
            "total_steps": workload.total_steps,
            "param_groups": workload.param_groups,
        }
    if enabled("adasum"):
        config["common"] = {"device_number": 1}
    data_parallel = mesh is not None and enabled("adasum")
    train_step = boostax.auto_boost(
        level,
        config,
        optimizer=workload.optimizer(),
        model=workload.model,
        loss=models.cross_entropy,
        sample_inputs=workload.digits.x_train[:1],
        mesh=mesh if data_parallel else None,
    )
    return Arm(
        name or level,
        lambda seed: train_step.init(workload.variables(seed)),
        train_step,
        train_step.predict,
        train_step=train_step,
        data_parallel=data_parallel,
    )


def fn_head_arm(
    workload: Workload,
    name: str,
    *,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
) -> Arm:
    """The workload's model with LessBN's FN head and every BatchNorm kept.

    Isolates the FN head (MindSpore's always comes with BatchNorm removal):
    the last dense layer becomes an FN head of initial scale `fn_scale`.
    """
    x = workload.digits.x_train[:1]
    report = boostax.less_bn_report(workload.model, x, fn_flag=True)
    head = tuple(report.fn_head.split("/"))
    model = boostax.LinenLessBN(
        workload.model,
        removed=(),
        fn_head=head,
        fn_scale=fn_scale,
        fn_log_scale=fn_log_scale,
    )
    train_step = boostax.make_train_step(
        workload.optimizer(), model=model, loss=models.cross_entropy
    )
    return Arm(
        name,
        lambda seed: train_step.init(
            model.convert_variables(workload.variables(seed))
        ),
        train_step,
        train_step.predict,
        train_step=train_step,
    )


@dataclasses.dataclass
class Run:
    """One training run of an arm from one seed.

    Attributes:
      steps_to_target: steps until the test accuracy first reached the
        target (``None``: not within the budget).
      evaluations: ``[(step, test accuracy)]``.
      final_accuracy: test accuracy at the end of the run.
      steps: steps trained.
      compile_wait: seconds the run waited for compilation.
      state: the final state.
    """

    steps_to_target: int | None
    evaluations: list[tuple[int, float]]
    final_accuracy: float
    steps: int
    compile_wait: float
    state: Any = None


def accuracy(arm: Arm, state, digits: data.Digits) -> float:
    return baseline.accuracy(
        lambda x: arm.predict(state, x), digits.x_test, digits.y_test
    )


def train_to_target(
    arm: Arm,
    workload: Workload,
    seed: int,
    *,
    full_budget: bool = False,
    evaluate: bool = True,
    progress: Callable[[int, float | None, float], None] | None = None,
) -> Run:
    """Trains `arm` from `seed`, evaluating every `Workload.eval_every` steps.

    Stops at the target unless `full_budget` (then trains every epoch).
    Without `evaluate`, trains the whole budget and evaluates once, at the
    end. `progress(steps, accuracy or None, compile wait so far)` is called
    after every step.
    """
    full_budget = full_budget or not evaluate
    state = arm.init(seed)
    wait_before = arm.compile_wait
    evaluations: list[tuple[int, float]] = []
    reached, steps = None, 0
    for epoch in range(workload.epochs):
        for batch in workload.batches(seed, epoch):
            state, _ = arm.step(state, batch)
            steps += 1
            value = None
            if evaluate and steps % workload.eval_every == 0:
                value = accuracy(arm, state, workload.digits)
                evaluations.append((steps, value))
                if reached is None and value >= workload.target:
                    reached = steps
            if progress is not None:
                progress(steps, value, arm.compile_wait - wait_before)
            if reached is not None and not full_budget:
                break
        if reached is not None and not full_budget:
            break
    final = (
        evaluations[-1][1]
        if evaluations and evaluations[-1][0] == steps
        else accuracy(arm, state, workload.digits)
    )
    return Run(
        reached,
        evaluations,
        final,
        steps,
        arm.compile_wait - wait_before,
        state,
    )


def step_costs(
    arms: Sequence[Arm],
    workload: Workload,
    *,
    repetitions: int,
    steps: int,
) -> dict[str, dict[str, Any]]:
    """Steady-state step time of each arm, interleaved, as a ratio to the
    first arm's (plain Optax).

    Every arm trains on the same batch from seed 0's initialization; a
    freezing level walks its sequence, so the samples cover its depths.

    Returns:
      ``{name: {"seconds": median, "ratio": median per-repetition ratio,
      "ratio_q1", "ratio_q3": its quartiles, "samples": the seconds}}``.
    """
    batch = next(workload.batches(0, 0))

    def runner(arm):
        state = arm.init(0)

        def run():
            nonlocal state
            for _ in range(steps):
                state, _ = arm.step(state, batch)
            return state

        return run

    samples = boostax.measure.interleaved_timings(
        {arm.name: runner(arm) for arm in arms},
        repetitions=repetitions,
        steps=steps,
    )
    reference = samples[arms[0].name]
    costs = {}
    for arm in arms:
        q1, median, q3 = ratio_quartiles(samples[arm.name], reference)
        costs[arm.name] = {
            "seconds": statistics.median(samples[arm.name]),
            "ratio": median,
            "ratio_q1": q1,
            "ratio_q3": q3,
            "samples": samples[arm.name],
        }
    return costs


def ratio_quartiles(
    samples: Sequence[float], reference: Sequence[float]
) -> tuple[float, float, float]:
    """Quartiles ``(q1, median, q3)`` of the per-repetition ratios
    ``samples[i] / reference[i]`` (the median is `boostax.measure.paired_ratio`;
    one repetition gives its ratio three times)."""
    median = boostax.measure.paired_ratio(samples, reference)
    ratios = [a / b for a, b in zip(samples, reference, strict=True)]
    if len(ratios) < 2:
        return median, median, median
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return q1, median, q3


def cost_reports(
    arms: Sequence[Arm],
    workload: Workload,
    accelerator: str | boostax.measure.Accelerator | None = None,
) -> dict[str, boostax.measure.CostReport]:
    """`boostax.measure.cost_report` of every arm but the first (plain Optax).

    One-device levels are compared with the first arm's hand-written step;
    data-parallel ones with plain Optax on the same mesh. `accelerator`:
    that of the roofline projection (``None``: `cost_report`'s default).
    """
    batch = next(workload.batches(0, 0))
    projection = {} if accelerator is None else {"accelerator": accelerator}
    return {
        arm.name: boostax.measure.cost_report(
            arm.train_step,
            arm.init(0),
            batch,
            baseline=None if arm.data_parallel else arms[0].step,
            **projection,
        )
        for arm in arms[1:]
    }


def decompose(
    plain_steps: int | None,
    level_steps: int | None,
    plain_seconds: float,
    step_cost_ratio: float,
    plain_compile: float,
    level_compile: float,
) -> dict[str, float | None]:
    """The speed-up of one level over plain Optax, with its factors.

    Args:
      plain_steps, level_steps: steps to the target (``None``: missed).
      plain_seconds: plain Optax's seconds per step.
      step_cost_ratio: the level's seconds per step over plain's, from
        interleaved repetitions (`step_costs`), not from two medians.
      plain_compile, level_compile: seconds each waited for compilation.

    Returns:
      ``steps_ratio`` (level / plain), ``step_cost_ratio``, ``speedup`` and
      ``speedup_with_compile`` at the target (0 when the level missed it),
      and ``break_even_steps``: the training length in plain steps after
      which the level, compile included, is ahead (``None``: never, its
      steps cost more).
    """
    out: dict[str, float | None] = {
        "steps_ratio": None,
        "step_cost_ratio": step_cost_ratio,
        "speedup": None,
        "speedup_with_compile": None,
        "break_even_steps": None,
    }
    if plain_steps is None:
        return out
    if level_steps is None:
        out.update(speedup=0.0, speedup_with_compile=0.0)
        return out
    ratio = level_steps / plain_steps
    plain_time = plain_steps * plain_seconds
    level_time = level_steps * plain_seconds * step_cost_ratio
    out["steps_ratio"] = ratio
    out["speedup"] = plain_time / level_time
    out["speedup_with_compile"] = (plain_time + plain_compile) / (
        level_time + level_compile
    )
    saving = plain_seconds * (1 - ratio * step_cost_ratio)
    if saving > 0:
        out["break_even_steps"] = max(
            0.0, (level_compile - plain_compile) / saving
        )
    return out


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def format_table(rows: dict[str, dict[str, Any]], target: float) -> str:
    """The decomposed comparison, one row per arm.

    Each row holds ``steps`` (to target), ``steps_ratio``,
    ``step_cost_ratio``, ``flops_ratio``, ``bytes_ratio``, ``compile``
    (seconds waited), ``break_even_steps``, ``speedup``,
    ``speedup_with_compile``, ``projected_speedup``, ``final_accuracy``
    and an optional ``note``; ranges may be given as ``(median, min, max)``
    tuples.
    """
    header = (
        f"{'level':<11} {'test acc':>8} {f'steps to {target:.0%}':>13} "
        f"{'x steps':>7} {'x step time':>11} {'x FLOPs':>7} "
        f"{'x bytes':>7} {'compile':>8} {'break-even':>10} "
        f"{'speed-up':>8} {'w/ compile':>10} {'projected':>9}"
    )
    lines = [header, "-" * len(header)]
    for name, r in rows.items():
        if r.get("skip"):
            lines.append(f"{name:<11} {r['note']}")
            continue
        steps = r["steps"]
        if isinstance(steps, tuple | list):
            steps = _fmt(steps[0], "g")
        else:
            steps = _fmt(steps, "d")
        lines.append(
            f"{name:<11} {_fmt(r['final_accuracy'], '.3f'):>8} {steps:>13} "
            f"{_fmt(r['steps_ratio'], '.2f'):>7} "
            f"{_fmt(r['step_cost_ratio'], '.3f'):>11} "
            f"{_fmt(r['flops_ratio'], '.3f'):>7} "
            f"{_fmt(r['bytes_ratio'], '.3f'):>7} "
            f"{_fmt(r['compile'], '.1f', ' s'):>8} "
            f"{_fmt(r['break_even_steps'], '.0f'):>10} "
            f"{_fmt(r['speedup'], '.2f', 'x'):>8} "
            f"{_fmt(r['speedup_with_compile'], '.2f', 'x'):>10} "
            f"{_fmt(r['projected_speedup'], '.2f', 'x'):>9}"
            + (f"  {r['note']}" if r.get("note") else "")
        )
    return "\n".join(lines)


LEGEND = (
    "x steps = steps to target / plain's (hardware-independent); x step time "
    "= median interleaved step-time ratio; x FLOPs, x bytes = XLA's cost "
    "analysis, weighted over the freezing sequence; compile = seconds "
    "training waited for compilation (background: what it could not "
    "overlap); break-even = training length (plain steps) after which the "
    "level is ahead, compile included; speed-up = (plain steps x step time) "
    "/ (level's), w/ compile adds each one's compile; projected = speed-up "
    "with the roofline step-time ratio on {accelerator} (not measured)."
)


def legend(accelerator: str) -> str:
    """What the columns of `format_table` mean, wrapped for a terminal."""
    return textwrap.fill(LEGEND.format(accelerator=accelerator), width=100)


def row(
    plain: dict,
    level: dict,
    cost: Any = None,
) -> dict[str, Any]:
    """A table row from two arms' measurements.

    `plain` holds ``steps`` (to target), ``seconds`` (per step),
    ``compile`` (seconds waited) and ``final_accuracy``; `level` the same
    with ``step_cost_ratio`` instead of ``seconds``; `cost` is the level's
    `boostax.measure.CostReport`.
    """
    parts = decompose(
        plain["steps"],
        level["steps"],
        plain["seconds"],
        level["step_cost_ratio"],
        plain["compile"],
        level["compile"],
    )
    projected = None
    if cost is not None and parts["steps_ratio"]:
        projected = 1 / (parts["steps_ratio"] * cost.expected_step_ratio)
    return {
        "steps": level["steps"],
        "final_accuracy": level["final_accuracy"],
        "compile": level["compile"],
        "flops_ratio": None if cost is None else cost.ratios["flops"],
        "bytes_ratio": None if cost is None else cost.ratios["bytes_accessed"],
        "projected_step_ratio": None
        if cost is None
        else cost.expected_step_ratio,
        "projected_speedup": projected,
        **parts,
    }
