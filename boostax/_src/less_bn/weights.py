# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weights brought into a LessBN model: kept, never re-initialised.

The rule: weights a user brings (`TrainStep.init`'s variables, a Flax
``TrainState``, an Orbax checkpoint) are never silently re-initialised or
transformed. Their function is kept exactly, or the conversion is refused
with the reason. LessBN's initialisation choices (``zero_init_residual``,
a fresh FN head) apply only to a model that is still at its
initialisation.

Fresh or trained is what the user says (``trained=``), or is read from
the variables the model initialises at a constant (running statistics,
biases, BatchNorm scales), each against the model's own initialiser
(`trained_evidence`), never guessed: where no variable can tell, the user
is asked. What that means for each thing LessBN changes:

- a removed BatchNorm of fresh weights is dropped, as MindSpore drops it.
  A trained one is folded into the layer before it (`BatchNormFold`),
  which keeps the model's function at inference. What that layer cannot
  take (the shift, when it has no bias) stays at the BatchNorm's place as
  constants, which every model state has: the identity for fresh weights,
  so a state's structure never depends on the values brought in;
- a BatchNorm that ``zero_init_residual`` starts at scale zero gets that
  scale only in fresh weights; a trained one keeps its values;
- the FN head replaces a dense layer by another function: on trained
  weights it is refused, with what to do instead.

These helpers are framework-free (arrays in, arrays out); the Linen and NNX
conversions call them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import validation
from boostax._src.less_bn.plan import BatchNormFold, InitialValue, path_str

# The variables of a BatchNorm (nn.BatchNorm and nnx.BatchNorm alike).
BATCH_NORM_VARIABLES = ("scale", "bias", "mean", "var")


def _is_constant(init, shape, dtype) -> np.ndarray | None:
    """The value `init` gives every key at `shape`, or ``None`` if it draws
    at random (two keys give two values)."""
    first, second = (
        np.asarray(init(jax.random.PRNGKey(seed), shape, dtype))
        for seed in (0, 1)
    )
    return first if np.array_equal(first, second) else None


def trained_evidence(
    initial: Sequence[InitialValue], held: Callable[[InitialValue], Any]
) -> tuple[str | None, int]:
    """Whether weights were trained, read against the model's initialisers.

    A variable whose initialiser is a constant (running statistics, zero
    biases, a BatchNorm scale at one or at zero) keeps it until training
    moves it; a variable initialised at random says nothing either way.

    Args:
      initial: the model's variables and their initialisers
        (`LessBNPlan.initial`).
      held: ``held(initial_value)``, the value the weights hold for it, or
        ``None`` where they hold none.

    Returns:
      ``(evidence, compared)``: why the weights count as trained (a
      variable away from its initial value, named), or ``None``; and how
      many constant-initialised variables were compared. Abstract values
      (a shape-only evaluation) count as fresh: no trained values to lose.
    """
    compared = 0
    for value in initial:
        array = held(value)
        if array is None:
            continue
        if isinstance(array, jax.core.Tracer):
            return None, max(compared, 1)
        start = _is_constant(value.init, np.shape(array), array.dtype)
        if start is None:
            continue
        compared += 1
        if not np.array_equal(np.asarray(array), start):
            return (
                f"the {value.name} of {value.layer} {path_str(value.path)} "
                "is not the value the model initialises it at"
            ), compared
    return None, compared


def why_trained(
    trained: bool | None, evidence: str | None, compared: int
) -> str | None:
    """LessBN's answer to "were these weights trained?": why (for a
    message), or ``None`` for fresh weights.

    Args:
      trained: what the user said (`TrainStep.init`'s ``trained``):
        ``True``, ``False``, or ``None`` to read it from the weights.
      evidence, compared: `trained_evidence`'s reading.

    Raises:
      ValueError: ``trained=False`` where a variable has moved from its
        initial value; ``None`` where no variable can tell (the model
        initialises none at a constant).
    """
    validation.check_optional_bool("trained", trained)
    if trained is False and evidence is not None:
        raise ValueError(
            f"`trained=False` says the weights are fresh, but {evidence}: "
            "LessBN would drop what training put there. Pass `trained=True` "
            "(or leave it out) to keep their function, or pass the model's "
            "freshly initialised variables."
        )
    if trained is None and compared == 0:
        raise ValueError(
            "LessBN cannot tell whether these weights were trained: the "
            "model initialises none of its BatchNorm statistics or biases at "
            "a constant it could compare them with, and a trained model's "
            "function would be changed (the FN head replaces its classifier). "
            "Say which: `init(variables, trained=False)` for fresh weights, "
            "`trained=True` for trained ones (also "
            "`from_flax_train_state(..., trained=...)`)."
        )
    if trained:
        return "as `trained=True` says"
    return None if trained is False else evidence


