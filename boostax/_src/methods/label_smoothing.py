# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Label smoothing: train a classifier on softened class targets.

The class targets ``y`` of a ``K``-class problem are replaced by

.. math::

  q = (1 - \\alpha) \\, \\mathrm{onehot}(y, K) + \\alpha / K

before the loss sees them (Szegedy et al.), so the cross-entropy becomes

.. math::

  \\ell(z, y) = -\\sum_k q_k \\log \\mathrm{softmax}(z)_k
  = (1 - \\alpha) \\, \\mathrm{CE}(z, y)
    + \\alpha \\, \\frac{1}{K} \\sum_k -\\log \\mathrm{softmax}(z)_k .

`smooth_labels` is the target transform (``optax.smooth_labels`` after a
one-hot encoding of integer labels); `label_smoothing_loss` wraps a loss
``loss(outputs, targets)`` so that it sees smoothed targets, ``K`` read
from the last axis of the model's outputs; the config's
``label_smoothing`` section makes `auto_boost` wrap the step's loss with
it, so that the smoothing runs inside the one compiled step whatever else
the step does (LessBN's FN head, freezing, accumulation, loss scaling,
mixed precision, data parallelism).

The integer-label cross-entropies (``optax.
softmax_cross_entropy_with_integer_labels``, ``boostax.examples.models.
cross_entropy``) cannot take dense targets: they are replaced by the
right-hand side above (optax's integer cross-entropy and
``optax.softmax_cross_entropy`` against the uniform target), equal to
``optax.softmax_cross_entropy`` with the smoothed targets and, at
``alpha = 0``, the integer loss bit for bit. Any other loss is given the
smoothed targets, and refused (when the step is traced, before it
compiles) if it cannot take them.

References:
  Szegedy, Vanhoucke, Ioffe, Shlens and Wojna, "Rethinking the Inception
  Architecture for Computer Vision", CVPR 2016 (arXiv:1512.00567).
  Müller, Kornblith and Hinton, "When does label smoothing help?",
  NeurIPS 2019 (arXiv:1906.02629). MosaicML Composer, ``LabelSmoothing``
  (``composer/algorithms/label_smoothing``: ``smoothing`` 0.1).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from boostax._src import validation

#: Where the library's own integer-label cross-entropy lives (compared by
#: identity, never imported here: the examples import boostax).
_EXAMPLE_MODELS = "boostax.examples.models"
_DENSE_TARGETS = (
    "dense (probability) targets: float32 arrays of the outputs' shape (..., K)"
)


def _check_alpha(alpha: Any) -> float:
    return validation.check_number(
        "alpha", alpha, minimum=0, maximum=1, open_maximum=True
    )


def smooth_labels(
    labels: jax.typing.ArrayLike, num_classes: int, alpha: float
) -> jax.Array:
    """Smoothed one-hot targets ``(1 - alpha) * onehot(labels) + alpha / K``.

    Integer `labels` are one-hot encoded over ``K = num_classes`` classes
    (``jax.nn.one_hot``); floating `labels` are taken as one-hot (or any
    probability) targets whose last axis is ``K``. The smoothing is
    ``optax.smooth_labels``, in float32.

    Args:
      labels: integer class indices in ``[0, K)`` of any shape, or floating
        targets of shape ``(..., K)``.
      num_classes: ``K``, an int >= 1.
      alpha: the smoothing, in ``[0, 1)``.

    Returns:
      float32 targets of shape ``labels.shape + (K,)`` (integer labels) or
      ``labels.shape`` (floating labels); each row sums to 1 when the
      given one does.

    Raises:
      TypeError, ValueError: `num_classes` or `alpha` out of range, or
        floating `labels` whose last axis is not `num_classes`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, boostax
      >>> q = boostax.smooth_labels(jnp.array([0, 2]), 3, 0.3)
      >>> np.round(np.asarray(q, np.float64), 2).tolist()
      [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8]]

    References:
      Szegedy et al., `Rethinking the Inception Architecture for Computer
      Vision <https://arxiv.org/abs/1512.00567>`_, 2016.
    """
    num_classes = validation.check_int("num_classes", num_classes, minimum=1)
    alpha = _check_alpha(alpha)
    labels = jnp.asarray(labels)
    if jnp.issubdtype(labels.dtype, jnp.integer):
        dense = jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)
    elif jnp.issubdtype(labels.dtype, jnp.floating):
        if labels.ndim == 0 or labels.shape[-1] != num_classes:
            raise ValueError(
                f"Floating `labels` must be targets of shape (..., "
                f"{num_classes}) (`num_classes` on the last axis), got shape "
                f"{labels.shape}."
            )
        dense = labels.astype(jnp.float32)
    else:
        raise TypeError(
            "`labels` must be integer class indices or floating one-hot "
            f"targets, got dtype {labels.dtype}."
        )
    return optax.smooth_labels(dense, alpha)


