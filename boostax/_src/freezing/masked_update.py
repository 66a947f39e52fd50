# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Updating a subset of the parameters with one optimizer state.

A frozen leaf is ``optax.MaskedNode`` in the trees the optimizer sees
(`mask_tree`), so nothing reads, decays or normalizes it, and its slots in
the shared state come back untouched (`masked_update`). `keep_frozen` does
the same after an update of every leaf, for a mask known only inside the
compiled step (the freezing warm-up).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax


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