def folded_affine(
    fold: BatchNormFold, values: dict[str, Any], dtype
) -> tuple[jax.Array, jax.Array]:
    """``(a, b)``: the BatchNorm's inference map ``x * a + b``.

    ``a = scale / sqrt(var + epsilon)``, ``b = bias - mean * a``, computed
    in float32 (at least) and returned in `dtype`.

    Raises:
      ValueError: if the BatchNorm lacks its running statistics, or does
        not normalise over the last axis.
    """
    where = path_str(fold.path)
    missing = [name for name in ("mean", "var") if name not in values]
    if missing:
        raise ValueError(
            f"The trained BatchNorm {where} that LessBN removes has no "
            f"running {' or '.join(missing)} in the variables given, so its "
            "function cannot be folded into the layer before it: pass the "
            "model's whole variables (with 'batch_stats')."
        )
    if not fold.channels_last:
        raise ValueError(
            f"The trained BatchNorm {where} that LessBN removes normalises "
            "over an axis other than the last, so it cannot be folded into "
            "the layer before it (whose output channels are its kernel's "
            "last axis): switch less_bn off to keep the trained model."
        )
    compute = jnp.promote_types(jnp.result_type(values["var"]), jnp.float32)
    mean = jnp.asarray(values["mean"], compute)
    var = jnp.asarray(values["var"], compute)
    scale = jnp.asarray(values.get("scale", 1.0), compute)
    bias = jnp.asarray(values.get("bias", 0.0), compute)
    a = scale * jax.lax.rsqrt(var + jnp.asarray(fold.epsilon, compute))
    b = bias - mean * a
    shape = jnp.shape(var)
    return (
        jnp.broadcast_to(a, shape).astype(dtype),
        jnp.broadcast_to(b, shape).astype(dtype),
    )


def fold_into_layer(
    layer: dict[str, Any], a: jax.Array, b: jax.Array
) -> jax.Array | None:
    """Folds ``x * a + b`` into a conv / dense layer's variables (in place).

    The kernel's output channels (last axis) are multiplied by `a`; with a
    bias, the bias becomes ``bias * a + b``.

    Returns:
      ``None`` when the layer took the whole map, else `b` (the layer has no
      bias: the shift stays where the BatchNorm was).
    """
    kernel = layer["kernel"]
    per_output = a.astype(jnp.float32).reshape((1,) * (kernel.ndim - 1) + (-1,))
    layer["kernel"] = (kernel * per_output).astype(kernel.dtype)
    if "bias" in layer:
        bias = layer["bias"]
        layer["bias"] = (
            bias * a.astype(jnp.float32) + b.astype(jnp.float32)
        ).astype(bias.dtype)
        return None
    return b


def refuse_trained_fn_head(head: str, reason: str) -> ValueError:
    """The error for an FN head that would replace a trained dense layer."""
    return ValueError(
        "LessBN's FN head (less_bn fn_flag, on a classifier by O1's "
        "default) would "
        f"replace the dense layer {head} of weights that were trained "
        f"({reason}): its function cannot be kept, and a trained head is "
        "never replaced silently. Keep the trained head by building the step "
        "with the FN head off (auto_boost config {'less_bn': {'fn_flag': "
        "False}}; the removed BatchNorms are then folded into the layers "
        "before them), or start from fresh variables of the model (if these "
        "are fresh, say so: `init(variables, trained=False)`)."
    )
