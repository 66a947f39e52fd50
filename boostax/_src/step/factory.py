# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`make_train_step`: a `TrainStep` from a model or loss and an optimizer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import optax

from boostax._src import loss_scale as loss_scale_lib
from boostax._src.distributed import data_parallel as data_parallel_lib
from boostax._src.methods import (
    progressive_resizing as progressive_resizing_lib,
)
from boostax._src.methods import seq_len_warmup as seq_len_warmup_lib
from boostax._src.step import objective_options
from boostax._src.step import options as step_options_lib
from boostax._src.step.train_step import TrainStep


def make_train_step(
    optimizer: optax.GradientTransformation,
    *,
    model: Any = None,
    loss: Callable[..., Any] | None = None,
    loss_fn: Callable[..., Any] | None = None,
    data_parallel: data_parallel_lib.DataParallel | None = None,
    loss_scale: loss_scale_lib.LossScale | None = None,
    precision: Any = None,
    seq_len_warmup: seq_len_warmup_lib.SeqLenWarmup
    | progressive_resizing_lib.ProgressiveResizing
    | None = None,
    options: step_options_lib.StepOptions | Mapping[str, Any] | None = None,
    **old_options: Any,
) -> TrainStep:
    """Builds a jitted train step from a model or loss and an optimizer.

    The algorithms-free entry point: each argument is an object the step
    applies as given (a `DataParallel` plan, a loss scale, a shape
    schedule); `auto_boost` builds them from a level and a config.

    Args:
      optimizer: any Optax optimizer. Optimizers that take extra arguments
        (``optax.GradientTransformationExtraArgs``) also receive ``value``,
        ``grad`` and ``value_fn`` (the loss at other params on the same
        batch), so line-search optimizers such as ``optax.lbfgs`` work.
      model: a Flax Linen or NNX module; batches are ``(inputs, targets)``.
      loss: with `model`, ``loss(outputs, targets) -> scalar``.
      loss_fn: instead of `model`/`loss`, ``loss_fn(params, batch)``.
      data_parallel: a `DataParallel` plan to run the step over a device
        mesh (gradients averaged or AdaSum'd); ``None``: one device.
      loss_scale: a `StaticLossScale`, `DynamicLossScale` or
        `GroupLossScale`: the loss is scaled, the gradients unscaled, and a
        step whose gradients are not finite is skipped (`metrics` gets
        ``overflow`` and ``loss_scale``).
      precision: mixed precision: a `PrecisionPolicy`, MindSpore's amp level
        names ``"O0"`` (float32), ``"O2"`` (float16, normalisation
        layers and the loss in float32, a dynamic loss scale) or
        ``"O3"`` (all parameters cast), or ``"bfloat16"`` / ``"float16"``
        (O2 in that dtype; no loss scale with bfloat16). Parameters,
        optimizer and model state stay float32; `TrainStep.predict` runs in
        float32. ``None``: float32. A float16 policy without a loss scale
        of its own (``loss_scale=None``) needs `loss_scale`: building the
        step raises otherwise. With `loss_fn`, the params are cast and the
        batch is passed as given (`StepOptions.cast_batch`).
      seq_len_warmup: a sequence-length warm-up (`boostax.seq_len_warmup`):
        each update trains on the first positions of every sequence of its
        batch, more as training goes on; one compiled program per length.
        Or progressive image resizing (`boostax.progressive_resizing`), a
        schedule of the batch's shape too: each update trains on the
        batch's images shrunk, to full size by the end of the run; one
        compiled program per size. ``None``: the batch as given.
      options: a `StepOptions` (or a dict of its fields): how the model is
        called (``has_aux``, ``batch_keys``, ``rng_collections``, ...),
        ``donate_state`` and the skipped-step settings. Its gradient
        freezing, DimReduce and weight-decay fields are `auto_boost`'s and
        are refused here.
      **old_options: `StepOptions`' fields as keyword arguments, as before
        it existed: read for one release, with a ``DeprecationWarning``.

    Returns:
      A `TrainStep`: ``state = ts.init(variables)`` then
      ``state, metrics = ts(state, batch)``.

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> loss_fn = lambda w, batch: jnp.mean((batch[0] @ w - batch[1]) ** 2)
      >>> ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=loss_fn)
      >>> state = ts.init(jnp.zeros(3))
      >>> x = jnp.eye(3); y = jnp.array([1.0, 2.0, 3.0])
      >>> for _ in range(50):
      ...   state, metrics = ts(state, (x, y))
      >>> bool(metrics["loss"] < 1e-2), ts.trace_count
      (True, 1)
    """
    options = step_options_lib.with_deprecated(
        options, old_options, "make_train_step"
    )
    options.check_for_make_train_step()
    objective = objective_options.ObjectiveOptions(
        model=model, loss=loss, loss_fn=loss_fn, calling=options
    )
    return TrainStep(
        objective.objective(),
        optimizer,
        data_parallel=data_parallel,
        loss_scale=loss_scale,
        precision=precision,
        seq_len_warmup=seq_len_warmup,
        options=options.running(),
    )
