# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`auto_boost`: a config level turned into one jitted train step.

The config's sections become the step's components in `boost_components`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import optax
from jax.sharding import Mesh

from boostax._src import accumulation as accumulation_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import model_graph, user_warnings, validation
from boostax._src import precision as precision_lib
from boostax._src import weight_decay as weight_decay_lib
from boostax._src.config import boost_config as config_lib
from boostax._src.config import components
from boostax._src.methods import label_smoothing as label_smoothing_lib
from boostax._src.methods import (
    progressive_resizing as progressive_resizing_lib,
)
from boostax._src.step import objective_options
from boostax._src.step import options as step_options_lib
from boostax._src.step import train_step as train_step_lib


def auto_boost(
    level: str = "O0",
    config: config_lib.BoostConfig | Mapping | str | os.PathLike | None = None,
    *,
    optimizer: optax.GradientTransformation,
    model: Any = None,
    loss: Callable[..., Any] | None = None,
    loss_fn: Callable[..., Any] | None = None,
    sample_inputs: Any = None,
    seed: int = 0,
    mesh: Mesh | None = None,
    precision: Any = None,
    loss_scale: Any = None,
    options: step_options_lib.StepOptions | Mapping[str, Any] | None = None,
    **old_options: Any,
) -> train_step_lib.TrainStep:
    """Builds the jitted train step of a boost level.

    The level and the config choose the algorithms (see `BoostConfig`):
    ``"O0"`` trains exactly as the hand-written Optax step would, ``"O1"``
    adds LessBN and gradient freezing, ``"O2"`` adds AdaSum on top (with a
    `mesh`; MindSpore's O2 skips AdaSum while freezing is on, boostax runs
    both). LessBN and freezing are made for convolutional networks with
    BatchNorm: on a model without any (a transformer, an MLP) mode
    ``"auto"`` switches neither on, with a warning, because both cost
    loss there (MindSpore's O1 on it: mode ``"manual"`` with both on; for
    a language model see `boostax.text_recipe`). With ``dim_reduce`` on
    (manual mode), DimReduce replaces `optimizer`: pass the PCA matrix or a
    trajectory in `options` (`StepOptions`), or the config's
    ``pca_mat_path`` / ``weight_load_dir``.
    The config's ``seq_len_warmup`` section (boostax's; ``enabled`` True)
    adds a sequence-length warm-up (`boostax.seq_len_warmup`) at any
    level, its ``progressive_resizing`` section progressive image resizing
    (`boostax.progressive_resizing`; not with the warm-up), and its
    ``weight_averaging`` section a moving average of the params
    (`boostax.average_params`, chained last onto the optimizer inside any
    accumulation), which `TrainStep.predict` evaluates.

    Args:
      level: ``"O0"``, ``"O1"`` or ``"O2"``.
      config: a `BoostConfig`, a MindSpore-style ``boost_config_dict`` (or
        an ml_collections ``ConfigDict``, any Mapping), the path of a JSON
        file holding one, or ``None`` for the level's defaults.
      optimizer: the Optax optimizer the algorithms wrap.
      model: a Flax Linen or NNX module, trained on ``(inputs, targets)``
        batches with `loss`.
      loss: with `model`, ``loss(outputs, targets) -> scalar``. With the
        config's ``label_smoothing`` section enabled, the step gives it
        smoothed class targets (`boostax.label_smoothing_loss`; refused
        with `loss_fn`).
      loss_fn: instead of `model` and `loss`, ``loss_fn(params, batch)``.
      sample_inputs: one batch of model inputs (shapes only); needed by
        LessBN and gradient freezing, which trace the model.
      seed: seed of the gradient-freezing sequence (strategy 1).
      loss_scale: a `StaticLossScale`, `DynamicLossScale`, or with
        ``loss_scale_group`` a `GroupLossScaleManager` / `GroupLossScale`;
        an overflowing step is skipped and `metrics` gets ``overflow`` and
        ``loss_scale``.
      precision: mixed precision, as MindSpore's ``amp_level``: ``"O0"``
        (float32), ``"O2"`` (float16 with normalisation layers and the
        loss in float32, and a dynamic loss scale unless `loss_scale` is
        given), ``"O3"`` (all parameters cast), ``"bfloat16"`` (O2 in
        bfloat16, no loss scale), or a `PrecisionPolicy`. Parameters,
        optimizer and model state stay float32. ``None``: float32. A
        float16 policy that brings no loss scale (``loss_scale=None``)
        needs `loss_scale`: the call raises otherwise.
      mesh: a ``jax.sharding.Mesh`` to train data-parallel on: the batch is
        split over its devices, parameters replicated, gradients averaged —
        or, with AdaSum on (O2), averaged within each node of
        ``common.device_number`` devices and the optimizer's updates
        AdaSum'd across nodes. A 2-D mesh gives the (node, local) axes
        directly. In a multi-process run, each process passes its share of
        every batch. The config's ``data_parallel`` section splits the
        optimizer state over it (ZeRO-1) and the params too (`DataParallel`).
      options: a `StepOptions` (or a dict of its fields): how the model is
        called (``has_aux``, ``batch_keys``, ``rng_collections``,
        ``train_kwargs``, ...), how the step runs (``donate_state``, the
        skipped-step settings, ``background_compile``,
        ``freeze_warmup_steps``), ``weight_decay`` in MindSpore's place,
        and DimReduce's ``pca_matrix`` / ``trajectory``.
      **old_options: `StepOptions`' fields as keyword arguments, and
        ``shard_optimizer_state`` / ``shard_params`` (now the config's
        ``data_parallel`` section's only), as before: read for one
        release, with a ``DeprecationWarning`` naming the new home.

    Returns:
      A `TrainStep`: ``state = ts.init(variables)``, then
      ``state, metrics = ts(state, batch)``. With LessBN, ``ts.model`` is
      the reduced model and ``ts.init`` also accepts the original model's
      variables, converted without losing what they hold: weights a user
      brings are never silently re-initialised or transformed. Fresh ones
      get LessBN's initialisation (removed BatchNorms dropped, dense -> FN
      head, ``zero_init_residual``); trained ones keep their function
      (each removed BatchNorm folded into the layer before it, trained
      scales kept) or are refused with the reason (an FN head in place of
      a trained dense head: pass ``less_bn``'s ``fn_flag`` False).

    Raises:
      ValueError, TypeError: for an invalid level, config or argument.
      AlgorithmNotImplementedError: (a `NotImplementedError`) if the config
        switches on an algorithm listed in
        `boost_components.NOT_IMPLEMENTED` (none today).
      ValueError: if it switches on algorithms that cannot train together
        (``dim_reduce`` with ``grad_freeze`` or ``adasum``).

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> from boostax.examples import models
      >>> model = models.MLP(features=(16,))
      >>> def loss(logits, labels):
      ...   return optax.softmax_cross_entropy_with_integer_labels(
      ...       logits, labels).mean()
      >>> ts = boostax.auto_boost("O0", optimizer=optax.sgd(0.1),
      ...                         model=model, loss=loss)
      >>> x = jnp.ones((4, 64)); y = jnp.arange(4)
      >>> state = ts.init(model.init(jax.random.PRNGKey(0), x))
      >>> state, metrics = ts(state, (x, y))
      >>> int(state.step)
      1
    """
    shard_optimizer_state = _old_data_parallel_setting(
        old_options, "shard_optimizer_state"
    )
    shard_params = _old_data_parallel_setting(old_options, "shard_params")
    step_options = step_options_lib.with_deprecated(
        options, old_options, "auto_boost"
    )
    freeze_warmup_steps = step_options.freeze_warmup_steps
    weight_decay = step_options.weight_decay
    trained = objective_options.ObjectiveOptions(
        model=model, loss=loss, loss_fn=loss_fn, calling=step_options
    )
    boost_config = config_lib.boost_config(level, config)
    # The loss on smoothed targets: for the plain step and the boosted one.
    trained = label_smoothing_lib.with_label_smoothing(
        trained, boost_config.label_smoothing
    )
    components.check_implemented(boost_config)
    components.check_compatible(boost_config)
    validation.check_optimizer("optimizer", optimizer)
    validation.check_int("seed", seed, minimum=0)
    components.check_unused_arguments(
        boost_config,
        pca_matrix=step_options.pca_matrix,
        trajectory=step_options.trajectory,
        weight_decay=weight_decay,
    )
    if sample_inputs is not None:
        model_graph.check_sample_inputs(sample_inputs)
    loss_scale = components.loss_scale_from_config(boost_config, loss_scale)
    precision = precision_lib.get_policy(precision)
    convert_variables, less_bn_report = None, None
    decay = weight_decay_lib.WeightDecay(
        weight_decay, step_options.weight_decay_mask
    )
    # The plain step trains the original model (before LessBN).
    plain = objective_options.PlainRecipe.of(
        trained, decay.chain(optimizer), mesh
    )
    less_bn_plan = None
    if boost_config.is_enabled("less_bn"):
        less_bn_plan = components.plan_less_bn(
            model, boost_config, sample_inputs
        )
        # Mode "auto" on a model without BatchNorm: LessBN and freezing off.
        level_config = boost_config
        boost_config = components.level_on_model(
            boost_config, less_bn_plan.report
        )
        if freeze_warmup_steps is not None and boost_config != level_config:
            raise ValueError(
                "`freeze_warmup_steps` is gradient freezing's, and level "
                f"{level_config.level!r} in mode 'auto' leaves freezing off "
                "on this model, which has no BatchNorm: drop the setting, "
                "or switch freezing on with {'boost': {'mode': 'manual', "
                "'grad_freeze': True}}."
            )
    if boost_config.is_enabled("less_bn"):
        model, optimizer, convert_variables, less_bn_report = (
            components.apply_less_bn(
                model,
                optimizer,
                boost_config,
                sample_inputs,
                decay,
                plan=less_bn_plan,
            )
        )
        if isinstance(loss_scale, loss_scale_lib.GroupLossScale):
            # Groups named on the original model, as freezing's are,
            # restricted to the reduced model's params (which LessBN's
            # folds never add to: they are model state).
            loss_scale = loss_scale.restricted(
                model_graph.param_shapes(model, sample_inputs),
                model_graph.param_shapes(trained.model, sample_inputs),
            )
    else:
        optimizer = decay.chain(optimizer)
    groups = None
    if boost_config.is_enabled("grad_freeze"):
        groups = components.freeze_groups(
            trained.model, boost_config, sample_inputs
        )
        optimizer = components.with_freeze_out(optimizer, boost_config, groups)
    data_parallel = components.data_parallel_from_config(
        boost_config,
        mesh,
        shard_optimizer_state=shard_optimizer_state,
        shard_params=shard_params,
    )
    if boost_config.is_enabled("dim_reduce"):
        # DimReduce is the optimizer (MindSpore: SGD(lr=1) applying its step).
        optimizer = components.dim_reduce_from_config(
            boost_config,
            step_options.pca_matrix,
            step_options.trajectory,
            data_parallel,
            components.known_params(model, sample_inputs),
        )
    if data_parallel is not None and data_parallel.reduction == "adasum":
        # Inside the accumulation: AdaSum runs on real updates only.
        optimizer = data_parallel.adasum(optimizer)
    # Last, on the final updates; inside the accumulation (real updates).
    optimizer = components.with_weight_averaging(optimizer, boost_config)
    if components.accumulation_steps(boost_config) > 1:
        optimizer = accumulation_lib.gradient_accumulation(
            optimizer, components.accumulation_steps(boost_config)
        )
    # LessBN's reduced model is trained, and `init` takes the original's
    # variables too.
    objective = trained.replace(model=model).objective(convert_variables)
    freezing = None
    if boost_config.is_enabled("grad_freeze"):
        freezing = components.freezing_from_config(boost_config, groups, seed)
    return train_step_lib.TrainStep(
        objective,
        optimizer,
        config=boost_config,
        freezing=freezing,
        loss_scale=loss_scale,
        data_parallel=data_parallel,
        options=step_options.running(),
        precision=precision,
        seq_len_warmup=progressive_resizing_lib.shape_schedule(boost_config),
        less_bn_report=less_bn_report,
        plain_recipe=plain,
        sample_inputs=sample_inputs,
    )


def _old_data_parallel_setting(old_options: dict[str, Any], name: str) -> Any:
    """Pops `name`, once an argument of `auto_boost` and now the config's
    ``data_parallel`` section's only, warning that it moved."""
    if name not in old_options:
        return None
    user_warnings.warn(
        f"`auto_boost(..., {name}=...)` moved to the config: "
        f"`{{'data_parallel': {{'{name}': ...}}}}`; the old spelling will "
        "be removed in the next release.",
        DeprecationWarning,
    )
    return old_options.pop(name)
