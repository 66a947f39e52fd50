# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Where two pytrees differ in structure, described for an error message.

A train step checks the state it is given against the state its `init`
builds; when they differ, the message names the first place that differs
(``state.opt_state.inner_state[0]``) and what was expected there, instead of
failing deep inside the step with an ``AttributeError``.
"""

from __future__ import annotations

from typing import Any

import jax

# Longest description of a subtree in a message.
MAX_DESCRIPTION = 160


def _children(tree: Any) -> list[tuple[Any, Any]] | None:
    """``[(key, child)]`` one level down, or ``None`` for a leaf."""
    treedef = jax.tree.structure(tree)
    if treedef.num_leaves == 1 and treedef.num_nodes == 1:
        return None
    flat, _ = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: x is not tree
    )
    return [(path[0], child) for path, child in flat if path]


def _key(key: Any) -> str:
    return jax.tree_util.keystr((key,))


def describe(tree: Any, limit: int = MAX_DESCRIPTION) -> str:
    """A short text of a pytree's containers (``*`` for each array)."""

    def text(node) -> str:
        children = _children(node)
        if children is None:
            return "*"
        if node is None:
            return "None"
        name = type(node).__name__
        if isinstance(node, dict):
            inner = ", ".join(f"{k.key!r}: {text(c)}" for k, c in children)
            return "{" + inner + "}"
        if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            inner = ", ".join(text(c) for _, c in children)
            return (
                ("[" + inner + "]")
                if isinstance(node, list)
                else ("(" + inner + ("," if len(children) == 1 else "") + ")")
            )
        inner = ", ".join(
            f"{getattr(k, 'name', _key(k))}={text(c)}" for k, c in children
        )
        return f"{name}({inner})"

    described = text(tree)
    if len(described) > limit:
        described = described[: limit - 3] + "..."
    return described


def describe_arrays(tree: Any, limit: int = MAX_DESCRIPTION) -> str:
    """The dtype and shape of each leaf (``['image']: float32[4, 8]``)."""

    def text(path, leaf) -> str:
        dtype = getattr(leaf, "dtype", type(leaf).__name__)
        shape = list(getattr(leaf, "shape", ()))
        prefix = f"{jax.tree_util.keystr(path)}: " if path else ""
        return f"{prefix}{dtype}{shape}"

    leaves = jax.tree_util.tree_leaves_with_path(tree)
    described = ", ".join(text(path, leaf) for path, leaf in leaves)
    if len(described) > limit:
        described = described[: limit - 3] + "..."
    return described or describe(tree, limit)


def first_difference(
    expected: Any, got: Any, path: str = ""
) -> tuple[str, str, str] | None:
    """The first place where `got`'s structure differs from `expected`'s.

    Args:
      expected: the reference pytree (arrays or ``ShapeDtypeStruct`` leaves).
      got: the pytree to check.
      path: the name of the trees' root, prefixed to the returned path.

    Returns:
      ``None`` if both have the same structure; else ``(path, expected
      description, got description)`` of the deepest node holding the
      difference.
    """
    if jax.tree.structure(expected) == jax.tree.structure(got):
        return None
    mismatch = (path or "the tree", describe(expected), describe(got))
    e_children, g_children = _children(expected), _children(got)
    if (
        e_children is None
        or g_children is None
        or type(expected) is not type(got)
        or [k for k, _ in e_children] != [k for k, _ in g_children]
    ):
        return mismatch
    for (key, e), (_, g) in zip(e_children, g_children, strict=True):
        found = first_difference(e, g, path + _key(key))
        if found is not None:
            return found
    return mismatch
