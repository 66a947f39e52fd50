# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""What a train step costs, read from XLA before any training.

`executable_cost` reads one compiled executable: FLOPs and bytes accessed
(``cost_analysis()``), temporary and argument memory (``memory_analysis()``),
the bytes each device sends in its collectives (parsed from the compiled
HLO by `collective_bytes`) and the kernels it launches (`kernel_counts`).
`cost_report` does it for every executable of a boosted step — one per
freeze depth, and the freezing warm-up's — and for the plain Optax step of
the same model, weights them by the train steps each runs over the planned
run (`TrainStep.program_shares`), and projects a
step-time ratio on a named accelerator with the roofline model::

    t(step) = max(FLOPs / peak FLOP/s, bytes accessed / peak bytes/s)
    ratio   = sum_k share_k t(depth k) / t(plain)

Projections are not measurements: XLA fuses differently on each backend, and
the CPU's cost analysis is what is read here.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from boostax._src import validation
from boostax._src.config import boost_config as config_lib
from boostax._src.distributed import data_parallel as data_parallel_lib
from boostax._src.freezing import plan as freezing_lib
from boostax._src.measure import step_bytes as step_bytes_lib
from boostax._src.measure import train_step_bytes as train_step_bytes_lib
from boostax._src.measure.accelerators import (
    ACCELERATORS,
    DEFAULT_ACCELERATOR,
    Accelerator,
)
from boostax._src.measure.executable_cost import ExecutableCost, executable_cost
from boostax._src.measure.state_bytes import state_bytes_per_device
from boostax._src.step import executables as executables_lib
from boostax._src.step import factory as step_factory
from boostax._src.step import program_schedule
from boostax._src.step import train_step as train_step_lib

