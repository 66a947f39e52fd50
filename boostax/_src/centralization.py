# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient centralization, layout-aware, with MindSpore's rules.

Gradient centralization (Yong et al., 2020) removes from each output unit's
gradient its mean over the unit's fan-in:

.. math::

  g_{:, o} \\leftarrow g_{:, o} - \\operatorname{mean}(g_{:, o})

For Flax kernels ``(..., in, out)`` the mean runs over every axis but the
last. ``optax.centralize`` averages over every axis but the *first*, which
is right only for output-first layouts (PyTorch, Equinox): on a Flax conv
kernel ``(kh, kw, in, out)`` it centralizes each ``kh`` row instead of each
output channel.

MindSpore's rules decide which leaves are centralized: not 1-D leaves, not
leaves whose fan-in is not a multiple of 16 (e.g. a stem conv on 3 input
channels), not grouped or depthwise convolutions, not the FN head, not
parameters whose name contains ``beta``, ``gamma``, ``bias`` or ``scale``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from boostax._src import validation
from boostax._src.tree_utils import path_names

LAYOUTS = ("flax", "output_first")
EXCLUDED_NAMES = ("beta", "gamma", "bias", "scale")


def _check_layout(layout: str) -> None:
    validation.check_one_of("layout", layout, LAYOUTS)


def _check_fan_in_multiple(fan_in_multiple) -> int:
    return validation.check_int("fan_in_multiple", fan_in_multiple, minimum=1)


def _check_mask(name: str, mask: Any) -> None:
    """A mask is ``None``, a function of the params, or a pytree of bools."""
    if mask is None or callable(mask):
        return
    bad = [
        leaf
        for leaf in jax.tree.leaves(mask)
        if not isinstance(leaf, (bool, np.bool_))
        and not (
            hasattr(leaf, "dtype")
            and getattr(leaf, "ndim", None) == 0
            and leaf.dtype == np.bool_
        )
    ]
    if bad:
        raise TypeError(
            f"`{name}` must be None, a pytree of bools or a function of the "
            f"params returning one, got a leaf {validation.got(bad[0])[4:]}."
        )


def _check_names(name: str, names: Any, what: str) -> list:
    """A list or tuple (not a str, whose items are its characters)."""
    return validation.check_sequence(name, names, f"a list or tuple of {what}")


def _reduce_axes(ndim: int, layout: str) -> tuple[int, ...]:
    """Every axis but the output axis."""
    return tuple(range(ndim - 1)) if layout == "flax" else tuple(range(1, ndim))


def _fan_in(shape: Sequence[int], layout: str) -> int:
    return shape[-2] if layout == "flax" else shape[1]


def centralize(g: jax.Array, layout: str = "flax") -> jax.Array:
    """Subtracts from `g` its mean over every axis but the output axis."""
    _check_layout(layout)
    g = jnp.asarray(g)
    if g.ndim < 2:
        return g
    axes = _reduce_axes(g.ndim, layout)
    mean = jnp.mean(g.astype(jnp.float32), axis=axes, keepdims=True)
    return (g - mean).astype(g.dtype)


def gradient_centralization_mask(
    params: Any,
    *,
    excluded_modules: Sequence[Sequence[Any]] = (),
    layout: str = "flax",
    fan_in_multiple: int = 16,
    excluded_names: Sequence[str] = EXCLUDED_NAMES,
) -> Any:
    """Which leaves of `params` gradient centralization changes (MindSpore).

    A leaf is centralized iff it has at least 2 dimensions, its fan-in is a
    multiple of `fan_in_multiple`, no part of its name contains one of
    `excluded_names`, and it does not belong to one of `excluded_modules`
    (grouped or depthwise convolutions and FN heads, found from the model's
    structure by `boostax.less_bn` or given by hand).

    Args:
      params: the parameters (or gradients) pytree.
      excluded_modules: module paths (tuples of names) whose parameters are
        left alone.
      layout: ``"flax"`` for ``(..., in, out)`` kernels, ``"output_first"``
        for ``(out, in, ...)`` (PyTorch, Equinox).
      fan_in_multiple: skip leaves whose fan-in is not a multiple of this;
        1 disables the rule.
      excluded_names: substrings of parameter names to leave alone.

    Returns:
      A pytree of bools with the structure of `params`.
    """
    _check_layout(layout)
    _check_fan_in_multiple(fan_in_multiple)
    modules = _check_names(
        "excluded_modules", excluded_modules, "module paths (tuples of names)"
    )
    for module in modules:
        if not isinstance(module, (list, tuple)):
            raise TypeError(
                "Each entry of `excluded_modules` must be a module path (a "
                f"tuple of names), {validation.got(module)}."
            )
    for name in _check_names("excluded_names", excluded_names, "strs"):
        validation.check_str("excluded_names", name)
    excluded = [tuple(str(k) for k in m) for m in modules]

    def rule(path, leaf) -> bool:
        names = path_names(path)
        shape = jnp.shape(leaf)
        return (
            len(shape) >= 2
            and _fan_in(shape, layout) % fan_in_multiple == 0
            and not any(x in n.lower() for n in names for x in excluded_names)
            and not any(names[: len(m)] == m for m in excluded)
        )

    return jax.tree_util.tree_map_with_path(rule, params)


