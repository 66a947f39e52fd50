# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Loss scaling: static, dynamic and per group of layers.

Half-precision gradients underflow to zero when they are small. Loss
scaling multiplies the loss by ``S`` before the backward pass and divides
the gradients by ``S`` after it; a dynamic scale grows while gradients stay
finite and backs off (skipping the step) when they overflow.

MindSpore's *enhanced AMP* (`GroupLossScaleManager`) gives each group of
layers its own scale: boundaries ``enhanced_amp(x, l1, l2)`` in the forward
pass are identities whose backward multiplies the cotangent by
``S[l1] / S[l2]``, with ``S = [1, s_1, ..., s_n, 1]``, so the gradients of
group ``g`` come out scaled by ``s_g``. Each group's scale backs off alone
when its gradients overflow.

All state is a `LossScaleState` NamedTuple of arrays (jmp's
``DynamicLossScale`` loses ``min_loss_scale`` across ``jit``; here the
hyper-parameters are static configuration, never state).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from boostax._src import validation
from boostax._src.tree_utils import path_names


class LossScaleState(NamedTuple):
    """The state of a loss scale.

    Attributes:
      loss_scale: the current scale, float32: a scalar, or one per group.
      counter: consecutive finite steps since the last change, int32 (same
        shape as `loss_scale`).
    """

    loss_scale: jax.Array
    counter: jax.Array


def all_finite(tree: Any) -> jax.Array:
    """Whether every element of every leaf of `tree` is finite."""
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.result_type(x), jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def _scale(tree: Any, factor: jax.Array) -> Any:
    """``tree * factor`` computed in float32, in each leaf's dtype."""
    return jax.tree.map(
        lambda x: (x.astype(jnp.float32) * factor).astype(x.dtype), tree
    )


def _check_positive(name: str, value) -> float:
    return validation.check_number(name, value, minimum=0, open_minimum=True)


@dataclasses.dataclass(frozen=True)
class StaticLossScale:
    """A fixed loss scale (MindSpore's ``FixedLossScaleManager``).

    Overflowing steps are still skipped (``drop_overflow_update=True``).

    Args:
      loss_scale_value: the scale.
    """

    loss_scale_value: float = 1.0

    def __post_init__(self):
        _check_positive("loss_scale_value", self.loss_scale_value)

    def init(self) -> LossScaleState:
        return LossScaleState(
            jnp.asarray(self.loss_scale_value, jnp.float32),
            jnp.zeros([], jnp.int32),
        )

    def scale(self, loss: jax.Array, state: LossScaleState) -> jax.Array:
        return loss.astype(jnp.float32) * state.loss_scale

    def unscale(self, grads, state: LossScaleState, params=None):
        del params
        return _scale(grads, 1.0 / state.loss_scale)

    def adjust(self, state, grads, params=None):
        """The next state and whether the step may be applied."""
        del params
        return state, all_finite(grads)

    @contextlib.contextmanager
    def context(self, state):
        del state
        yield


def _check_bounds(min_loss_scale, max_loss_scale) -> None:
    low = _check_positive("min_loss_scale", min_loss_scale)
    high = _check_positive("max_loss_scale", max_loss_scale)
    if low > high:
        raise ValueError(
            "`min_loss_scale` must be <= `max_loss_scale`, got "
            f"{min_loss_scale!r} > {max_loss_scale!r}."
        )


@dataclasses.dataclass(frozen=True)
class DynamicLossScale(StaticLossScale):
    """A dynamic loss scale (MindSpore's ``DynamicLossScaleUpdateCell``).

    After `scale_window` finite steps in a row the scale is multiplied by
    `scale_factor` (at most `max_loss_scale`); after a step with a
    non-finite gradient it is divided by `scale_factor` (at least
    `min_loss_scale`) and the step is skipped.

    Args:
      loss_scale_value: the initial scale (MindSpore's default 2**24).
      scale_factor: growth and back-off factor (> 1).
      scale_window: finite steps between growths (>= 1).
      min_loss_scale, max_loss_scale: bounds of the scale.
    """

    loss_scale_value: float = 2.0**24
    scale_factor: float = 2.0
    scale_window: int = 2000
    min_loss_scale: float = 1.0
    max_loss_scale: float = 2.0**24

    def __post_init__(self):
        super().__post_init__()
        _check_bounds(self.min_loss_scale, self.max_loss_scale)
        validation.check_number(
            "scale_factor", self.scale_factor, minimum=1, open_minimum=True
        )
        validation.check_int("scale_window", self.scale_window, minimum=1)
        if not (
            self.min_loss_scale <= self.loss_scale_value <= self.max_loss_scale
        ):
            raise ValueError(
                "`loss_scale_value` must be in [min_loss_scale, "
                f"max_loss_scale] = [{self.min_loss_scale}, "
                f"{self.max_loss_scale}], got {self.loss_scale_value}."
            )

    def adjust(self, state, grads, params=None):
        del params
        finite = all_finite(grads)
        grow = finite & (state.counter + 1 >= self.scale_window)
        loss_scale = jnp.where(
            finite,
            jnp.where(
                grow, state.loss_scale * self.scale_factor, state.loss_scale
            ),
            state.loss_scale / self.scale_factor,
        )
        loss_scale = jnp.clip(
            loss_scale, self.min_loss_scale, self.max_loss_scale
        )
        counter = jnp.where(finite & ~grow, state.counter + 1, 0)
        return LossScaleState(loss_scale, counter.astype(jnp.int32)), finite


