# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Checks at a train step's boundary: is this state one of this step's?

A state built by another level, optimizer, loss-scale setting or model (or
the variables dict before ``init``) would otherwise fail deep inside the
step with an ``AttributeError``; these checks name the slot that differs,
what was expected there and what was given, and how to rebuild the state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import accumulation as accumulation_lib
from boostax._src import tree_diff, tree_utils
from boostax._src.step.train_state import TrainState

_REBUILD = (
    "Build the state with this step's `init` (`state = ts.init(variables)`), "
    "or restore a checkpoint into the template that `init` returns; a state "
    "saved by another level, optimizer or config does not fit this step: "
    "restore it with the step it was saved by, then convert it, "
    "`boostax.from_flax_train_state(ts, boostax.to_flax_train_state("
    "saved_ts, state, cls), init_optimizer=True)` (docs/checkpointing.md)."
)

_SLOT_OWNERS = {
    "opt_state": "its optimizer, with the algorithms the config wraps around "
    "it: gradient centralization, accumulation, AdaSum, DimReduce",
    "algorithms.loss_scale": "its `loss_scale`",
    "algorithms.freeze": "its gradient freezing (`grad_freeze`)",
}


def _field(algorithms, name):
    return getattr(algorithms, name, "<missing>")


def _describe_structure(treedef) -> str:
    return tree_diff.describe(
        jax.tree.unflatten(treedef, [0] * treedef.num_leaves)
    )


def not_a_state_message(state) -> str:
    given = type(state).__name__
    hint = ""
    if isinstance(state, dict) and "params" in state:
        hint = (
            " This looks like the model's variables: pass them to the "
            "step's `init` first (`state = ts.init(variables)`)."
        )
    elif type(state).__module__.startswith("flax.training"):
        hint = (
            " Convert a flax.training TrainState with "
            "`boostax.from_flax_train_state(ts, flax_state)`."
        )
    return (
        "`state` must be the boostax.TrainState this step's `init` builds "
        f"(`state = ts.init(variables)`), got {given}.{hint}"
    )


def check_rng(rng) -> jax.Array:
    """`rng` as `TrainState.rng`: a PRNG key, a NumPy one made a JAX array."""
    if rng is None:
        return jax.random.PRNGKey(0)
    if not isinstance(rng, jax.Array | np.ndarray) or not (
        jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
        or (rng.dtype == jnp.uint32 and rng.shape == (2,))
    ):
        raise TypeError(
            "`rng` must be a JAX PRNG key (jax.random.PRNGKey(seed) or "
            f"jax.random.key(seed)) or None, got {type(rng).__name__} "
            f"({rng!r})."
        )
    return jnp.asarray(rng)


