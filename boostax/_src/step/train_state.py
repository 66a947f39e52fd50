# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainState`: everything a train step reads and writes, as one pytree.

Everything that changes during training lives here, so a state saved at
step n and restored continues exactly as the uninterrupted run.

A restore must also never half-succeed. Flax's
``flax.training.checkpoints.restore_checkpoint(dir, target=template)``
restores through Orbax's transformation mode (it always passes
``transforms``: ``{}``, or a fallback for each ``None`` of the template),
which takes from the checkpoint only the leaves whose paths the template
also has, whatever their shapes, keeps the template's value of every other
leaf and drops the checkpoint's others, with no error. A checkpoint of
another level (LessBN removes BatchNorms, freezing adds a position) comes
back as a mix of it and the template. So every state carries its
*fingerprint* (`structure_fingerprint`): a hash of the paths and dtypes of
its leaves, saved with them. A restored state whose leaves do not have the
structure its fingerprint records is refused (`check_fingerprint`) by
Flax's restore itself (`TrainState`'s Flax deserialisation checks it, and
that every leaf has the template's shape) and by the train step it is
given.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import numpy as np
import optax
from flax import serialization

from boostax._src import tree_utils

PyTree = Any

# The parts of a state the fingerprint hashes one by one, so that a refusal
# can say which differ (the fingerprint itself is not among them).
FINGERPRINT_SLOTS = (
    "step",
    "params",
    "opt_state",
    "model_state",
    "rng",
    "algorithms.loss_scale",
    "algorithms.freeze",
)


class AlgorithmStates(NamedTuple):
    """One slot for each algorithm whose state lives outside the optimizer.

    A slot is ``None`` while its algorithm is off. Algorithms that are Optax
    transforms (accumulation, AdaSum, DimReduce, gradient centralization)
    keep their state in ``TrainState.opt_state`` instead.

    Attributes:
      loss_scale: loss-scaling state (static, dynamic or per group).
      freeze: position in the gradient-freezing sequence.
    """

    loss_scale: PyTree = None
    freeze: PyTree = None


class TrainState(flax.struct.PyTreeNode):
    """Everything a train step reads and writes, as one pytree.

    Only arrays: it goes through ``jax.jit``, ``jax.tree.map`` and
    checkpointing (Orbax) unchanged. Use ``state.replace(...)`` to change a
    field.

    Attributes:
      step: number of train steps taken (calls of the step), ``int32``
        scalar; with gradient accumulation over k micro-steps these are
        micro-steps, and ``step // k`` is the update (the optimizer's own
        count, and its schedules, count updates).
      params: the trainable parameters.
      opt_state: the optimizer's state.
      model_state: non-trainable model variables (BatchNorm statistics,
        NNX RNG counters); ``None`` for a plain loss function.
      rng: the base PRNG key; step ``i`` uses ``fold_in(rng, i)``.
      algorithms: the `AlgorithmStates` of the boost algorithms.
      fingerprint: ``uint32[7]``, the `structure_fingerprint` of the state
        the step's `init` built: one hash per slot of `FINGERPRINT_SLOTS`
        of its leaves' paths and dtypes. It never changes (the
        step returns it as given, as `rng`: no output of its program), and
        it is saved and restored with the state, so that a restore that
        mixed a checkpoint with a template of another structure is refused
        (`check_fingerprint`). ``None`` only in a state no `init` built,
        which a train step refuses.
    """

    step: jax.Array
    params: PyTree
    opt_state: optax.OptState
    model_state: PyTree
    rng: jax.Array
    algorithms: AlgorithmStates = AlgorithmStates()
    fingerprint: jax.Array | None = None


def _field_children(
    tree: jax.tree_util.PyTreeDef,
) -> list[tuple[str, jax.tree_util.PyTreeDef, int]] | None:
    """``(name, treedef, first leaf index)`` of each field of a
    `TrainState`'s `tree`, in order; None where `tree` is not one."""
    if tree.node_data() is None or tree.node_data()[0] is not TrainState:
        return None
    names = [field.name for field in dataclasses.fields(TrainState)]
    fields = []
    start = 0
    for name, child in zip(names, tree.children(), strict=True):
        fields.append((name, child, start))
        start += child.num_leaves
    return fields