# --------------------------------------------------------------------------
# A whole boosted step against the plain one.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CostReport:
    """The cost of a boosted train step against the plain Optax step.

    Print it for a table; `as_dict` for JSON.

    Attributes:
      executables: ``{name: ExecutableCost}``: ``"plain"`` and one entry per
        compiled step of the boosted one that the planned run runs
        (``"depth k"`` with freezing, and ``"warm-up"`` for the freezing
        warm-up's program; else ``"step"``).
      shares: ``{name: fraction of the steps it runs}`` over the planned
        run, one pass of the freezing sequence, its first
        ``freeze_warmup_steps`` on the warm-up program
        (`TrainStep.program_shares`; 1 for a step without freezing).
      compile_seconds: ``{name: seconds}`` tracing and compiling each one.
      weighted: the boosted step's FLOPs, bytes accessed, collective bytes
        and kernels (launched per step, `kernel_counts`) averaged over the
        sequence, and its largest temp memory.
      ratios: ``weighted`` over the plain step's: ``flops``,
        ``bytes_accessed``, ``temp_bytes``, ``collective_bytes`` (``None``
        when the plain step has none), ``kernels`` and
        ``projected_step_time``, the roofline time on `accelerator`.
      accelerator: the `Accelerator` of the projection.
      less_bn: LessBN's `LessBNReport`, or ``None`` when it is off.
      algorithms: the boost algorithms switched on.
      step_bytes: ``{name: StepBytes}``: the dtype-aware bytes read before
        compilation (activations saved for the backward pass, collective
        bytes of the lowered step, the dtypes of its convolutions and
        matmuls), for every executable whose step is a `TrainStep`; their
        weighted means are ``weighted["saved_activation_bytes"]`` and
        ``weighted["lowered_collective_bytes"]`` (ratios ``None`` when the
        baseline is not a `TrainStep`). These, not the CPU's cost analysis,
        show what a precision policy saves.
      state_bytes: ``{"boosted": ..., "plain": ...}``: the bytes of each
        step's state a device holds (`state_bytes_per_device`: params,
        optimizer state, the rest), which a sharded optimizer state
        (`DataParallel(shard_optimizer_state=True)`) divides; ``"plain"``
        ``None`` with a compiled `baseline` (no state given).
    """

    executables: dict[str, ExecutableCost]
    shares: dict[str, float]
    compile_seconds: dict[str, float]
    weighted: dict[str, float]
    ratios: dict[str, float | None]
    accelerator: Accelerator
    less_bn: Any = None
    algorithms: tuple[str, ...] = ()
    step_bytes: dict[str, step_bytes_lib.StepBytes] = dataclasses.field(
        default_factory=dict
    )
    state_bytes: dict[str, dict[str, int] | None] = dataclasses.field(
        default_factory=dict
    )

    def __post_init__(self):
        validation.check_instance(
            "executables",
            self.executables,
            Mapping,
            "a dict {name: ExecutableCost}",
        )
        for cost in self.executables.values():
            validation.check_instance(
                "executables",
                cost,
                ExecutableCost,
                "a dict {name: ExecutableCost}",
            )
        for name in ("shares", "compile_seconds", "weighted", "ratios"):
            validation.check_instance(
                name, getattr(self, name), Mapping, "a dict {name: number}"
            )
        validation.check_instance(
            "accelerator", self.accelerator, Accelerator, "an Accelerator"
        )
        for name in validation.check_sequence(
            "algorithms", self.algorithms, "a tuple of algorithm names"
        ):
            validation.check_str("algorithms", name)

    @property
    def expected_step_ratio(self) -> float:
        """The projected step-time ratio (boosted / plain) on the
        accelerator: below 1 the boosted step is cheaper."""
        projected = self.ratios["projected_step_time"]
        assert projected is not None  # `cost_report` always sets it
        return projected

    def as_dict(self) -> dict[str, Any]:
        """Plain Python values, ready for ``json.dump``."""
        return {
            "algorithms": list(self.algorithms),
            "executables": {
                name: {
                    **cost._asdict(),
                    "share": self.shares.get(name),
                    "compile_seconds": self.compile_seconds.get(name),
                }
                for name, cost in self.executables.items()
            },
            "step_bytes": {
                name: found._asdict() for name, found in self.step_bytes.items()
            },
            "weighted": dict(self.weighted),
            "ratios": dict(self.ratios),
            "state_bytes": {
                name: None if parts is None else dict(parts)
                for name, parts in self.state_bytes.items()
            },
            "accelerator": self.accelerator._asdict(),
            "less_bn": None
            if self.less_bn is None
            else {
                "removed": [r.path for r in self.less_bn.removed],
                "kept": list(self.less_bn.kept),
                "fn_head": self.less_bn.fn_head,
                "removed_parameters": self.less_bn.removed_parameters,
            },
        }

    def __str__(self) -> str:
        plain = self.executables["plain"]
        header = (
            f"{'executable':<10} {'share':>6} {'GFLOP':>9} {'x plain':>7} "
            f"{'MB accessed':>11} {'x plain':>7} {'temp MB':>8} "
            f"{'sent MB':>8} {'kernels':>7} {'x plain':>7} {'compile':>8}"
        )
        lines = [
            "boostax cost report"
            + (f": {', '.join(self.algorithms)}" if self.algorithms else "")
            + " vs plain Optax, per device and step",
            header,
            "-" * len(header),
        ]

        def row(name, cost, share, seconds):
            share = "" if share is None else f"{share:.1%}"
            seconds = "" if seconds is None else f"{seconds:.1f} s"
            return (
                f"{name:<10} {share:>6} {cost.flops / 1e9:>9.4f} "
                f"{_ratio(cost.flops, plain.flops):>7} "
                f"{cost.bytes_accessed / 1e6:>11.2f} "
                f"{_ratio(cost.bytes_accessed, plain.bytes_accessed):>7} "
                f"{cost.temp_bytes / 1e6:>8.2f} "
                f"{cost.collective_bytes / 1e6:>8.2f} {cost.kernels:>7} "
                f"{_ratio(cost.kernels, plain.kernels):>7} {seconds:>8}"
            )

        for name, cost in self.executables.items():
            lines.append(
                row(
                    name,
                    cost,
                    self.shares.get(name),
                    self.compile_seconds.get(name),
                )
            )
        w, r = self.weighted, self.ratios
        boosted = [n for n in self.executables if n != "plain"]
        lines += [
            "-" * len(header),
            f"{'weighted':<10} {'':>6} {w['flops'] / 1e9:>9.4f} "
            f"{r['flops']:>6.3f}x {w['bytes_accessed'] / 1e6:>11.2f} "
            f"{r['bytes_accessed']:>6.3f}x {w['temp_bytes'] / 1e6:>8.2f} "
            f"{w['collective_bytes'] / 1e6:>8.2f} {w['kernels']:>7.1f} "
            f"{_ratio(w['kernels'], plain.kernels):>6}x "
            f"{sum(self.compile_seconds.get(n, 0.0) for n in boosted):>6.1f} s",
            f"projected step time on {self.accelerator.name} (roofline, "
            f"not measured): {r['projected_step_time']:.3f}x plain",
        ]
        lines += self._saved_lines()
        lines += self._state_lines()
        if self.less_bn is not None:
            removed = len(self.less_bn.removed)
            lines.append(
                f"LessBN: {removed} of {removed + len(self.less_bn.kept)} "
                "BatchNorms removed"
                + (
                    f" ({', '.join(r.path for r in self.less_bn.removed)})"
                    if removed
                    else ""
                )
            )
        return "\n".join(lines)

    def _state_lines(self) -> list[str]:
        """The state each device holds, against plain's."""
        ours = self.state_bytes.get("boosted")
        if ours is None:
            return []
        plain = self.state_bytes.get("plain")

        def part(name: str) -> str:
            text = f"{name.replace('_', ' ')} {ours[name] / 1e6:.3f} MB"
            if plain is not None:
                text += f" ({_ratio(ours[name], plain[name])}x plain)"
            return text

        return [
            "state per device: "
            + ", ".join(part(n) for n in ("params", "opt_state", "total"))
        ]

    def _saved_lines(self) -> list[str]:
        """Saved activations per executable, with their dtypes."""
        if not self.step_bytes:
            return []
        lines = ["activations saved for the backward pass (by dtype):"]
        plain = self.step_bytes.get("plain")
        for name, found in self.step_bytes.items():
            dtypes = ", ".join(
                f"{dtype} {size / 1e6:.2f}"
                for dtype, size in sorted(found.saved_by_dtype.items())
            )
            ratio = (
                ""
                if plain is None
                else " ("
                + _ratio(
                    found.saved_activation_bytes, plain.saved_activation_bytes
                )
                + "x plain)"
            )
            lines.append(
                f"  {name:<10} {found.saved_activation_bytes / 1e6:.2f} MB"
                f"{ratio}: {dtypes}"
            )
        return lines


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.3f}" if reference else "-"