# ---------------------------------------------------------------------------
# Per-group loss scales.
# ---------------------------------------------------------------------------

_CONTEXT = threading.local()


def _masked(x) -> bool:
    return isinstance(x, optax.MaskedNode)


@jax.custom_vjp
def _boundary(x, ratio):
    return x


def _boundary_fwd(x, ratio):
    return x, ratio


def _boundary_bwd(ratio, g):
    scaled = jax.tree.map(
        lambda t: (t.astype(jnp.float32) * ratio).astype(t.dtype), g
    )
    return scaled, jnp.zeros_like(ratio)


_boundary.defvjp(_boundary_fwd, _boundary_bwd)


def enhanced_amp(x: Any, layer1: int, layer2: int) -> Any:
    """A loss-scale group boundary (MindSpore's ``enhanced_amp``).

    The identity in the forward pass; in the backward pass the cotangent is
    multiplied by ``S[layer1] / S[layer2]`` (float32, then cast back), where
    ``S = [1, s_1, ..., s_n, 1]`` are the group scales of the train step
    being traced. Place ``(x, 0, 1)`` at the model input,
    ``(x, g, g + 1)`` between groups ``g`` and ``g + 1`` and
    ``(x, n, n + 1)`` at the output: the gradients of group ``g``'s
    parameters are then scaled by ``s_g``. Outside a train step with group
    loss scaling (evaluation, plain ``apply``) it is the identity.

    Args:
      x: an array or pytree of arrays.
      layer1, layer2: indices into ``S``.
    """
    for name, value in (("layer1", layer1), ("layer2", layer2)):
        validation.check_int(name, value, minimum=0)
    scales = getattr(_CONTEXT, "scales", None)
    if scales is None:
        return x
    for name, value in (("layer1", layer1), ("layer2", layer2)):
        if not 0 <= value < scales.shape[0]:
            raise ValueError(
                f"`{name}` must be an int in [0, {scales.shape[0] - 1}] "
                f"(there are {scales.shape[0] - 2} groups), got {value!r}."
            )
    ratio = scales[layer1] / scales[layer2]
    return _boundary(x, jax.lax.stop_gradient(ratio))


def _is_group_index(label: Any) -> bool:
    """An int, or a 0-d integer array (a label tree built with jnp)."""
    if validation.is_int(label):
        return True
    dtype = getattr(label, "dtype", None)
    return (
        dtype is not None
        and getattr(label, "ndim", None) == 0
        and np.issubdtype(dtype, np.integer)
    )


def check_groups(name: str, groups: Any) -> int:
    """Checks loss-scale groups (`GroupLossScale`'s); returns their number.

    Args:
      name: the argument's name, for messages.
      groups: a non-empty list or tuple of groups, each a list or tuple of
        parameter paths (``"/"``-joined strings or tuples of names); or a
        label tree with an int group index (>= 0) per leaf.
    """
    if isinstance(groups, (list, tuple)):
        if not groups:
            raise ValueError(f"`{name}` must not be empty.")
        for g, group in enumerate(groups):
            if not isinstance(group, (list, tuple)):
                raise TypeError(
                    f"Each group of `{name}` must be a list or tuple of "
                    f"parameter paths, {validation.got(group)} for group "
                    f"{g}."
                )
            for path in group:
                if not isinstance(path, (str, list, tuple)):
                    raise TypeError(
                        f"The parameter paths of `{name}` must be "
                        "'/'-joined strs or tuples of names, "
                        f"{validation.got(path)} in group {g}."
                    )
        return len(groups)
    expected = (
        f"`{name}` must be a list of groups (each a list of parameter "
        "paths) or a label tree with an int group index >= 0 per leaf"
    )
    labels = jax.tree.leaves(groups)
    if not labels or not all(_is_group_index(k) for k in labels):
        raise TypeError(f"{expected}, {validation.got(groups)}.")
    if min(labels) < 0:
        raise ValueError(f"{expected}, got the index {min(labels)}.")
    return int(max(labels)) + 1