def leaves_builder(tree: jax.tree_util.PyTreeDef) -> Callable[[Any], Any]:
    """``tree.unflatten``, cheaper where `tree` is a `TrainState`'s.

    A train step rebuilds its new state from the compiled program's leaves
    on every call. ``PyTreeDef.unflatten`` builds a `TrainState` through
    its dataclass ``__init__`` and rebuilds its leafless parts (the
    `AlgorithmStates` of no algorithm); this builds the fields from their
    own treedefs into a new object, the leafless immutable parts shared:
    the same state, in about half the time.

    Args:
      tree: the treedef of the states to build.

    Returns:
      ``build(leaves) -> tree.unflatten(leaves)``.
    """
    fields = _field_children(tree)
    if fields is None:
        return tree.unflatten
    # Per field, in order: ``(name, leaf index | slice, treedef | None,
    # shared value)``.
    parts: list[tuple[str, Any, Any, Any]] = []
    for name, child, start in fields:
        count = child.num_leaves
        empty = child.unflatten([]) if count == 0 else None
        if count == 0 and isinstance(empty, type(None) | AlgorithmStates):
            parts.append((name, None, None, empty))  # immutable: shared
        elif count == 1 and child.num_nodes == 1:
            parts.append((name, start, None, None))  # the field is a leaf
        else:
            parts.append((name, slice(start, start + count), child, None))

    def build(leaves):
        state = object.__new__(TrainState)
        values = state.__dict__
        for name, where, child, shared in parts:
            if where is None:
                values[name] = shared
            elif child is None:
                values[name] = leaves[where]
            else:
                values[name] = child.unflatten(leaves[where])
        return state

    return build


def field_leaves(
    tree: jax.tree_util.PyTreeDef, fields: tuple[str, ...]
) -> tuple[int, ...] | None:
    """The positions, among a `TrainState`'s leaves, of `fields`' leaves.

    Args:
      tree: the treedef of a `TrainState`.
      fields: names of its fields.

    Returns:
      The leaf indices in ``jax.tree.leaves`` order, or None where `tree`
      is not a `TrainState`'s.
    """
    children = _field_children(tree)
    if children is None:
        return None
    return tuple(
        i
        for name, child, start in children
        if name in fields
        for i in range(start, start + child.num_leaves)
    )


# -- the fingerprint --------------------------------------------------------


def _slot(state: Any, name: str) -> Any:
    for part in name.split("."):
        state = getattr(state, part, None)
    return state


def _key_name(key: Any) -> str:
    """A key's name as Orbax and Flax name it in a checkpoint (a dict key,
    an attribute and an index alike), so that the fingerprint differs
    exactly where their restores match leaves differently."""
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _dtype(leaf: Any) -> str:
    if hasattr(leaf, "dtype"):
        return str(leaf.dtype)
    return str(np.result_type(leaf))  # a Python number


def structure_fingerprint(state: TrainState) -> np.ndarray:
    """The fingerprint of `state`'s structure, ``uint32[7]``.

    Entry ``i`` is a 32-bit BLAKE2b hash of slot ``FINGERPRINT_SLOTS[i]``
    of `state`: of ``path:dtype;`` for each of its leaves in order, the path
    named as a checkpoint names it. Two states get the same fingerprint
    exactly when a restore of one into the other finds every leaf in the
    checkpoint, in its dtype (up to a 2^-32 chance per slot). Values,
    shardings and shapes play no part: a restore checks shapes itself
    (Orbax; Flax's, `TrainState`'s deserialisation), and Orbax's
    ``strict=False`` restores per-device accumulators onto another device
    count on purpose (docs/scaling.md); the step checks every leaf's shape
    against its own state's. Works on arrays and on their shapes
    (``jax.ShapeDtypeStruct``).

    Args:
      state: a `TrainState`.

    Returns:
      A NumPy ``uint32`` array with one hash per slot of
      `FINGERPRINT_SLOTS`.
    """
    hashes = []
    for name in FINGERPRINT_SLOTS:
        digest = hashlib.blake2b(digest_size=4)
        leaves = jax.tree_util.tree_leaves_with_path(_slot(state, name))
        for path, leaf in leaves:
            names = "/".join(_key_name(key) for key in path)
            digest.update(f"{names}:{_dtype(leaf)};".encode())
        hashes.append(int.from_bytes(digest.digest(), "little"))
    return np.asarray(hashes, np.uint32)