def _integer_cross_entropy(loss: Callable[..., Any]) -> str | None:
    """How `loss` reduces if it is a known integer-label cross-entropy:
    ``"none"`` (optax's, per example) or ``"mean"`` (the examples'), else
    ``None``."""
    if loss is optax.softmax_cross_entropy_with_integer_labels:
        return "none"
    models = sys.modules.get(_EXAMPLE_MODELS)
    if models is not None and loss is getattr(models, "cross_entropy", None):
        return "mean"
    return None


def _loss_name(loss: Callable[..., Any]) -> str:
    module = getattr(loss, "__module__", None) or ""
    name = getattr(loss, "__qualname__", None) or type(loss).__name__
    return f"{module}.{name}" if module else name


def _logits(outputs: Any) -> jax.Array:
    """The model's outputs, which must be one array of class scores."""
    if not hasattr(outputs, "shape") or not hasattr(outputs, "dtype"):
        raise ValueError(
            "label_smoothing reads the number of classes K from the last "
            "axis of the model's outputs, which must be one array of class "
            f"scores (..., K); the model returned a {type(outputs).__name__}."
        )
    if jnp.ndim(outputs) == 0:
        raise ValueError(
            "label_smoothing reads the number of classes K from the last "
            "axis of the model's outputs, which are a scalar here."
        )
    return outputs


def _targets_kind(targets: Any, logits: jax.Array) -> str:
    """``"integer"`` for class indices of shape ``logits.shape[:-1]``,
    ``"dense"`` for floating targets of `logits`' shape; raises otherwise."""
    shape = jnp.shape(logits)
    dtype = getattr(targets, "dtype", None)
    if dtype is not None:
        if (
            jnp.issubdtype(dtype, jnp.integer)
            and jnp.shape(targets) == (shape[:-1])
        ):
            return "integer"
        if jnp.issubdtype(dtype, jnp.floating) and jnp.shape(targets) == shape:
            return "dense"
    what = (
        f"a {type(targets).__name__}"
        if dtype is None
        else f"{dtype} targets of shape {jnp.shape(targets)}"
    )
    raise ValueError(
        "label_smoothing needs integer class targets of shape "
        f"{shape[:-1]} (the outputs' shape without the class axis) or "
        f"floating one-hot targets of the outputs' shape {shape}; got "
        f"{what}."
    )


def _smoothed_targets(targets: Any, logits: jax.Array, alpha: float):
    """float32 smoothed targets of `logits`' shape (`_targets_kind`)."""
    _targets_kind(targets, logits)
    return smooth_labels(targets, jnp.shape(logits)[-1], alpha)


def _structs(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree
    )


#: What `label_smoothing_loss` traces an unknown loss with when it is
#: built: 2 examples of 3 classes, integer and dense targets.
_PROBE = (
    jax.ShapeDtypeStruct((2, 3), jnp.float32),
    jax.ShapeDtypeStruct((2,), jnp.int32),
    jax.ShapeDtypeStruct((2, 3), jnp.float32),
)


def _check_takes_dense(loss, outputs, targets, dense, when: str) -> None:
    """Raises if `loss` traces with `targets` but not with `dense` ones.

    Where it traces with neither (a loss of other outputs than the probe's,
    or using the step's collectives, whose axis names only the step binds),
    the step's own call decides.
    """
    try:
        jax.eval_shape(loss, _structs(outputs), _structs(dense))
    except Exception as dense_error:  # noqa: BLE001 (any error of the loss)
        try:
            jax.eval_shape(loss, _structs(outputs), _structs(targets))
        except Exception:  # noqa: BLE001
            return
        raise ValueError(
            f"label_smoothing: the loss {_loss_name(loss)} cannot take "
            f"{_DENSE_TARGETS}, here {tuple(jnp.shape(dense))}; it runs on "
            f"integer targets ({jnp.result_type(targets)} of shape "
            f"{jnp.shape(targets)}; {when}). Label smoothing needs a loss of "
            "probability targets, its metrics included (an accuracy takes "
            "the targets' argmax), such as optax.softmax_cross_entropy "
            "(`lambda logits, q: optax.softmax_cross_entropy(logits, q)."
            "mean()`), or `boostax.smooth_labels` inside your own loss with "
            f"label smoothing off. The loss's error: {dense_error}"
        ) from dense_error