def _plain_step(train_step, state, batch):
    """The plain Optax step of `train_step`'s original model and optimizer,
    and its state's shapes (nothing is allocated)."""
    recipe = train_step.plain_recipe
    if recipe is None:
        raise ValueError(
            "This train step has no recipe for its plain counterpart (it was "
            "not built by `auto_boost`): pass `baseline=` (a train step or "
            "a jitted `step(state, batch)`) and `baseline_state=`."
        )
    single = step_factory.make_train_step(**recipe.kwargs)

    def init():
        variables = single.objective.initial_variables(batch)
        return single.init(state.params if variables is None else variables)

    abstract_state = jax.eval_shape(init)
    if recipe.mesh is None:
        return single, abstract_state
    plain = step_factory.make_train_step(
        **recipe.kwargs,
        data_parallel=data_parallel_lib.DataParallel(recipe.mesh),
    )
    replicated = NamedSharding(recipe.mesh, P())
    abstract_state = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
        abstract_state,
    )
    return plain, abstract_state


# `weighted` / `ratios` keys read from `StepBytes` (before compilation),
# and their fields there.
_STEP_BYTES_FIELDS = {
    "saved_activation_bytes": "saved_activation_bytes",
    "lowered_collective_bytes": "collective_bytes",
}


def _compile_timed(lowerable, *args) -> tuple[jax.stages.Compiled, float]:
    start = time.perf_counter()
    compiled = lowerable.lower(*args).compile()
    return compiled, time.perf_counter() - start


