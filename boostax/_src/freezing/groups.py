# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing's parameter groups: which leaves each depth trains.

MindSpore's gradient freezing (``GradientFreeze``) splits the parameters into
nested *suffix* groups: group 0 is every parameter, group ``k`` only the
last layers. The leaves are taken in the model's call order and cut into
chunks; `group_mask` says which leaves of a tree a group holds. The plan
that picks a group per step is `freezing.Freezing`.

References:
  MindSpore ``GradientFreeze.split_parameters_groups``
  (``boost/grad_freeze.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
from flax import linen as nn
from flax import nnx

from boostax._src import model_graph, user_warnings, validation
from boostax._src.tree_utils import path_names

Path = tuple[str, ...]


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


def groups_of(
    params: Any, groups: Sequence[Sequence[Path]] | None, groups_number: int
) -> tuple[tuple[Path, ...], ...]:
    """The freezing groups of `params`: `groups` (cut on the model) applied
    to them, or, without, the params cut in a natural sort of their paths."""
    if groups is None:
        return chunk_groups(ordered_leaves(params), groups_number)
    return restrict_groups(groups, params)