def with_fingerprint(state: TrainState) -> TrainState:
    """`state` with its ``fingerprint`` set to its
    `structure_fingerprint`, placed as ``state.step`` is (replicated on
    the mesh of a data-parallel state, in every process)."""
    fingerprint = structure_fingerprint(state)
    return state.replace(
        fingerprint=tree_utils.placed_like(fingerprint, state.step)
    )


_CONVERT = (
    "Restore a checkpoint into the template of the step that saved it "
    "(the same level, config, optimizer and model: `ts.init(variables)` of "
    "that step). To go on at another level or config, convert the restored "
    "state: `flax_state = boostax.to_flax_train_state(saved_ts, state, "
    "cls)` (`cls`: a flax.training TrainState subclass with a "
    "`batch_stats` field, for a model with BatchNorm), then `state = "
    "boostax.from_flax_train_state(new_ts, flax_state, "
    "init_optimizer=True)`: LessBN folds each trained BatchNorm it removes "
    "into the layer before it (build `new_ts` with {'less_bn': "
    "{'fn_flag': False}} to keep a trained dense head), and the optimizer "
    "state starts afresh. See docs/checkpointing.md."
)


# A state (or a checkpoint) without a fingerprint: {restoring: message}.
_NO_FINGERPRINT = {
    False: (
        "`state.fingerprint` is None: the state was not built by a step's "
        "`init`, or lost its fingerprint (a checkpoint of such a state "
        "restores it as None). Build the state with `state = "
        "ts.init(variables)`, or restore a checkpoint of one into the "
        "template `init` returns."
    ),
    True: (
        "The checkpoint has no `fingerprint`, which every state a step's "
        "`init` builds has: it was saved from a state no `init` built, or "
        "before boostax's states had one (this version restores only "
        "checkpoints that have it). Without it, Flax's `restore_checkpoint`"
        " cannot tell which of the template's leaves the checkpoint has: it"
        " keeps the template's values of the others, without an error."
    ),
}


def check_fingerprint(state: TrainState, *, restoring: bool = False) -> None:
    """Raises unless `state`'s leaves have the structure its fingerprint
    records.

    A state whose ``fingerprint`` differs from its own
    `structure_fingerprint` mixes the leaves of two states: a checkpoint
    restored into the template of another structure, by a restore that
    keeps the template's value of the leaves the checkpoint lacks (Flax's
    ``restore_checkpoint``, Orbax's ``transforms``), or silently casts them
    (Orbax restoring into other dtypes). A fingerprint that is not a
    concrete array (a ``jax.ShapeDtypeStruct``, a tracer, a donated array)
    is not compared.

    Args:
      state: a `TrainState`.
      restoring: the check of Flax's restore (`TrainState`'s Flax
        deserialisation): the message speaks of the checkpoint and the
        template (``target``).

    Raises:
      ValueError: the fingerprint is missing (``None``, not `restoring`;
        or not an integer array: a checkpoint saved without one), or it
        differs: the message names the slots whose structure differs and
        the way to restore and convert that works.
    """
    given = getattr(state, "fingerprint", None)
    if isinstance(given, jax.ShapeDtypeStruct | jax.core.Tracer) or (
        isinstance(given, jax.Array) and given.is_deleted()
    ):
        return  # shapes only, traced, or donated (checked elsewhere)
    if given is None and restoring:
        return  # a template no `init` built: nothing to compare
    if given is None or not (
        hasattr(given, "dtype") and np.issubdtype(given.dtype, np.integer)
    ):
        # (Orbax restores a checkpoint's None as None, or, in Flax's
        # transformation mode, as its metadata.)
        raise ValueError(_NO_FINGERPRINT[restoring])
    given = np.asarray(given)
    expected = structure_fingerprint(state)
    if given.shape == expected.shape and np.array_equal(given, expected):
        return
    if given.shape == expected.shape:
        differ = ", ".join(
            f"`{name}`"
            for name, a, b in zip(
                FINGERPRINT_SLOTS, given, expected, strict=True
            )
            if a != b
        )
    else:
        differ = (
            f"its fingerprint ({given.size} entries, this version's has "
            f"{expected.size}: another version of boostax saved it)"
        )
    if restoring:
        raise ValueError(
            "The checkpoint does not fit the template (`target`) it is "
            "restored into: it differs from the template in the structure "
            f"(the paths or dtypes of the leaves) of {differ}, as a "
            "checkpoint of another level, config or model does. Flax's "
            "`restore_checkpoint` would take from it only the leaves the "
            "template also has, keep the template's values of the others "
            f"and drop the rest, without an error. {_CONVERT}"
        )
    raise ValueError(
        "The state mixes the leaves of two states: `state.fingerprint` "
        "records the structure of the state it was saved from, which "
        "differs from this state's in the structure (the paths or dtypes "
        f"of the leaves) of {differ}. A checkpoint "
        "restored into the template of another level, config or model "
        "gives such a state when the restore keeps the template's values "
        "of the leaves the checkpoint lacks (Flax's `restore_checkpoint`, "
        "Orbax's `transforms`) or casts them to the template's dtypes "
        f"(Orbax). {_CONVERT}"
    )