def _shape_and_dtype(x) -> tuple[tuple[int, ...], Any]:
    """An array's (or ``ShapeDtypeStruct``'s, or number's) shape, dtype."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), x.dtype
    try:
        return np.shape(x), np.result_type(x)
    except (TypeError, ValueError):  # not numeric at all (a str, an object)
        return np.shape(x), np.dtype(object)


def check_counters(state) -> None:
    """Refuses a `state.step` or `state.rng` the step cannot run with.

    Raises:
      ValueError: ``state.step`` is not an integer scalar, or
        ``state.rng`` not a PRNG key (what `check_rng` accepts).
    """
    shape, dtype = _shape_and_dtype(state.step)
    if shape != () or not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(
            "`state.step` must be an int32 scalar (the steps taken), got "
            f"{dtype}{list(shape)}. {_REBUILD}"
        )
    shape, dtype = _shape_and_dtype(state.rng)
    if not (
        jnp.issubdtype(dtype, jax.dtypes.prng_key)
        or (dtype == jnp.uint32 and shape == (2,))
    ):
        raise ValueError(
            "`state.rng` must be a JAX PRNG key (uint32[2] from "
            f"jax.random.PRNGKey, or a jax.random.key), got {dtype}"
            f"{list(shape)}. {_REBUILD}"
        )


def check_freezing_accumulation(freezing, optimizer, opt_state) -> None:
    """Refuses gradient accumulation that freezing cannot keep aligned.

    With accumulation over k micro-steps, every micro-step of an update must
    train the same depth: the sequence then advances once per k steps
    (``micro_steps``), and the accumulation must be the optimizer itself
    (with that k), so that a skipped micro-step still counts as one of the
    k.
    """
    if freezing.group_optimizers is None:
        pairs = [(optimizer, opt_state)]
    else:
        pairs = list(zip(freezing.group_optimizers, opt_state, strict=True))
    k = freezing.micro_steps
    for tx, own in pairs:
        accumulates = tree_utils.contains_state(
            own, accumulation_lib.GradientAccumulationState
        )
        if not accumulates and k == 1:
            continue
        top = isinstance(own, accumulation_lib.GradientAccumulationState)
        if top and accumulation_lib.accumulation_steps(tx) == k:
            continue
        raise ValueError(
            f"Gradient freezing advances its sequence once per {k} train "
            "step(s), so the optimizer must accumulate over exactly that "
            "many micro-steps, as its outermost stage; got an optimizer "
            f"whose state is {tree_diff.describe(own)}"
            + (
                f" accumulating over {accumulation_lib.accumulation_steps(tx)}"
                if top
                else ""
            )
            + ". One update would mix micro-gradients of different depths. "
            "Switch accumulation on in the config instead ({'boost': "
            "{'grad_accumulation': True}, 'grad_accumulation': "
            "{'grad_accumulation_step': k}}) and pass the optimizer "
            "unwrapped."
        )


def check_slots(state, expected: dict[str, Any], template) -> None:
    """Raises if a slot of `state` differs from what the step builds.

    Args:
      state: the `TrainState` given to the step.
      expected: ``{slot: abstract tree}`` for ``opt_state`` and the
        algorithm slots, as the step's `init` builds them from the state's
        params.
      template: ``{"params": treedef, "model_state": treedef}`` of the
        state `init` built, or ``None`` if `init` has not run.

    Raises:
      ValueError: naming the first slot that differs, what was expected and
        what was given.
    """
    if template is not None:
        for name in ("params", "model_state"):
            if jax.tree.structure(getattr(state, name)) != template[name]:
                raise ValueError(
                    f"`state.{name}` does not match the {name} this step's "
                    f"`init` built: expected "
                    f"{_describe_structure(template[name])}, got "
                    f"{tree_diff.describe(getattr(state, name))}. {_REBUILD}"
                )
    got = {
        "opt_state": state.opt_state,
        "algorithms.loss_scale": _field(state.algorithms, "loss_scale"),
        "algorithms.freeze": _field(state.algorithms, "freeze"),
    }
    for name, want_tree in expected.items():
        difference = tree_diff.first_difference(
            want_tree, got[name], f"state.{name}"
        )
        if difference is not None:
            path, want, given = difference
            raise ValueError(
                f"`{path}` does not match this step "
                f"({_SLOT_OWNERS[name]}): expected {want}, got {given}. "
                f"{_REBUILD}"
            )


# The slots a step computes with, whose leaves keep their shape and dtype
# from step to step (the step counter and the PRNG key are checked apart).
LEAF_SLOTS = ("params", "opt_state", "model_state", "algorithms")


def _abstract(leaf):
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype)
    return leaf  # a Python scalar: no dtype of its own to compare


def abstract_slots(state) -> dict[str, Any]:
    """``{slot: tree of jax.ShapeDtypeStruct}`` of `state`'s `LEAF_SLOTS`:
    the reference `check_leaf_types` compares later states with."""
    return {
        name: jax.tree.map(_abstract, getattr(state, name))
        for name in LEAF_SLOTS
    }


def _signature(leaf) -> str:
    shape = ",".join(str(n) for n in np.shape(leaf))
    return f"{jnp.dtype(leaf.dtype).name}[{shape}]"


def check_devices(state, mesh) -> None:
    """Raises if `state`'s arrays live on devices other than `mesh`'s.

    A state saved or built on another device count (an 8-device state
    given to a step on 4) fails inside JAX with "incompatible devices",
    naming neither the state nor the way out.

    Raises:
      ValueError: naming the slot, its devices and the mesh's.
    """
    wanted = set(mesh.devices.flat)
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        sharding = getattr(leaf, "sharding", None)
        if sharding is None:
            continue  # a NumPy array: placed by the step
        held = sharding.device_set
        if held <= wanted:
            continue
        raise ValueError(
            f"`state{jax.tree_util.keystr(path)}` is on {len(held)} devices "
            f"({sorted(d.id for d in held)}), and this step runs on the "
            f"{len(wanted)} devices of its mesh "
            f"({sorted(d.id for d in wanted)}): a state of another device "
            "count or mesh. Restore its checkpoint into this step's template "
            "(`jax.tree.map(ocp.utils.to_shape_dtype_struct, ts.init(...))`: "
            "Orbax places each leaf as the template's), or build the step on "
            "the state's devices."
        )


def check_leaf_types(state, reference: dict[str, Any]) -> None:
    """Raises if a leaf of `state` differs in dtype or shape from `reference`.

    A state's structure can match the step's while its leaves do not: a
    float16 copy of a float32 state would be trained in float16, another
    model's kernels of other widths fail deep in the step. Every leaf of
    the `LEAF_SLOTS` is compared (on the host: shapes and dtypes only).

    Args:
      state: the `TrainState` given to the step.
      reference: `abstract_slots` of the state the step's `init` built (or,
        before any `init`, of the first state the step accepted).

    Raises:
      ValueError: naming the first leaf that differs, by its path in the
        state, with the dtype and shape expected and given.
    """
    for name, want_tree in reference.items():
        given_tree = getattr(state, name)
        difference = tree_diff.first_difference(
            want_tree, given_tree, f"state.{name}"
        )
        if difference is not None:
            path, want, given = difference
            raise ValueError(
                f"`{path}` does not match the state this step was built for:"
                f" expected {want}, got {given}. {_REBUILD}"
            )
        wanted = jax.tree_util.tree_leaves_with_path(want_tree)
        for (key, want), leaf in zip(
            wanted, jax.tree.leaves(given_tree), strict=True
        ):
            if not (
                isinstance(want, jax.ShapeDtypeStruct)
                and hasattr(leaf, "dtype")
            ):
                continue
            if want.shape != np.shape(leaf):
                hint = "(A leaf of another model?) "
            elif want.dtype != leaf.dtype:
                hint = (
                    "The step would train it in "
                    f"{jnp.dtype(leaf.dtype).name}: cast it back to "
                    f"{jnp.dtype(want.dtype).name}. "
                )
            else:
                continue
            raise ValueError(
                f"`state.{name}{jax.tree_util.keystr(key)}` does not match "
                "the state this step was built for: expected "
                f"{_signature(want)}, got {_signature(leaf)}. {hint}"
                f"{_REBUILD}"
            )


def check_underflow(precision, loss_scale) -> None:
    """Refuses a float16 step without a loss scale (never silent).

    A precision that can underflow brings or demands its loss scale: a
    float16 policy whose ``loss_scale`` is ``None`` (e.g. a bfloat16 policy
    turned float16 by ``dataclasses.replace``) needs the step's own
    `loss_scale`; ``loss_scale="off"`` in the policy opts out on purpose.
    """
    if precision is None or loss_scale is not None:
        return
    if precision.needs_loss_scale:
        label = f" {precision.name!r}" if precision.name else ""
        raise ValueError(
            f"The precision policy{label} computes in "
            f"{precision.compute_dtype.name}, whose gradients round to zero "
            "below 6e-8, and neither the policy "
            "(`loss_scale=None`) nor the step brings a loss scale. Pass "
            "`loss_scale=boostax.DynamicLossScale(2.0**15)` (or a static or "
            "group scale) to the step, or build the policy with "
            "`loss_scale='dynamic'` (a float16 policy's default); "
            "`loss_scale='off'` in the policy trains it unscaled on purpose."
        )


def check_cast_batch_used(objective, precision) -> None:
    """Refuses a ``cast_batch`` the step would ignore (a float32 step)."""
    if getattr(objective, "cast_batch", None) is None:
        return
    if precision is None or precision.compute_dtype == jnp.float32:
        raise ValueError(
            "`cast_batch` names the batch's inputs that a half-precision "
            "step casts to its compute dtype, and this step computes in "
            "float32: pass `precision=` a half precision (e.g. 'bfloat16' "
            "or 'O2'), or drop `cast_batch`."
        )


def check_precision(precision, data_parallel) -> None:
    """Refuses a gradient reduction dtype the step would not use.

    A half `reduce_dtype` rounds the gradients averaged over the mesh; it
    needs a mesh, and the ``"mean"`` reduction: AdaSum combines by dot
    products and norms, which need float32.
    """
    if precision is None or precision.reduce_dtype == jnp.float32:
        return
    half = precision.reduce_dtype.name
    if data_parallel is None:
        raise ValueError(
            f"The precision policy reduces gradients in {half} "
            "(`reduce_dtype`), but the step runs on one device: there is no "
            "reduction. Pass `data_parallel=` (or `mesh=`), or leave "
            "`reduce_dtype` at 'float32'."
        )
    if data_parallel.reduction != "mean":
        raise ValueError(
            f"The precision policy reduces gradients in {half} "
            "(`reduce_dtype`), which the data-parallel reduction "
            f"{data_parallel.reduction!r} cannot take: AdaSum's dot products"
            " and norms run in float32. Use reduction='mean' or "
            "reduce_dtype='float32'."
        )
    if not data_parallel.explicit:
        raise NotImplementedError(
            f"The precision policy reduces gradients in {half} "
            "(`reduce_dtype`), but with engine='jit' XLA inserts the "
            "reduction of the gradients it computes, in their float32. Use "
            "engine='shard_map' for a half-precision reduction, or "
            "reduce_dtype='float32'."
        )


def donated_error(state) -> ValueError | None:
    """The error for a `state` donated to an earlier call (its arrays are
    deleted; JAX's own error would not say why), or ``None``."""
    deleted = [
        jax.tree_util.keystr(path)
        for path, leaf in jax.tree_util.tree_leaves_with_path(state)
        if isinstance(leaf, jax.Array) and leaf.is_deleted()
    ]
    if not deleted:
        return None
    return ValueError(
        f"The state's arrays are deleted ({', '.join(deleted[:3])}"
        f"{', ...' if len(deleted) > 3 else ''}): it was donated to an "
        "earlier call of a step with `donate_state=True` (`StepOptions`), "
        "which reuses the memory of the state it is given. Pass the state "
        "that call returned, or build the step with `donate_state=False` "
        "to keep every state valid."
    )


def check_not_deleted(state) -> None:
    """Raises `donated_error` if `state` was donated to an earlier call."""
    error = donated_error(state)
    if error is not None:
        raise error


def require_state(state: Any) -> None:
    """Raises ``TypeError`` unless `state` is a `TrainState` (a check as
    cheap as an attribute read, for the calls that run `check_state`'s
    full comparison on no state)."""
    if not isinstance(state, TrainState):
        raise TypeError(not_a_state_message(state))