def centralize_gradients(
    mask: Any | Callable[[Any], Any] | None = None,
    *,
    layout: str = "flax",
    fan_in_multiple: int = 16,
) -> optax.GradientTransformation:
    """Gradient centralization as an Optax transform.

    .. math::

      g \\leftarrow g - \\operatorname{mean}_{\\text{all axes but the
      output axis}}(g)

    computed in float32, returned in the gradient's dtype.

    Args:
      mask: which leaves to centralize: a pytree of bools, or a function of
        the params returning one. ``None`` applies MindSpore's name and
        shape rules (`gradient_centralization_mask`); a mask given overrides
        them. 1-D leaves are never changed.
      layout: ``"flax"`` (kernels ``(..., in, out)``: mean over every axis
        but the last) or ``"output_first"`` (``(out, in, ...)``: every axis
        but the first, as ``optax.centralize``).
      fan_in_multiple: with ``mask=None``, skip leaves whose fan-in is not a
        multiple of this (MindSpore: 16); 1 disables the rule.

    Returns:
      An ``optax.GradientTransformation`` (stateless).

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> tx = boostax.centralize_gradients(fan_in_multiple=1)
      >>> g = {"kernel": jnp.array([[1.0, 2.0], [3.0, 6.0]])}
      >>> updates, _ = tx.update(g, tx.init(g))
      >>> updates["kernel"]  # each column (output unit) now sums to 0
      Array([[-1., -2.],
             [ 1.,  2.]], dtype=float32)

    References:
      Yong et al., `Gradient Centralization: A New Optimization Technique
      for Deep Neural Networks <https://arxiv.org/abs/2004.01461>`_, 2020.
    """
    _check_mask("mask", mask)
    _check_layout(layout)
    _check_fan_in_multiple(fan_in_multiple)

    def update_fn(updates, state, params=None):
        tree = updates if params is None else params
        if mask is None:
            leaves_mask = gradient_centralization_mask(
                tree, layout=layout, fan_in_multiple=fan_in_multiple
            )
        else:
            leaves_mask = mask(tree) if callable(mask) else mask
        updates = jax.tree.map(
            lambda g, on: centralize(g, layout) if on else g,
            updates,
            leaves_mask,
        )
        return updates, state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def with_gradient_centralization(
    optimizer: optax.GradientTransformation,
    *,
    weight_decay: float = 0.0,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    mask: Any | Callable[[Any], Any] | None = None,
    layout: str = "flax",
    fan_in_multiple: int = 16,
) -> optax.GradientTransformation:
    """Inserts gradient centralization in MindSpore's place.

    MindSpore's optimizers add the weight-decay term to the gradient, then
    centralize, then run the optimizer core::

      g <- g + weight_decay * w      (optax.add_decayed_weights)
      g <- centralize(g)             (centralize_gradients)
      updates <- optimizer(g)

    Args:
      optimizer: the optimizer core (e.g. ``optax.sgd(lr, momentum=0.9)``).
      weight_decay: coupled (L2) weight decay added before centralization.
      weight_decay_mask: which leaves are decayed (as in
        ``optax.add_decayed_weights``).
      mask, layout, fan_in_multiple: see `centralize_gradients`.

    Returns:
      The chained ``optax.GradientTransformation``.
    """
    validation.check_instance(
        "optimizer",
        optimizer,
        optax.GradientTransformation,
        "an optax.GradientTransformation",
    )
    validation.check_number("weight_decay", weight_decay, minimum=0)
    _check_mask("weight_decay_mask", weight_decay_mask)
    decay = (
        optax.add_decayed_weights(weight_decay, weight_decay_mask)
        if weight_decay
        else optax.identity()
    )
    return optax.chain(
        decay,
        centralize_gradients(
            mask, layout=layout, fan_in_multiple=fan_in_multiple
        ),
        optimizer,
    )