def cost_report(
    train_step,
    state,
    batch,
    *,
    baseline: Any = None,
    baseline_state: Any = None,
    accelerator: str | Accelerator = DEFAULT_ACCELERATOR,
) -> CostReport:
    """What a boosted train step will cost against the plain Optax step.

    Compiles every executable of `train_step` (one per freeze depth; they
    are kept, so training then starts without compiling) and the plain step
    of the same model and optimizer, and reads their FLOPs, bytes accessed,
    temporary memory and collective bytes from XLA. The boosted costs are
    averaged over the planned run, each program weighted by its share of
    the steps (`TrainStep.program_shares`: a run shorter than
    ``freeze_warmup_steps`` runs only the warm-up program); the expected
    step-time ratio is the roofline projection on `accelerator` (see the
    module docstring). Nothing is trained.

    Args:
      train_step: a `TrainStep` (from `auto_boost`, or `make_train_step`
        with `baseline`).
      state: its state (``train_step.init(...)``).
      batch: one training batch (only shapes and dtypes are used).
      baseline: the step to compare with: a `TrainStep`, a jitted
        ``step(state, batch)``, or one already compiled
        (``jax.stages.Compiled``); default the plain Optax step of the model
        and optimizer given to `auto_boost` (on the same mesh, gradients
        averaged, when the step is data-parallel).
      baseline_state: `baseline`'s state (or its shapes), unless `baseline`
        is compiled.
      accelerator: the name of an entry of `ACCELERATORS`, or an
        `Accelerator`.

    Returns:
      A `CostReport`: ``print(report)`` for a table, ``report.as_dict()``
      for JSON, ``report.expected_step_ratio`` for the projection.

    Example:
      >>> import jax, optax, boostax
      >>> from boostax.examples import data, models
      >>> digits = data.load_digits()
      >>> model = models.ResNet(stage_sizes=(1, 1), widths=(8, 16))
      >>> ts = boostax.auto_boost(
      ...     "O1", {"grad_freeze": {"param_groups": 3, "total_steps": 100}},
      ...     optimizer=optax.sgd(0.05, momentum=0.9), model=model,
      ...     loss=models.cross_entropy, sample_inputs=digits.x_train[:1],
      ...     # each depth's own program from step 0
      ...     options=boostax.StepOptions(freeze_warmup_steps=0))
      >>> init = jax.jit(model.init, static_argnames="train")
      >>> state = ts.init(init(jax.random.PRNGKey(0), digits.x_train[:1],
      ...                      train=False))
      >>> batch = (digits.x_train[:32], digits.y_train[:32])
      >>> report = boostax.measure.cost_report(ts, state, batch)
      >>> sorted(report.executables)
      ['depth 0', 'depth 1', 'depth 2', 'plain']
      >>> bool(report.ratios["flops"] < 1.0)
      True
    """
    validation.check_instance(
        "train_step", train_step, train_step_lib.TrainStep, "a TrainStep"
    )
    compiled_types = (jax.stages.Compiled, executables_lib.Program)
    if baseline is not None and not isinstance(
        baseline, (train_step_lib.TrainStep, *compiled_types)
    ):
        if not callable(getattr(baseline, "lower", None)):
            raise TypeError(
                "`baseline` must be None, a TrainStep, a jitted "
                "step(state, batch) or a jax.stages.Compiled, "
                f"{validation.got(baseline)}."
            )
    if isinstance(accelerator, str):
        if accelerator not in ACCELERATORS:
            raise ValueError(
                f"`accelerator` must be one of {sorted(ACCELERATORS)} or an "
                f"Accelerator, got {accelerator!r}."
            )
        accelerator = ACCELERATORS[accelerator]
    validation.check_instance(
        "accelerator",
        accelerator,
        Accelerator,
        f"one of {sorted(ACCELERATORS)} or an Accelerator",
    )
    precompiled = isinstance(baseline, compiled_types)
    if not precompiled and (baseline is None) != (baseline_state is None):
        raise ValueError(
            "Pass `baseline` and `baseline_state` together (or neither, for "
            "the plain step of the model given to `auto_boost`; or a "
            "compiled `baseline` alone)."
        )
    if baseline is None:
        baseline, baseline_state = _plain_step(train_step, state, batch)
    if precompiled:
        plain_compiled, plain_seconds = baseline, None
    elif isinstance(baseline, train_step_lib.TrainStep):
        # The program its calls run (as `compile_all`'s of `train_step`).
        key = None if baseline.freezing is None else baseline.program_at(0)
        plain_compiled, plain_seconds = _compile_timed(
            baseline.executables.program(key),
            baseline_state,
            baseline._batch(batch),
        )
    else:
        plain_compiled, plain_seconds = _compile_timed(
            baseline, baseline_state, batch
        )

    compiled = train_step.compile_all(state, batch)
    shares = train_step.program_shares()
    warmup = [k for k in shares if freezing_lib.warmup_cut(k) is not None]
    for key in warmup:  # the freezing warm-up runs them
        train_step.executables.executable(key, state, train_step._batch(batch))
    if warmup:
        compiled.update(train_step.executables.compiled())
    names = program_schedule.program_names(
        shares, getattr(train_step.program_lengths, "unit", "length")
    )
    costs = {"plain": executable_cost(plain_compiled)}
    costs.update({names[k]: executable_cost(compiled[k]) for k in names})
    compile_seconds = {} if plain_seconds is None else {"plain": plain_seconds}
    compile_seconds.update(
        {
            names[k]: train_step.compile_seconds[k]
            for k in names
            if k in train_step.compile_seconds
        }
    )

    def mean(field, table=costs):
        return sum(shares[k] * getattr(table[names[k]], field) for k in names)

    weighted = {
        "flops": mean("flops"),
        "bytes_accessed": mean("bytes_accessed"),
        "collective_bytes": mean("collective_bytes"),
        "kernels": mean("kernels"),
        "temp_bytes": max(costs[names[k]].temp_bytes for k in names),
    }
    found = {
        names[k]: train_step_bytes_lib.step_bytes(train_step, state, batch, k)
        for k in names
    }
    if isinstance(baseline, train_step_lib.TrainStep):
        found["plain"] = train_step_bytes_lib.step_bytes(
            baseline, baseline_state, batch
        )
    for key, field in _STEP_BYTES_FIELDS.items():
        weighted[key] = mean(field, found)
    plain = costs["plain"]
    projected = sum(
        shares[k]
        * accelerator.seconds(
            costs[names[k]].flops, costs[names[k]].bytes_accessed
        )
        for k in names
    ) / accelerator.seconds(plain.flops, plain.bytes_accessed)

    def ratio(key, value):
        if key in _STEP_BYTES_FIELDS:
            if "plain" not in found:
                return None
            reference = getattr(found["plain"], _STEP_BYTES_FIELDS[key])
        else:
            reference = getattr(plain, key)
        return value / reference if reference else None

    config = train_step.config
    return CostReport(
        executables=costs,
        shares={names[k]: shares[k] for k in names},
        compile_seconds=compile_seconds,
        weighted=weighted,
        ratios={
            **{field: ratio(field, value) for field, value in weighted.items()},
            "projected_step_time": projected,
        },
        accelerator=accelerator,
        less_bn=train_step.less_bn_report,
        algorithms=()
        if config is None
        else tuple(a for a in config_lib.ALGORITHMS if config.is_enabled(a)),
        step_bytes=found,
        state_bytes={
            "boosted": state_bytes_per_device(state),
            "plain": None
            if baseline_state is None
            else state_bytes_per_device(baseline_state),
        },
    )
