# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing: parameter groups, per-depth updates, the plan.

MindSpore's gradient freezing (``GradientFreeze``) splits the parameters into
nested *suffix* groups: group 0 is every parameter, group ``k`` only the
last layers. A precomputed sequence (`freeze_sequence.py`) says, for every
step, which group trains; the others are frozen. The saving is real only if
nothing reads a frozen leaf's gradient, so boostax compiles one train step
per freeze depth that differentiates the trainable suffix alone (XLA drops
the frozen prefix's backward pass) and updates the optimizer on that suffix
alone (`masked_update`), and the host picks the step for each iteration
from the sequence (see `train_step.TrainStep`).

References:
  MindSpore ``mindspore.boost.GradientFreeze``, ``FreezeOpt``,
  ``freeze_cell`` (``boost/grad_freeze.py``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import nnx

from boostax._src import freeze_sequence, model_graph, user_warnings, validation
from boostax._src.tree_utils import path_names

Path = tuple[str, ...]

# ---------------------------------------------------------------------------
# Parameter groups.
# ---------------------------------------------------------------------------


def _natural_key(path: Path):
    return [
        [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", part)]
        for part in path
    ]


def _owner_first(names: Sequence[str]) -> list[str]:
    """A module's parameters, weights first (biases attach to them)."""
    return sorted(names, key=lambda n: ("bias" in n.lower(), n))


def ordered_leaves(
    params: Any, call_order: Sequence[tuple[Any, ...]] | None = None
) -> list[Path]:
    """Leaf paths of `params` in the model's call order.

    Args:
      params: the parameter tree.
      call_order: module paths in the order the modules were called; leaves
        of earlier modules come first, weights before biases within a
        module. ``None``: a natural sort of the paths (``Conv_2`` before
        ``Conv_10``), which is the call order only for models whose names
        say so.
    """
    leaves = [
        path_names(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]
    ]
    if call_order is None:
        return sorted(leaves, key=_natural_key)
    by_module: dict[Path, list[str]] = {}
    for leaf in leaves:
        by_module.setdefault(leaf[:-1], []).append(leaf[-1])
    ordered: list[Path] = []
    for module in call_order:
        module = tuple(str(k) for k in module)
        for name in _owner_first(by_module.pop(module, [])):
            ordered.append((*module, name))
    # Parameters of modules the trace did not see (unused), at the end.
    for module in sorted(by_module, key=_natural_key):
        ordered.extend((*module, n) for n in _owner_first(by_module[module]))
    return ordered


def chunk_groups(
    ordered: Sequence[Path],
    groups_number: int,
    *,
    attached: Callable[[Path], bool] | None = None,
) -> tuple[tuple[Path, ...], ...]:
    """MindSpore's nested suffix groups of leaves given in call order.

    Leaves are cut into chunks in order: a BatchNorm or bias leaf joins the
    current chunk (it belongs to the weight before it); another leaf closes
    the current chunk once that has at least 3 leaves. With
    ``stride = len(chunks) // groups_number``, group ``i`` is every leaf from
    chunk ``i * stride`` to the end: group 0 is all parameters, each group
    a suffix of the one before. Fewer chunks than groups: every group is all
    parameters (with a warning).

    Args:
      ordered: leaf paths in call order (`ordered_leaves`).
      groups_number: the number of groups.
      attached: whether a leaf stays with the weight before it; default:
        its name contains ``bias``, or its module name ``bn``/``norm``.

    Returns:
      ``groups_number`` tuples of leaf paths.
    """
    n = validation.check_int("groups_number", groups_number, minimum=1)
    if attached is None:
        attached = _default_attached
    chunks: list[list[Path]] = []
    current: list[Path] = []
    for leaf in ordered:
        if attached(leaf):
            current.append(leaf)
        elif len(current) >= 3:
            chunks.append(current)
            current = [leaf]
        else:
            current.append(leaf)
    if current:
        chunks.append(current)
    stride = len(chunks) // n
    if stride == 0:
        # Up to one group per chunk, the groups still differ.
        advice = (
            f"Use at most {len(chunks)} `param_groups` "
            "(`grad_freeze.param_groups` in the config) for these "
            "parameters to freeze."
            if len(chunks) > 1
            else "One chunk cannot be split: nothing can be frozen."
        )
        user_warnings.warn(
            f"Gradient freezing: {len(chunks)} parameter chunks for {n} "
            f"groups; every group trains all parameters (no freezing). "
            f"{advice}",
            UserWarning,
        )
    return tuple(
        tuple(leaf for chunk in chunks[i * stride :] for leaf in chunk)
        for i in range(n)
    )


def model_order(model, sample_inputs) -> tuple[list, list]:
    """Module paths of a Linen or NNX model in call order, and its BNs."""
    calls = model_graph.module_calls(model, sample_inputs)
    call_order = list(dict.fromkeys(c.path for c in calls))
    norms = [c.path for c in calls if c.kind == "batch_norm"]
    return call_order, norms


def _attached_to(norms) -> Callable[[Path], bool]:
    norms = {tuple(str(k) for k in m) for m in norms}
    return lambda leaf: "bias" in leaf[-1].lower() or leaf[:-1] in norms


def split_parameters_groups(
    params_or_model: Any, groups_number: int, *, sample_inputs: Any = None
) -> tuple[tuple[Path, ...], ...]:
    """MindSpore's nested suffix groups of a model's parameters.

    Leaves are taken in the model's call order (not ``jax.tree_util``'s
    sorted key order, where ``Conv_10`` sorts before ``Conv_2``) and cut
    into chunks (`chunk_groups`): a BatchNorm or bias leaf stays with the
    weight before it. Group 0 is every parameter; group ``k`` the suffix
    from chunk ``k * stride``.

    Args:
      params_or_model: a Flax Linen or NNX module (traced on
        `sample_inputs` for the call order), or a parameter tree (taken in a
        natural sort of its paths).
      groups_number: the number of groups.
      sample_inputs: with a module, one batch of inputs (shapes only).

    Returns:
      ``groups_number`` tuples of parameter paths (tuples of names).
    """
    validation.check_int("groups_number", groups_number, minimum=1)
    if isinstance(params_or_model, (nn.Module, nnx.Module)):
        if sample_inputs is None:
            raise TypeError(
                "Splitting a model's parameters follows its call order, "
                "found by tracing it: pass `sample_inputs=`."
            )
        call_order, norms = model_order(params_or_model, sample_inputs)
        params = model_graph.param_shapes(params_or_model, sample_inputs)
        return chunk_groups(
            ordered_leaves(params, call_order),
            groups_number,
            attached=_attached_to(norms),
        )
    return chunk_groups(ordered_leaves(params_or_model), groups_number)


def _default_attached(leaf: Path) -> bool:
    module = "/".join(leaf[:-1]).lower()
    return "bias" in leaf[-1].lower() or "bn" in module or "norm" in module


def group_mask(params: Any, group: Sequence[Path]) -> Any:
    """A bool tree: which leaves of `params` are in `group`."""
    members = set(group)
    return jax.tree_util.tree_map_with_path(
        lambda path, _: path_names(path) in members, params
    )


# ---------------------------------------------------------------------------
# Updating a subset of the parameters.
# ---------------------------------------------------------------------------


def _is_masked(x) -> bool:
    return isinstance(x, optax.MaskedNode)


def mask_tree(tree: Any, mask: Any) -> Any:
    """`tree` with the leaves where `mask` is False replaced by MaskedNode."""
    return jax.tree.map(lambda x, m: x if m else optax.MaskedNode(), tree, mask)


def merge_trees(primary: Any, fallback: Any) -> Any:
    """`primary`'s leaves, and `fallback`'s where `primary` is masked."""
    return jax.tree.map(
        lambda p, f: f if _is_masked(p) else p,
        primary,
        fallback,
        is_leaf=_is_masked,
    )


def masked_update(
    optimizer: optax.GradientTransformation,
    grads: Any,
    opt_state: Any,
    params: Any,
    mask: Any,
    **extra_args,
):
    """Runs `optimizer` on the leaves in `mask` of one shared state.

    `grads` and `params` hold ``MaskedNode`` where `mask` is False. The
    optimizer sees only the masked-in leaves (as under ``optax.masked``),
    so nothing reads, decays or normalizes a frozen leaf: its slots in
    `opt_state` come back untouched. Shared non-parameter fields (step
    counts) advance.

    Returns:
      ``(updates, opt_state)``: updates with ``MaskedNode`` at frozen leaves,
      the full state.
    """
    sub_state = optax.tree_map_params(
        optimizer, lambda s, m: s if m else optax.MaskedNode(), opt_state, mask
    )
    if isinstance(optimizer, optax.GradientTransformationExtraArgs):
        updates, new_sub = optimizer.update(
            grads, sub_state, params, **extra_args
        )
    else:
        updates, new_sub = optimizer.update(grads, sub_state, params)
    return updates, _merge_states(optimizer, new_sub, opt_state)


@jax.tree_util.register_pytree_node_class
class _ParamsSlot:
    """Stands for the whole parameter tree in an optimizer state's layout."""

    def tree_flatten(self):
        return (), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        del aux, children
        return cls()


def _merge_states(optimizer, new_sub: Any, old: Any) -> Any:
    """The new sub-state's values, and `old`'s where the sub-state is masked."""
    return _merge_param_parts(optimizer, merge_trees, new_sub, old)


def _trained_at(column: np.ndarray, depth: jax.Array) -> jax.Array:
    """Whether a leaf trained at the depths where `column` is True trains at
    the traced `depth`."""
    m = int(column.sum())
    if m in (0, len(column)):  # at every depth, or at none: a constant
        return jnp.asarray(m > 0)
    if column[:m].all():  # the first m depths: a comparison
        return jnp.asarray(depth < m)
    return jnp.asarray(column)[depth]


def keep_frozen(optimizer, trained: Any, new: Any, old: Any) -> tuple:
    """`new` ``(params, opt_state)``, with `old`'s at the leaves where the
    traced bool tree `trained` is False (their params and optimizer slots).

    Shared non-parameter fields of the state (step counts) take `new`'s, as
    in `masked_update`.
    """

    def select(new_tree, old_tree):
        return jax.tree.map(jnp.where, trained, new_tree, old_tree)

    (params, opt_state), (old_params, old_state) = new, old
    return select(params, old_params), _merge_param_parts(
        optimizer, select, opt_state, old_state
    )


def _merge_param_parts(optimizer, merge_params, new: Any, old: Any) -> Any:
    """`new` state, its parameter-shaped parts ``merge_params(new, old)``.

    Parameter-shaped parts of the state are found as ``optax.tree_map_params``
    finds them: by initializing the optimizer on a placeholder.
    """
    layout = optimizer.init(_ParamsSlot())

    def merge(slot, new, previous):
        if isinstance(slot, _ParamsSlot):
            return merge_params(new, previous)
        return new

    return jax.tree.map(
        merge,
        layout,
        new,
        old,
        is_leaf=lambda x: isinstance(x, _ParamsSlot),
    )


# ---------------------------------------------------------------------------
# The plan of a freezing run.
# ---------------------------------------------------------------------------


# The key of the warm-up program: it trains every depth (read from the
# state's position inside the program) with the depth's frozen gradients
# zeroed and its frozen params and optimizer slots restored after the
# update, so it computes every gradient (no saving) but is one program for
# all depths. A step runs it at the positions before the warm-up's end, and
# its depth's own program after (`program_schedule.ProgramSchedule`).
MASKED = "masked"


class FreezeState(NamedTuple):
    """Position in the freeze sequence (``TrainState.algorithms.freeze``).

    Attributes:
      position: index of the next step in the sequence, ``int32`` scalar.
    """

    position: jax.Array


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
    """

    groups: tuple[tuple[Path, ...], ...]
    sequence: np.ndarray
    group_optimizers: tuple[optax.GradientTransformation, ...] | None = None
    micro_steps: int = 1
    wrap: bool = True

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
        object.__setattr__(self, "sequence", sequence.astype(np.int32))

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


def restrict_groups(
    groups: Sequence[Sequence[Path]], params: Any
) -> tuple[tuple[Path, ...], ...]:
    """Groups made for one parameter tree, applied to another.

    LessBN removes BatchNorm parameters and adds an FN multiplier after the
    groups were cut on the original model (as MindSpore cuts them on the
    network's own parameters): removed leaves drop out; a new leaf joins
    every group holding a leaf of its module, and always group 0 (which
    trains everything).
    """
    present = [
        path_names(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]
    ]
    known = {leaf for group in groups for leaf in group}
    extra = [leaf for leaf in present if leaf not in known]
    kept = set(present)
    restricted = []
    for k, group in enumerate(groups):
        modules = {leaf[:-1] for leaf in group}
        restricted.append(
            tuple(leaf for leaf in group if leaf in kept)
            + tuple(e for e in extra if k == 0 or e[:-1] in modules)
        )
    return tuple(restricted)


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

    def make(params) -> Freezing:
        return Freezing(
            groups_of(params, groups, groups_number),
            sequence,
            micro_steps=micro_steps,
            wrap=strategy != freeze_sequence.PROGRESSIVE_STRATEGY,
        )

    return make


def groups_of(
    params: Any, groups: Sequence[Sequence[Path]] | None, groups_number: int
) -> tuple[tuple[Path, ...], ...]:
    """The freezing groups of `params`: `groups` (cut on the model) applied
    to them, or, without, the params cut in a natural sort of their paths."""
    if groups is None:
        return chunk_groups(ordered_leaves(params), groups_number)
    return restrict_groups(groups, params)
