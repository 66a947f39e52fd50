# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`make_train_step`: a `TrainStep` from a model or loss and an optimizer."""

from __future__ import annotations

from typing import Any

import optax

from boostax._src import data_parallel as data_parallel_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import objective_options
from boostax._src import progressive_resizing as progressive_resizing_lib
from boostax._src import seq_len_warmup as seq_len_warmup_lib
from boostax._src.train_step import TrainStep


def make_train_step(
    optimizer: optax.GradientTransformation,
    *,
    model=None,
    loss=None,
    loss_fn=None,
    has_aux: bool = False,
    predict_fn=None,
    data_parallel: data_parallel_lib.DataParallel | None = None,
    donate_state: bool = False,
    loss_scale: loss_scale_lib.LossScale | None = None,
    precision: Any = None,
    skip_nonfinite: bool = False,
    max_consecutive_skips: int | None = 100,
    raise_on_skips: bool = False,
    batch_keys: tuple[Any, str] | None = None,
    rng_collections: Any = None,
    train_kwargs: Any = None,
    eval_kwargs: Any = None,
    cast_batch: Any = None,
    seq_len_warmup: seq_len_warmup_lib.SeqLenWarmup
    | progressive_resizing_lib.ProgressiveResizing
    | None = None,
) -> TrainStep:
    """Builds a jitted train step from a model or loss and an optimizer.

    Args:
      optimizer: any Optax optimizer. Optimizers that take extra arguments
        (``optax.GradientTransformationExtraArgs``) also receive ``value``,
        ``grad`` and ``value_fn`` (the loss at other params on the same
        batch), so line-search optimizers such as ``optax.lbfgs`` work.
      model: a Flax Linen or NNX module; batches are ``(inputs, targets)``.
      loss: with `model`, ``loss(outputs, targets) -> scalar``.
      loss_fn: instead of `model`/`loss`, ``loss_fn(params, batch)``.
      has_aux: whether the loss returns ``(scalar, metrics_dict)``.
      predict_fn: with `loss_fn`, ``predict_fn(params, inputs)``.
      data_parallel: a `DataParallel` plan to run the step over a device
        mesh (gradients averaged or AdaSum'd); ``None``: one device.
      donate_state: donate the state a call is given to the step: XLA
        writes the new state into its buffers (half the state's memory,
        and less work per call) and the state given is deleted. Default
        ``False``, like ``jax.jit``: every state stays valid, and the device
        holds two states while a step runs (see `TrainStep`). The variables
        given to `init` (and to `from_flax_train_state`) stay valid: the
        state holds copies of them.
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
        batch is passed as given (see `cast_batch`).
      skip_nonfinite: skip (leave params, optimizer and model state exactly
        as they were) a step whose gradients are not finite; `metrics` gets
        ``overflow``.
      max_consecutive_skips: after this many skipped steps in a row, warn
        (``RuntimeWarning``); ``None``: never.
      raise_on_skips: raise ``FloatingPointError`` instead of warning.
      batch_keys: with `model`, ``(inputs key, targets key)`` of dict
        batches (e.g. ``("image", "label")``; see `auto_boost` for several
        positional inputs).
      rng_collections: with a Linen `model`, the RNG streams it draws from
        in training; default ``("dropout",)``.
      train_kwargs, eval_kwargs: with `model`, keyword arguments of its call
        in training and in `TrainStep.predict`.
      cast_batch: with `loss_fn` and a half-precision `precision`, the parts
        of the batch that are inputs, cast to the compute dtype: a pytree of
        bools, a prefix of the batch (``(True, False)`` for an ``(inputs,
        targets)`` pair), or a function of the batch returning one. Other
        leaves (targets) are never cast. ``None``: nothing is cast (JAX then
        promotes the float16 params and float32 inputs to float32).
      seq_len_warmup: a sequence-length warm-up (`boostax.seq_len_warmup`):
        each update trains on the first positions of every sequence of its
        batch, more as training goes on; one compiled program per length.
        Or progressive image resizing (`boostax.progressive_resizing`), a
        schedule of the batch's shape too: each update trains on the
        batch's images shrunk, to full size by the end of the run; one
        compiled program per size. ``None``: the batch as given.

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
    options = objective_options.ObjectiveOptions(
        model=model,
        loss=loss,
        loss_fn=loss_fn,
        has_aux=has_aux,
        predict_fn=predict_fn,
        batch_keys=batch_keys,
        rng_collections=rng_collections,
        train_kwargs=train_kwargs,
        eval_kwargs=eval_kwargs,
        cast_batch=cast_batch,
    )
    return TrainStep(
        options.objective(),
        optimizer,
        data_parallel=data_parallel,
        donate_state=donate_state,
        loss_scale=loss_scale,
        precision=precision,
        skip_nonfinite=skip_nonfinite,
        max_consecutive_skips=max_consecutive_skips,
        raise_on_skips=raise_on_skips,
        seq_len_warmup=seq_len_warmup,
    )