def check_init_loss_scale(init_loss_scale: Any, num_groups: int) -> None:
    """Checks one initial scale, or one per group: finite numbers > 0."""
    name = "init_loss_scale"
    if isinstance(init_loss_scale, (list, tuple)) or hasattr(
        init_loss_scale, "ndim"
    ):
        if getattr(init_loss_scale, "ndim", 1) == 0:  # a 0-d array
            init_loss_scale = init_loss_scale.item()
        else:
            scales = validation.check_numbers(
                name, init_loss_scale, minimum=0, open_minimum=True
            )
            if len(scales) not in (1, num_groups):
                raise ValueError(
                    f"`{name}` must be one number or one per group "
                    f"({num_groups}), got {len(scales)}."
                )
            return
    _check_positive(name, init_loss_scale)


def _group_paths(groups) -> list[set[tuple[str, ...]]]:
    return [
        {
            tuple(p.split("/")) if isinstance(p, str) else tuple(map(str, p))
            for p in group
        }
        for group in groups
    ]


def _owners(labels: Any) -> dict[tuple[str, ...], int]:
    """``{parameter path: group}`` of a label tree."""
    return {
        path_names(path): int(k)
        for path, k in jax.tree_util.tree_flatten_with_path(labels)[0]
    }


def _restricted_groups(params, owner, num_groups) -> tuple[tuple, ...]:
    """Groups covering `params`, from the `owner` of another model's (see
    `GroupLossScale.restricted`)."""
    groups: list[list[tuple[str, ...]]] = [[] for _ in range(num_groups)]
    for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = path_names(path)
        if name in owner:
            groups[owner[name]].append(name)
            continue
        module = {k for p, k in owner.items() if p[:-1] == name[:-1]}
        if len(module) != 1:
            raise ValueError(
                f"Parameter {'/'.join(name)!r} is not in the model the "
                "loss-scale groups were named on, and its module's "
                f"parameters are in groups {sorted(module)}: name the "
                "groups on the trained (reduced) model's parameters."
            )
        groups[module.pop()].append(name)
    return tuple(map(tuple, groups))