def _smoothed_cross_entropy(logits, targets, alpha: float, reduce: str):
    """The integer cross-entropy with label smoothing: ``(1 - alpha)`` times
    optax's integer loss plus `alpha` times the cross-entropy against the
    uniform target (exactly the integer loss at ``alpha = 0``); dense
    targets are smoothed and given to ``optax.softmax_cross_entropy``."""
    if _targets_kind(targets, logits) == "dense":
        dense = _smoothed_targets(targets, logits, alpha)
        losses = optax.softmax_cross_entropy(logits, dense)
    else:
        uniform = jnp.full(
            jnp.shape(logits), 1.0 / jnp.shape(logits)[-1], jnp.float32
        )
        losses = (
            1.0 - alpha
        ) * optax.softmax_cross_entropy_with_integer_labels(
            logits, targets
        ) + alpha * optax.softmax_cross_entropy(logits, uniform)
    return losses.mean() if reduce == "mean" else losses


def label_smoothing_loss(
    loss: Callable[..., Any], alpha: float
) -> Callable[..., Any]:
    """`loss` trained on smoothed class targets.

    Returns ``smoothed(outputs, targets) = loss(outputs, q)`` with
    ``q = (1 - alpha) * onehot(targets, K) + alpha / K`` (`smooth_labels`),
    ``K`` the last axis of `outputs` and `targets` integer class indices of
    the outputs' shape without it, or floating one-hot targets of the
    outputs' shape (smoothed too). The targets are computed in float32.

    ``optax.softmax_cross_entropy_with_integer_labels`` and
    ``boostax.examples.models.cross_entropy`` take integer labels only:
    for them the result is ``(1 - alpha) * CE(outputs, y) + alpha *
    CE(outputs, 1/K)``, equal to ``optax.softmax_cross_entropy(outputs,
    q)`` (the cross-entropy is linear in its targets) and the integer loss
    itself, bit for bit, at ``alpha = 0``. Any other `loss` must take
    dense targets: one that traces (``jax.eval_shape``) on integer targets
    and not on dense ones raises a ``ValueError`` naming it, here (tried
    on 2 examples of 3 classes) or, where that tells nothing (a loss of
    other outputs), when the step is traced on its first batch.

    Args:
      loss: ``loss(outputs, targets)``, returning a scalar (or ``(scalar,
        metrics)``, passed through).
      alpha: the smoothing, in ``[0, 1)``.

    Returns:
      The loss ``smoothed(outputs, targets)``, for `make_train_step`'s
      ``loss=`` (`auto_boost` applies it from the config's
      ``label_smoothing`` section).

    Raises:
      TypeError, ValueError: `loss` not callable, `alpha` outside
        ``[0, 1)``, or a `loss` that cannot take dense targets (here, or
        when called).

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> from boostax.examples import models
      >>> loss = boostax.label_smoothing_loss(models.cross_entropy, 0.1)
      >>> logits = jnp.array([[2.0, 0.0, -1.0]]); labels = jnp.array([0])
      >>> q = boostax.smooth_labels(labels, 3, 0.1)
      >>> bool(jnp.allclose(loss(logits, labels),
      ...                   optax.softmax_cross_entropy(logits, q).mean()))
      True

    References:
      Müller, Kornblith and Hinton, `When does label smoothing help?
      <https://arxiv.org/abs/1906.02629>`_, NeurIPS 2019.
    """
    validation.check_callable("loss", loss, "a callable loss(outputs, targets)")
    alpha = _check_alpha(alpha)
    reduce = _integer_cross_entropy(loss)
    if reduce is None:
        _check_takes_dense(
            loss, _PROBE[0], _PROBE[1], _PROBE[2], "tried when built"
        )

    if reduce is not None:

        @functools.wraps(loss)
        def smoothed(outputs, targets):
            logits = _logits(outputs)
            return _smoothed_cross_entropy(logits, targets, alpha, reduce)

    else:

        @functools.wraps(loss)
        def smoothed(outputs, targets):
            dense = _smoothed_targets(targets, _logits(outputs), alpha)
            _check_takes_dense(
                loss, outputs, targets, dense, "the step's batch"
            )
            return loss(outputs, dense)

    return smoothed


def with_label_smoothing(options: Any, section: Any) -> Any:
    """`auto_boost`'s objective options with the config's
    ``label_smoothing`` section (`config_sections.LabelSmoothingSection`)
    applied: the loss wrapped by `label_smoothing_loss` when ``enabled``.

    Raises:
      ValueError: label smoothing on with a ``loss_fn`` (the step cannot
        see its targets).
    """
    if not section.enabled:
        return options
    if options.loss_fn is not None:
        raise ValueError(
            "`label_smoothing.enabled` is True, but the step was given "
            "`loss_fn=`: a loss function of the params and the whole batch, "
            "whose targets and outputs the step never sees, so it cannot "
            "smooth them. Pass `model=` and `loss=` (the step then smooths "
            "the targets before the loss), or switch the section off and "
            "call `boostax.smooth_labels(labels, num_classes, alpha)` in "
            "your `loss_fn`."
        )
    if options.loss is None:
        return options  # make_objective refuses the missing loss
    return options.replace(
        loss=label_smoothing_loss(options.loss, section.alpha)
    )
