# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing: the plan of a freezing run.

MindSpore's gradient freezing (``GradientFreeze``) splits the parameters into
nested *suffix* groups (`freezing/groups.py`): group 0 is every parameter,
group ``k`` only the last layers. A precomputed sequence
(`freezing/sequence.py`) says, for every step, which group trains; the
others are frozen. The saving is real only if nothing reads a frozen
leaf's gradient, so boostax compiles one train step per freeze depth that
differentiates the trainable suffix alone (XLA drops the frozen prefix's
backward pass) and updates the optimizer on that suffix alone
(`masked_update.py`), and the host picks the step for each iteration from
the sequence (see `train_step.TrainStep`). `Freezing` is that plan: the
groups, the sequence, the optimizers.

References:
  MindSpore ``mindspore.boost.GradientFreeze``, ``FreezeOpt``,
  ``freeze_cell`` (``boost/grad_freeze.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from boostax._src import tree_utils, validation
from boostax._src.freezing import record as freeze_record
from boostax._src.freezing import sequence as freeze_sequence
from boostax._src.freezing.groups import Path, group_mask, groups_of
from boostax._src.freezing.masked_update import mask_tree, masked_update

# The key of the warm-up program: it trains every depth (read from the
# state's position inside the program) with the depth's frozen gradients
# zeroed and its frozen params and optimizer slots restored after the
# update, so it computes every gradient (no saving) but is one program for
# all depths. A step runs it at the positions before the warm-up's end, and
# its depth's own program after (`program_schedule.ProgramSchedule`).
MASKED = "masked"
# A warm-up program that differentiates only group ``k``'s leaves (``k`` the
# shallowest depth of the positions it runs): the key ``f"{MASKED} from
# {k}"`` (`warmup_key`). Its positions' depths all freeze the leaves
# outside group ``k``, so it skips their backward as depth ``k``'s own
# program does, and masks the rest as `MASKED` does.
_FROM = f"{MASKED} from "


def warmup_key(cut: int) -> str:
    """The key of the warm-up program differentiating group `cut`'s leaves
    alone (`MASKED` for group 0: every leaf)."""
    validation.check_int("cut", cut, minimum=0)
    return MASKED if cut == 0 else f"{_FROM}{cut}"


def warmup_cut(key: Any) -> int | None:
    """The group a warm-up program's key differentiates (0 for `MASKED`),
    or ``None`` where `key` is not a warm-up program's (a depth's own, or
    ``None``)."""
    if not isinstance(key, str):
        return None
    if key == MASKED:
        return 0
    if key.startswith(_FROM) and key[len(_FROM) :].isdigit():
        return int(key[len(_FROM) :])
    return None


class FreezeState(NamedTuple):
    """Position in the freeze sequence (``TrainState.algorithms.freeze``).

    Attributes:
      position: index of the next step in the sequence, ``int32`` scalar.
      settings: the record of the plan the last step ran
        (`Freezing.settings_record`: the sequence's settings and hashes),
        ``int32[14]``; zeros before the first step. A step given a state
        refuses one whose record says its steps so far ran other depths
        than its own sequence gives them (`freeze_record.check_resume`).
    """

    position: jax.Array
    settings: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class Freezing:
    """How a train step freezes: the groups, the sequence, the optimizers.

    Attributes:
      groups: for each depth ``k``, the trainable leaf paths (group 0: all).
      sequence: the depth of each step
        (`freeze_sequence.generate_freeze_index_sequence`).
      group_optimizers: ``None`` for one optimizer state shared by all
        depths (a frozen leaf's slots are left untouched); else one
        optimizer per group, each with its own state (MindSpore's
        ``FreezeOpt``).
      micro_steps: train steps per sequence entry: with gradient
        accumulation over k micro-steps, all k micro-steps of an update
        train the same depth, so every accumulated gradient is complete.
      wrap: past its end the sequence starts again (MindSpore's); else it
        stays at its last depth (the progressive schedule).
      settings: the `FreezeSettings` the sequence was computed from
        (`freezing_factory` sets them), or ``None`` for a sequence given
        directly. With them, a state resumed under other settings that
        leave the depths of its steps so far as they were goes on (see
        `freeze_record.check_resume`); without, only the same sequence.
    """

    groups: tuple[tuple[Path, ...], ...]
    sequence: np.ndarray
    group_optimizers: tuple[optax.GradientTransformation, ...] | None = None
    micro_steps: int = 1
    wrap: bool = True
    settings: freeze_record.FreezeSettings | None = None

    def __post_init__(self):
        groups = validation.check_sequence(
            "groups", self.groups, "a tuple of groups of leaf paths"
        )
        if not groups:
            raise ValueError("`groups` must not be empty.")
        for k, group in enumerate(groups):
            if not isinstance(group, (list, tuple)):
                raise TypeError(
                    "Each group of `groups` must be a tuple of leaf paths, "
                    f"{validation.got(group)} for group {k}."
                )
        if isinstance(self.sequence, str) or not hasattr(
            self.sequence, "__len__"
        ):
            raise TypeError(
                "`sequence` must be a 1-D integer array (the depth of each "
                f"step), {validation.got(self.sequence)}."
            )
        sequence = np.asarray(self.sequence)
        if sequence.ndim != 1 or not len(sequence):
            raise ValueError("`sequence` must be a non-empty 1-D array.")
        if not np.issubdtype(sequence.dtype, np.integer):
            raise TypeError(
                "`sequence` must hold integer depths, got an array of dtype "
                f"{sequence.dtype}."
            )
        if sequence.min() < 0 or sequence.max() >= len(self.groups):
            raise ValueError(
                f"`sequence` holds depths outside [0, {len(self.groups)})."
            )
        if self.group_optimizers is not None:
            optimizers = validation.check_sequence(
                "group_optimizers",
                self.group_optimizers,
                "None or a tuple of optax.GradientTransformation",
            )
            for tx in optimizers:
                validation.check_instance(
                    "group_optimizers",
                    tx,
                    optax.GradientTransformation,
                    "a tuple of optax.GradientTransformation",
                )
            if len(optimizers) != len(self.groups):
                raise ValueError(
                    f"{len(optimizers)} group optimizers for "
                    f"{len(self.groups)} groups."
                )
        validation.check_int("micro_steps", self.micro_steps, minimum=1)
        validation.check_bool("wrap", self.wrap)
        if self.settings is not None and not isinstance(
            self.settings, freeze_record.FreezeSettings
        ):
            raise TypeError(
                "`settings` must be None or a FreezeSettings (the sequence's "
                f"settings), {validation.got(self.settings)}."
            )
        object.__setattr__(self, "sequence", sequence.astype(np.int32))

    @functools.cached_property
    def settings_record(self) -> np.ndarray:
        """The record of this plan each step writes into the state
        (`freeze_record.settings_record`), ``int32[14]``."""
        return freeze_record.settings_record(self)

    def init_state(self) -> FreezeState:
        """The `FreezeState` of a run that has not started: position 0,
        no record."""
        return FreezeState(
            jnp.zeros([], jnp.int32),
            jnp.zeros([freeze_record.SIZE], jnp.int32),
        )

    def next_state(self, state: FreezeState) -> FreezeState:
        """The `FreezeState` after a step of this plan (inside the step):
        one position on, and this plan's record."""
        return FreezeState(
            state.position + 1, jnp.asarray(self.settings_record)
        )

    def check_resume(self, state: FreezeState) -> None:
        """Raises unless the steps the `FreezeState` `state` has run
        ran the depths this plan gives them
        (`freeze_record.check_resume`)."""
        freeze_record.check_resume(self, state)

    def stamp(self, state):
        """`state` (a `TrainState`) recording this plan as the one its
        steps ran, its position kept.

        The way to resume a state whose record a train step refuses
        (`freeze_record.check_resume`) when you know better: one saved
        under this plan by a boostax that wrote no record, or one whose
        schedule you change on purpose from here on (its steps so far keep
        the depths they ran; a group frozen for good may train again).
        """
        freeze = state.algorithms.freeze
        value = tree_utils.placed_like(self.settings_record, freeze.position)
        return state.replace(
            algorithms=state.algorithms._replace(
                freeze=freeze._replace(settings=value)
            )
        )

    def depth(self, position: int) -> int:
        """The depth of train step `position` (see `wrap`)."""
        index = position // self.micro_steps
        if self.wrap:
            index %= len(self.sequence)
        else:
            index = min(index, len(self.sequence) - 1)
        return int(self.sequence[index])

    @property
    def can_mask(self) -> bool:
        """Whether the depths have a warm-up program (`MASKED`): not with
        one optimizer state per group."""
        return self.group_optimizers is None

    def traced_depth(self, position: jax.Array) -> jax.Array:
        """`depth` of a traced position (inside a compiled step)."""
        index = position // self.micro_steps
        last = len(self.sequence) - 1
        if self.wrap:
            index %= len(self.sequence)
        else:
            index = jnp.minimum(index, last)
        return jnp.asarray(self.sequence)[index]

    def traced_mask(self, params: Any, depth: jax.Array) -> Any:
        """`mask` of a traced depth: a tree of bool scalars."""
        table = np.array(
            [
                jax.tree.leaves(self.mask(params, k))
                for k in range(len(self.groups))
            ],
            dtype=bool,
        ).reshape(len(self.groups), -1)
        # One predicate per distinct column (the leaves trained at the same
        # depths share it), not a lookup per leaf; a leaf trained by the
        # first m depths (nested groups) is ``depth < m``, which XLA fuses
        # into each select: on the example ResNet the warm-up program
        # compiles in 0.85x the time.
        columns, leaf_column = np.unique(table, axis=1, return_inverse=True)
        shared = [_trained_at(column, depth) for column in columns.T]
        return jax.tree.unflatten(
            jax.tree.structure(params),
            [shared[j] for j in np.ravel(leaf_column)],
        )

    def canonical_depth(self, depth: int) -> int:
        """The first depth with the same compiled step.

        Depths training the same leaves share a step, unless each group has
        its own optimizer state.
        """
        if self.group_optimizers is not None:
            return depth
        return self.groups.index(self.groups[depth])

    def trains_everything(self, depth: int, params: Any) -> bool:
        """Whether `depth` trains every leaf of `params` with the one state.

        Such a step is the plain, unmasked step.
        """
        return self.group_optimizers is None and len(
            set(self.groups[depth])
        ) == len(jax.tree.leaves(params))

    def mask(self, params: Any, depth: int) -> Any:
        return group_mask(params, self.groups[depth])

    def init_opt_state(self, optimizer, params):
        if self.group_optimizers is None:
            return optimizer.init(params)
        return tuple(
            tx.init(mask_tree(params, self.mask(params, k)))
            for k, tx in enumerate(self.group_optimizers)
        )

    def update(self, optimizer, depth, grads, opt_state, params, mask, **extra):
        """Optimizer update of the leaves trained at `depth`."""
        if self.group_optimizers is None:
            return masked_update(
                optimizer, grads, opt_state, params, mask, **extra
            )
        tx = self.group_optimizers[depth]
        if isinstance(tx, optax.GradientTransformationExtraArgs):
            updates, new = tx.update(grads, opt_state[depth], params, **extra)
        else:
            updates, new = tx.update(grads, opt_state[depth], params)
        return updates, opt_state[:depth] + (new,) + opt_state[depth + 1 :]


def _trained_at(column: np.ndarray, depth: jax.Array) -> jax.Array:
    """Whether a leaf trained at the depths where `column` is True trains at
    the traced `depth`."""
    m = int(column.sum())
    if m in (0, len(column)):  # at every depth, or at none: a constant
        return jnp.asarray(m > 0)
    if column[:m].all():  # the first m depths: a comparison
        return jnp.asarray(depth < m)
    return jnp.asarray(column)[depth]


def split_learning_rates(
    learning_rates: Sequence[float],
    strategy: Sequence[int] | np.ndarray,
    groups: int,
) -> list[Callable[[jax.Array], jax.Array]]:
    """Per-group schedules from a per-step learning-rate list (FreezeOpt).

    Each group's optimizer counts only the steps it runs, so group ``k``
    gets the rates of the steps where the strategy is ``k``, in order. A
    list longer than the strategy is not split (every group walks the whole
    list from its own step 0), as in MindSpore.
    """
    rates = np.asarray(
        validation.check_numbers("learning_rate", learning_rates), np.float32
    )
    strategy = np.asarray(strategy)
    if len(rates) > len(strategy):
        per_group = [rates] * groups
    else:
        per_group = [rates[strategy[: len(rates)] == k] for k in range(groups)]

    def schedule(values):
        values = jnp.asarray(values if len(values) else rates[:1])
        return lambda count: values[jnp.minimum(count, len(values) - 1)]

    return [schedule(v) for v in per_group]


def freezing_factory(
    *,
    groups_number: int,
    strategy: int,
    freeze_p: float,
    total_steps: int,
    seed: int = 0,
    groups: Sequence[Sequence[Path]] | None = None,
    micro_steps: int = 1,
) -> Callable[[Any], Freezing]:
    """A function building the `Freezing` plan of a parameter tree.

    The sequence is computed now; the groups when the parameters are known
    (`TrainStep.init`).

    Args:
      groups_number, strategy, freeze_p, total_steps, seed: see
        `freeze_sequence.generate_freeze_index_sequence`.
      groups: groups cut on the model (`split_parameters_groups`), applied
        to the trained parameters with `restrict_groups`; ``None`` cuts the
        parameters in a natural sort of their paths.
      micro_steps: train steps per sequence entry (gradient accumulation).
    """
    sequence = freeze_sequence.generate_freeze_index_sequence(
        groups_number, strategy, freeze_p, total_steps, seed=seed
    )
    # Checked by the sequence's computation.
    settings = freeze_record.FreezeSettings(
        int(groups_number),
        int(strategy),
        float(freeze_p),
        int(total_steps),
        int(seed),
    )

    def make(params) -> Freezing:
        return Freezing(
            groups_of(params, groups, groups_number),
            sequence,
            micro_steps=micro_steps,
            wrap=strategy != freeze_sequence.PROGRESSIVE_STRATEGY,
            settings=settings,
        )

    return make