# -- Flax serialisation: the restore of `restore_checkpoint` -----------------


def _to_state_dict(state: TrainState) -> dict[str, Any]:
    return {
        field.name: serialization.to_state_dict(getattr(state, field.name))
        for field in dataclasses.fields(state)
    }


def _check_shapes(target: TrainState, restored: TrainState) -> None:
    """Raises where a restored leaf's shape is not the template's: Orbax's
    transformation mode returns the checkpoint's array as it is."""
    wanted = jax.tree_util.tree_leaves_with_path(target)
    got = jax.tree.leaves(restored)
    if len(wanted) != len(got):
        return  # `None`s of a template no `init` built: nothing to compare
    for (path, want), leaf in zip(wanted, got, strict=True):
        if not (hasattr(want, "shape") and hasattr(leaf, "shape")):
            continue
        if tuple(want.shape) != tuple(leaf.shape):
            raise ValueError(
                "The checkpoint does not fit the template (`target`) it is "
                f"restored into: `state{jax.tree_util.keystr(path)}` has "
                f"shape {tuple(leaf.shape)} in the checkpoint, "
                f"{tuple(want.shape)} in the template (a leaf of another "
                "model; or a per-device state saved on another device "
                "count, which Orbax's `StandardRestore(target, "
                "strict=False)` restores where it is exact: "
                f"docs/scaling.md). {_CONVERT}"
            )


def _from_state_dict(target: TrainState, state_dict: dict[str, Any]):
    """Flax's restore of a dataclass (``flax.struct``'s), then
    `check_fingerprint` and the shapes: Flax's ``restore_checkpoint`` and
    ``from_state_dict`` / ``from_bytes`` end here, after Orbax's
    transformation mode has put the template's values where the
    checkpoint had none, and kept the checkpoint's shapes."""
    names = [field.name for field in dataclasses.fields(target)]
    missing = [name for name in names if name not in state_dict]
    unexpected = [name for name in state_dict if name not in names]
    if missing == ["fingerprint"] and not unexpected:
        raise ValueError(_NO_FINGERPRINT[True])
    if missing or unexpected:
        raise ValueError(
            "The state dict does not hold a boostax TrainState at path "
            f"{serialization.current_path()}: missing fields {missing}, "
            f"unexpected fields {unexpected}. {_CONVERT}"
        )
    restored = target.replace(
        **{
            name: serialization.from_state_dict(
                getattr(target, name), state_dict[name], name=name
            )
            for name in names
        }
    )
    if _kept_from_template(target, restored):
        raise ValueError(_NO_FINGERPRINT[True])
    check_fingerprint(restored, restoring=True)
    _check_shapes(target, restored)
    return restored


def _kept_from_template(target: TrainState, restored: TrainState) -> bool:
    """Whether the restored fingerprint is the template's own array while
    other leaves are not: the checkpoint had none, and Orbax's
    transformation mode kept the template's (which would pass for the
    checkpoint's). A state given back its own leaves (``from_state_dict(
    state, to_state_dict(state))``) restores nothing, and passes."""
    own = target.fingerprint
    if own is None or restored.fingerprint is not own:
        return False
    return not all(
        a is b
        for a, b in zip(
            jax.tree.leaves(restored), jax.tree.leaves(target), strict=False
        )
    )


serialization.register_serialization_state(
    TrainState, _to_state_dict, _from_state_dict, override=True
)
