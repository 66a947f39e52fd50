# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Generic pytree helpers: parameter names and optimizer-state lookup.

Like ``optax.tree_utils``, these know nothing of any algorithm, so every
module of boostax, down to the Optax transforms, can use them. They fill the
gaps of the libraries rather than re-write them:

* `path_names` turns a key path into a tuple of names.
  ``jax.tree_util.keystr(path, simple=True)`` gives one string and keeps
  NNX's ``value`` attribute; boostax matches parameters by tuples of names
  (``("Conv_0", "kernel")``), the same for Linen and NNX.
* `find_state` finds an optimizer-state node by its type.
  ``optax.tree_utils.tree_get`` finds one by *name*, among NamedTuples only,
  and raises when several match; boostax asks for the first node that is an
  instance of a state class, wherever a wrapper put it.

This module imports nothing from boostax.
"""

from __future__ import annotations

from typing import Any

import jax


def path_names(path) -> tuple[str, ...]:
    """The names along a pytree key path (dict keys, attributes, indices).

    NNX's ``value`` attribute of a variable is dropped, so Linen and NNX
    parameters get the same kind of names (``("Conv_0", "kernel")``).
    """
    names = []
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            names.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            if key.name != "value":
                names.append(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            names.append(str(key.idx))
        else:
            names.append(str(key))
    return tuple(names)


def leaf_paths(tree: Any) -> list[tuple[str, ...]]:
    """The name path (`path_names`) of every leaf of `tree`, in leaf order."""
    return [
        path_names(path)
        for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


def find_state(tree: Any, state_type: type) -> Any:
    """The first `state_type` node of a pytree (in leaf order), or ``None``.

    The search stops at a `state_type` node: one nested inside another (a
    wrapper of a wrapper) is not reached, the outer one is returned.
    """
    is_state = lambda x: isinstance(x, state_type)
    found = [x for x in jax.tree.leaves(tree, is_leaf=is_state) if is_state(x)]
    return found[0] if found else None


def contains_state(tree: Any, state_type: type) -> bool:
    """Whether an optimizer state pytree holds a `state_type` node."""
    return find_state(tree, state_type) is not None


# Nested dicts (Linen variables), addressed by a module path of keys.


def nested_get(tree: dict, path) -> Any:
    """``tree[path[0]][path[1]]...``, or ``{}`` where a key is missing."""
    for key in path:
        tree = tree.get(key, {})
    return tree


def nested_has(tree: dict, path) -> bool:
    """Whether every key of `path` is there, each in a dict."""
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return False
        tree = tree[key]
    return True


def nested_pop(tree: dict, path) -> None:
    """Removes ``tree[path[0]]...[path[-1]]`` in place, if it is there."""
    node: Any = tree
    for key in path[:-1]:
        node = node.get(key)
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


def placed_like(value, like) -> jax.Array:
    """A host array `value` on the devices `like` is on, as `like` is
    placed (its sharding: replicated over a mesh, in every process);
    on the default device where `like` has no sharding."""
    sharding = getattr(like, "sharding", None)
    if sharding is None:
        return jax.numpy.asarray(value)
    return jax.make_array_from_callback(
        value.shape, sharding, lambda index: value[index]
    )
