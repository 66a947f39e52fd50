# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient centralization, layout-aware, with MindSpore's rules.

Gradient centralization (Yong et al., 2020) removes from each output unit's
gradient its mean over the unit's fan-in:

.. math::

  g_{:, o} \\leftarrow g_{:, o} - \\operatorname{mean}(g_{:, o})

The fan-in axes come from the layer that owns each kernel
(`boostax.gradient_centralization_axes`, ``fan_in.py``): a dense kernel
``(in, out)`` averages over ``in``, a convolution's ``(kh, kw, in, out)``
over ``(kh, kw, in)``, an attention query ``(in, heads, head_dim)`` over
``in`` alone (each head's unit keeps its own mean otherwise), the attention
output ``(heads, head_dim, out)`` over ``(heads, head_dim)``; embedding
tables and a language model's vocabulary-sized output layer have no fan-in
to centralize. Given no axes, the *rank rule* applies: for Flax kernels
``(..., in, out)`` the mean runs over every axis but the last, which is
right for dense and convolution kernels only. ``optax.centralize``
averages over every axis but the *first*, which is right only for
output-first layouts (PyTorch, Equinox): on a Flax conv kernel ``(kh, kw,
in, out)`` it centralizes each ``kh`` row instead of each output channel.

MindSpore's rules decide which leaves are centralized: not 1-D leaves, not
leaves whose fan-in is not a multiple of 16 (e.g. a stem conv on 3 input
channels), not grouped or depthwise convolutions, not the FN head, not
parameters whose name contains ``beta``, ``gamma``, ``bias`` or ``scale``.
With axes, the fan-in is the product of their sizes (the rank rule reads
``shape[-2]``).
"""

from __future__ import annotations

import dataclasses
import math
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


def _is_axes_entry(entry: Any) -> bool:
    """``None`` or a tuple (or list) of ints: one leaf of an `axes` tree."""
    return entry is None or (
        isinstance(entry, (tuple, list))
        and all(validation.is_int(a) for a in entry)
    )


def _check_axes(name: str, axes: Any) -> None:
    """`axes` is ``None``, a function of the params, or a pytree of
    entries (tuples of ints, or ``None``)."""
    if axes is None or callable(axes):
        return
    bad = [
        leaf
        for leaf in jax.tree.leaves(axes, is_leaf=_is_axes_entry)
        if not _is_axes_entry(leaf)
    ]
    if bad:
        raise TypeError(
            f"`{name}` must be None, a pytree with one tuple of axes (ints) "
            "or None per leaf of the params, or a function of the params "
            f"returning one; got a leaf {validation.got(bad[0])[4:]}."
        )


def normalize_axes(
    axes: Sequence[int], shape: Sequence[int], where: str
) -> tuple[int, ...]:
    """`axes` of an array of `shape` as sorted non-negative ints.

    Raises a ValueError naming `where` unless they are distinct, in range,
    at least one, and leave at least one (output) axis out.
    """
    ndim = len(shape)
    if not all(validation.is_int(a) for a in axes):
        raise TypeError(
            f"The fan-in axes (`axes`) of {where} must be ints, "
            f"{validation.got(axes)}."
        )
    normal = sorted(int(a) % ndim if -ndim <= a < ndim else -1 for a in axes)
    if not axes or -1 in normal or len(set(normal)) != len(normal):
        problem = "no axis" if not axes else "axes out of range or repeated"
    elif len(normal) == ndim:
        problem = "every axis: no output axis is left"
    else:
        return tuple(normal)
    raise ValueError(
        f"The fan-in axes (`axes`) of {where} (shape {tuple(shape)}) must be "
        "distinct axes in range that leave at least one output axis (None "
        f"leaves it uncentralized); got {tuple(axes)}: {problem}."
    )


def centralize(
    g: jax.Array, layout: str = "flax", axes: Sequence[int] | None = None
) -> jax.Array:
    """Subtracts from `g` its mean over its fan-in axes.

    Args:
      g: a gradient.
      layout: without `axes`, the rank rule: every axis but the last
        (``"flax"``) or but the first (``"output_first"``). 1-D `g` is
        returned unchanged.
      axes: the fan-in axes (from the layer, see
        `boostax.gradient_centralization_axes`).
    """
    g = jnp.asarray(g)
    if axes is None:
        _check_layout(layout)
        if g.ndim < 2:
            return g
        axes = _reduce_axes(g.ndim, layout)
    else:
        axes = normalize_axes(axes, g.shape, "`g`")
    mean = jnp.mean(g.astype(jnp.float32), axis=axes, keepdims=True)
    return (g - mean).astype(g.dtype)


@dataclasses.dataclass(frozen=True)
class MaskRules:
    """MindSpore's rules of which leaves are centralized (checked).

    Attributes:
      excluded: module paths (tuples of names) left alone.
      fan_in_multiple: a leaf's fan-in must be a multiple of this.
      excluded_names: substrings of parameter names left alone.
      layout: the rank rule's layout, for leaves given no axes.
    """

    excluded: tuple[tuple[str, ...], ...]
    fan_in_multiple: int
    excluded_names: tuple[str, ...]
    layout: str = "flax"

    @classmethod
    def of(
        cls, excluded_modules, fan_in_multiple, excluded_names, layout="flax"
    ) -> MaskRules:
        """The rules, each argument checked (named as the mask's)."""
        _check_layout(layout)
        _check_fan_in_multiple(fan_in_multiple)
        modules = _check_names(
            "excluded_modules",
            excluded_modules,
            "module paths (tuples of names)",
        )
        for module in modules:
            if not isinstance(module, (list, tuple)):
                raise TypeError(
                    "Each entry of `excluded_modules` must be a module path "
                    f"(a tuple of names), {validation.got(module)}."
                )
        names = _check_names("excluded_names", excluded_names, "strs")
        for name in names:
            validation.check_str("excluded_names", name)
        return cls(
            tuple(tuple(str(k) for k in m) for m in modules),
            fan_in_multiple,
            tuple(names),
            layout,
        )

    def skip_reason(
        self,
        names: tuple[str, ...],
        shape: Sequence[int],
        axes: Sequence[int] | None = None,
    ) -> str | None:
        """Why the leaf at `names` is not centralized, or ``None`` if it is.

        Its fan-in is the product of the sizes of `axes` (the rank rule's
        ``shape[-2]``, or ``shape[1]`` output-first, without them).
        """
        if len(shape) < 2:
            return "1-D"
        if any(names[: len(m)] == m for m in self.excluded):
            return "excluded module (grouped convolution or FN head)"
        for name in names:
            for excluded in self.excluded_names:
                if excluded in name.lower():
                    return f"name contains {excluded!r}"
        fan_in = (
            _fan_in(shape, self.layout)
            if axes is None
            else math.prod(shape[a] for a in axes)
        )
        if fan_in % self.fan_in_multiple:
            return (
                f"fan-in {fan_in} is not a multiple of {self.fan_in_multiple}"
            )
        return None


def _leaf_axes(params: Any, axes: Any) -> list[tuple[int, ...] | None]:
    """`axes` (a tree or a function of `params`) as one checked entry per
    leaf of `params`, in leaf order."""
    tree = axes(params) if callable(axes) else axes
    flat = jax.tree_util.tree_flatten_with_path(params)
    try:
        entries = flat[1].flatten_up_to(tree)
    except (ValueError, TypeError) as e:
        raise ValueError(
            "`axes` must be a pytree with the structure of the params (one "
            f"tuple of axes or None per leaf): {e}"
        ) from e
    checked = []
    for (path, leaf), entry in zip(flat[0], entries, strict=True):
        where = "/".join(path_names(path))
        if not _is_axes_entry(entry):
            raise TypeError(
                f"`axes` must give each leaf a tuple of ints or None; leaf "
                f"{where} has {validation.got(entry)[4:]}."
            )
        shape = jnp.shape(leaf)
        checked.append(
            None if entry is None else normalize_axes(entry, shape, where)
        )
    return checked


def _mask_leaves(params: Any, rules: MaskRules, axes: Any) -> list[bool]:
    """`gradient_centralization_mask` as a list, in leaf order."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    entries = [None] * len(flat) if axes is None else _leaf_axes(params, axes)
    return [
        (axes is None or entry is not None)
        and rules.skip_reason(path_names(path), jnp.shape(leaf), entry) is None
        for (path, leaf), entry in zip(flat, entries, strict=True)
    ]


def _given_mask(params: Any, mask: Any, entries: list | None) -> list[bool]:
    """A user's `mask` (a tree or a function of `params`) in leaf order;
    with `entries` (from `axes`), it may not select a leaf without axes."""
    tree = mask(params) if callable(mask) else mask
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    on = [bool(b) for b in treedef.flatten_up_to(tree)]
    if entries is None:
        return on
    for (path, _), selected, entry in zip(flat, on, entries, strict=True):
        if selected and entry is None:
            raise ValueError(
                f"`mask` selects {'/'.join(path_names(path))} for "
                "centralization, and `axes` gives it None (no fan-in): give "
                "it axes, or leave it out of the mask."
            )
    return on


def gradient_centralization_mask(
    params: Any,
    *,
    excluded_modules: Sequence[Sequence[Any]] = (),
    layout: str = "flax",
    fan_in_multiple: int = 16,
    excluded_names: Sequence[str] = EXCLUDED_NAMES,
    axes: Any = None,
) -> Any:
    """Which leaves of `params` gradient centralization changes (MindSpore).

    A leaf is centralized iff it has at least 2 dimensions, its fan-in is a
    multiple of `fan_in_multiple`, no part of its name contains one of
    `excluded_names`, and it does not belong to one of `excluded_modules`
    (grouped or depthwise convolutions and FN heads, found from the model's
    structure by `boostax.less_bn` or given by hand).

    The fan-in is, with `axes`, the product of the sizes of the leaf's
    fan-in axes (a leaf given ``None`` is not centralized); without, the
    rank rule's ``shape[-2]`` (``shape[1]`` output-first). MindSpore tests
    a convolution's input channels; for odd kernel windows (1, 3, 5, 7)
    ``kh * kw * in`` is a multiple of 16 exactly when ``in`` is.

    Args:
      params: the parameters (or gradients) pytree.
      excluded_modules: module paths (tuples of names) whose parameters are
        left alone.
      layout: ``"flax"`` for ``(..., in, out)`` kernels, ``"output_first"``
        for ``(out, in, ...)`` (PyTorch, Equinox).
      fan_in_multiple: skip leaves whose fan-in is not a multiple of this;
        1 disables the rule.
      excluded_names: substrings of parameter names to leave alone.
      axes: each leaf's fan-in axes from its layer: a pytree with the
        structure of `params` holding a tuple of axes or ``None`` per leaf,
        or a function of the params returning one
        (`boostax.gradient_centralization_axes`). ``None``: the rank rule.

    Returns:
      A pytree of bools with the structure of `params`.
    """
    rules = MaskRules.of(
        excluded_modules, fan_in_multiple, excluded_names, layout
    )
    _check_axes("axes", axes)
    treedef = jax.tree.structure(params)
    return treedef.unflatten(_mask_leaves(params, rules, axes))


def centralize_gradients(
    mask: Any | Callable[[Any], Any] | None = None,
    *,
    layout: str = "flax",
    fan_in_multiple: int = 16,
    axes: Any = None,
) -> optax.GradientTransformation:
    """Gradient centralization as an Optax transform.

    .. math::

      g \\leftarrow g - \\operatorname{mean}_{\\text{fan-in axes}}(g)

    computed in float32, returned in the gradient's dtype.

    Args:
      mask: which leaves to centralize: a pytree of bools, or a function of
        the params returning one. ``None`` applies MindSpore's name and
        shape rules (`gradient_centralization_mask`); a mask given overrides
        them. 1-D leaves are never changed.
      layout: without `axes`, the rank rule: ``"flax"`` (kernels
        ``(..., in, out)``: mean over every axis but the last) or
        ``"output_first"`` (``(out, in, ...)``: every axis but the first, as
        ``optax.centralize``). Only ``"flax"`` is accepted with `axes`.
      fan_in_multiple: with ``mask=None``, skip leaves whose fan-in is not a
        multiple of this (MindSpore: 16); 1 disables the rule.
      axes: each leaf's fan-in axes, from the layer that owns it: a pytree
        with the params' structure holding a tuple of axes or ``None`` (not
        centralized) per leaf, or a function of the params returning one
        (`boostax.gradient_centralization_axes`). ``None``: the rank rule
        of `layout`. A `mask` may not select a leaf whose axes are ``None``.

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

      An attention query kernel ``(in, heads, head_dim)`` centralized over
      its input axis only, per head and per unit:

      >>> g = {"query": jnp.ones((16, 2, 4)).at[0].set(3.0)}
      >>> tx = boostax.centralize_gradients(axes={"query": (0,)})
      >>> float(tx.update(g, tx.init(g))[0]["query"].sum(axis=0).max())
      0.0

    References:
      Yong et al., `Gradient Centralization: A New Optimization Technique
      for Deep Neural Networks <https://arxiv.org/abs/2004.01461>`_, 2020.
    """
    _check_mask("mask", mask)
    _check_layout(layout)
    _check_fan_in_multiple(fan_in_multiple)
    _check_axes("axes", axes)
    if axes is not None and layout != "flax":
        raise ValueError(
            "`layout` chooses the rank rule's axes, and `axes` gives each "
            f"leaf's own: drop `layout` ({layout!r}) or `axes`."
        )
    rules = MaskRules((), fan_in_multiple, EXCLUDED_NAMES, layout)

    def update_fn(updates, state, params=None):
        tree = updates if params is None else params
        flat = jax.tree_util.tree_flatten_with_path(tree)[0]
        entries = [None] * len(flat) if axes is None else _leaf_axes(tree, axes)
        if mask is None:
            on = _mask_leaves(tree, rules, axes)
        else:
            on = _given_mask(tree, mask, entries if axes is not None else None)
        leaves, treedef = jax.tree.flatten(updates)
        leaves = [
            centralize(g, layout, entry) if selected else g
            for g, selected, entry in zip(leaves, on, entries, strict=True)
        ]
        return treedef.unflatten(leaves), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def with_gradient_centralization(
    optimizer: optax.GradientTransformation,
    *,
    weight_decay: float = 0.0,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    mask: Any | Callable[[Any], Any] | None = None,
    layout: str = "flax",
    fan_in_multiple: int = 16,
    axes: Any = None,
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
      mask, layout, fan_in_multiple, axes: see `centralize_gradients`.

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
            mask, layout=layout, fan_in_multiple=fan_in_multiple, axes=axes
        ),
        optimizer,
    )
