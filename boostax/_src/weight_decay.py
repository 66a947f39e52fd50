# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`auto_boost`'s L2 weight decay, in MindSpore's place, and its mask."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from boostax._src import tree_diff, validation


def decay_kernels(params: Any) -> Any:
    """The default weight-decay mask: leaves with more than one dimension.

    Kernels are decayed; biases, normalisation scales and offsets and the FN
    head's multiplier are not (the Flax ImageNet example's ``x.ndim > 1``).
    """
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def _checked_mask(mask: Any) -> Callable[[Any], Any]:
    """`mask` (a pytree or a function of the params) as a function of the
    params that refuses a tree not shaped like them.

    Optax applies the mask with ``jax.tree.map``, whose structure error
    names neither the argument nor the leaf; this runs when the step is
    traced, not on every call.
    """

    def mask_fn(params):
        tree = mask(params) if callable(mask) else mask
        try:
            # The params may hold MaskedNode subtrees (frozen leaves): the
            # mask must be a prefix of them, as optax.masked needs.
            jax.tree.map(lambda *_: None, tree, params)
        except (ValueError, TypeError):
            given = "returned" if callable(mask) else "is"
            where = tree_diff.first_difference(params, tree, "params")
            detail = ""
            if where is not None and where[0] != "params":
                detail = (
                    f" The first difference is at `{where[0]}`: the params "
                    f"hold {where[1]} there, the mask {where[2]}."
                )
            raise ValueError(
                "`weight_decay_mask` must have the params' structure (a "
                "bool for each leaf), or be a function of the params "
                f"returning one; it {given} {tree_diff.describe(tree)} for "
                f"params {tree_diff.describe(params)}.{detail}"
            ) from None
        return tree

    return mask_fn


@dataclasses.dataclass(frozen=True)
class WeightDecay:
    """L2 weight decay added to the gradient before anything else sees it.

    Attributes:
      rate: the decay (``rate * params`` is added to the gradient); 0: none.
      mask: which leaves are decayed (a bool pytree or a function of the
        params); ``None``: `decay_kernels`.
    """

    rate: float = 0.0
    mask: Any = None

    def __post_init__(self):
        if self.mask is None:
            object.__setattr__(self, "mask", decay_kernels)
            return
        if not callable(self.mask) and not jax.tree.leaves(self.mask):
            raise TypeError(
                "`weight_decay_mask` must be a pytree of bools like the "
                "params or a function of the params returning one, "
                f"{validation.got(self.mask)}."
            )
        object.__setattr__(self, "mask", _checked_mask(self.mask))

    def chain(self, optimizer: optax.GradientTransformation):
        """`optimizer` preceded by the decay (unchanged if there is none)."""
        if not self.rate:
            return optimizer
        return optax.chain(
            optax.add_decayed_weights(self.rate, self.mask), optimizer
        )