@dataclasses.dataclass(frozen=True, eq=False)
class GroupLossScale:
    """Per-group dynamic loss scales (MindSpore's enhanced AMP).

    Every step, a group whose gradients overflowed has its scale multiplied
    by `backoff` (``1/sqrt(2)``), every other group by `growth`
    (``2**(1/1000)``); the step is skipped if any group overflowed. Each
    group's gradients are divided by the scale its forward pass used
    (MindSpore divides by the updated scale, a 0.07% bias on clean steps).

    Args:
      init_loss_scale: initial scale of every group, or one per group.
      groups: the parameter groups: sequences of parameter paths (tuples of
        names or ``"/"``-joined strings), or a label tree with an int group
        index (0-based) per leaf. Every parameter must be in exactly one.
      backoff, growth: the per-step factors.
      min_loss_scale, max_loss_scale: bounds of each scale.
    """

    init_loss_scale: float | Sequence[float]
    groups: Any
    backoff: float = 2.0**-0.5
    growth: float = 2.0 ** (1 / 1000)
    min_loss_scale: float = 1.0
    max_loss_scale: float = 2.0**32

    @property
    def num_groups(self) -> int:
        if isinstance(self.groups, (list, tuple)):
            return len(self.groups)
        return int(max(jax.tree.leaves(self.groups))) + 1

    def __post_init__(self):
        count = check_groups("groups", self.groups)
        check_init_loss_scale(self.init_loss_scale, count)
        validation.check_number(
            "backoff", self.backoff, minimum=0, maximum=1, open_minimum=True
        )
        validation.check_number("growth", self.growth, minimum=1)
        _check_bounds(self.min_loss_scale, self.max_loss_scale)

    def init(self) -> LossScaleState:
        scales = np.broadcast_to(
            np.asarray(self.init_loss_scale, np.float32), (self.num_groups,)
        )
        return LossScaleState(
            jnp.asarray(scales, jnp.float32),
            jnp.zeros((self.num_groups,), jnp.int32),
        )

    def labels(self, params: Any) -> Any:
        """The group index of every leaf of `params`, validated."""
        if not isinstance(self.groups, (list, tuple)):
            labels = self.groups
            if jax.tree.structure(labels) != jax.tree.structure(params):
                raise ValueError(
                    "The label tree of `loss_scale_groups` must have the "
                    "structure of the parameters."
                )
            return labels
        groups = _group_paths(self.groups)
        leaves = jax.tree_util.tree_flatten_with_path(params)[0]
        names = [path_names(p) for p, _ in leaves]
        known = set(names)
        for g, group in enumerate(groups):
            unknown = sorted(group - known)
            if unknown:
                raise ValueError(
                    f"Loss-scale group {g} names parameters that do not "
                    f"exist: {['/'.join(u) for u in unknown[:5]]}."
                )
        labels = []
        for name in names:
            owners = [g for g, group in enumerate(groups) if name in group]
            if len(owners) != 1:
                raise ValueError(
                    f"Parameter {'/'.join(name)!r} is in "
                    + (f"groups {owners}" if owners else "no group")
                    + ": the loss-scale groups must cover every parameter "
                    "exactly once."
                )
            labels.append(owners[0])
        return jax.tree.unflatten(jax.tree.structure(params), labels)

    def restricted(self, params: Any, original_params: Any) -> GroupLossScale:
        """These groups, named on `original_params`, applied to `params`.

        LessBN removes BatchNorm parameters (and turns a dense bias into an
        FN multiplier) after the groups were named on the original model.
        As gradient freezing does (`restrict_groups`), removed leaves drop
        out of their groups (a group may end up empty: it keeps its index,
        which the model's `enhanced_amp` boundaries use), and a new leaf
        joins the group of the other leaves of its module. Groups that
        already cover `params` exactly are returned as they are.

        Args:
          params: the parameters trained (e.g. after LessBN).
          original_params: the parameters the groups were named on.

        Returns:
          A `GroupLossScale` whose groups cover `params`.

        Raises:
          ValueError: if the groups do not cover `original_params` either,
            or a new leaf's module spans several groups.
        """
        try:
            self.labels(params)
            return self
        except ValueError:
            pass
        labels = self.labels(original_params)  # raises: names of neither
        owner = _owners(
            jax.tree.unflatten(
                jax.tree.structure(original_params), jax.tree.leaves(labels)
            )
        )
        groups = _restricted_groups(params, owner, self.num_groups)
        return dataclasses.replace(self, groups=groups)

    def scale(self, loss, state):
        return loss.astype(jnp.float32)  # the boundaries scale the backward

    def _pairs(self, grads, params) -> list[tuple[jax.Array, int]]:
        """``(gradient, group)`` of each leaf, frozen (masked) ones skipped."""
        pairs = []
        jax.tree.map(
            lambda g, k: None if _masked(g) else pairs.append((g, k)),
            grads,
            self.labels(params),
            is_leaf=_masked,
        )
        return pairs

    def unscale(self, grads, state, params=None):
        """Divides each group's gradients by its scale.

        `params` is the full parameter tree (it defines the groups);
        `grads` may hold ``optax.MaskedNode`` for frozen leaves.
        """
        return jax.tree.map(
            lambda g, k: (
                g
                if _masked(g)
                else (g.astype(jnp.float32) / state.loss_scale[k]).astype(
                    g.dtype
                )
            ),
            grads,
            self.labels(params),
            is_leaf=_masked,
        )

    def group_finite(self, grads, params) -> jax.Array:
        """Per group: whether all its gradients are finite."""
        finite = [jnp.array(True)] * self.num_groups
        for g, k in self._pairs(grads, params):
            finite[k] = finite[k] & jnp.all(jnp.isfinite(g))
        return jnp.stack(finite)

    def adjust(self, state, grads, params=None):
        finite = self.group_finite(grads, params)
        loss_scale = jnp.clip(
            state.loss_scale * jnp.where(finite, self.growth, self.backoff),
            self.min_loss_scale,
            self.max_loss_scale,
        )
        counter = jnp.where(finite, state.counter + 1, 0).astype(jnp.int32)
        return LossScaleState(loss_scale, counter), jnp.all(finite)

    @contextlib.contextmanager
    def context(self, state):
        """Makes ``S = [1, s_1, ..., s_n, 1]`` visible to `enhanced_amp`."""
        previous = getattr(_CONTEXT, "scales", None)
        one = jnp.ones((1,), jnp.float32)
        _CONTEXT.scales = jnp.concatenate([one, state.loss_scale, one])
        try:
            yield
        finally:
            _CONTEXT.scales = previous


LossScale = StaticLossScale | DynamicLossScale | GroupLossScale


def check_loss_scale(loss_scale) -> None:
    if loss_scale is not None and not isinstance(
        loss_scale, (StaticLossScale, GroupLossScale)
    ):
        raise TypeError(
            "`loss_scale` must be a StaticLossScale, DynamicLossScale or "
            f"GroupLossScale, got {type(loss_scale).__name__}."
        )
