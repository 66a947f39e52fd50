# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`auto_boost`: a config level turned into one jitted train step."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from boostax._src import accumulation as accumulation_lib
from boostax._src import (
    centralization,
    model_graph,
    step_builder,
    user_warnings,
    validation,
)
from boostax._src import config as config_lib
from boostax._src import data_parallel as data_parallel_lib
from boostax._src import dim_reduce as dim_reduce_lib
from boostax._src import freeze_out as freeze_out_lib
from boostax._src import freezing as freezing_lib
from boostax._src import less_bn as less_bn_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import objectives as objectives_lib
from boostax._src import precision as precision_lib
from boostax._src import train_step as train_step_lib
from boostax._src import trajectory as trajectory_lib
from boostax._src import weight_decay as weight_decay_lib

# Algorithms whose implementation has not landed yet. `auto_boost` refuses a
# configuration that switches one on instead of silently training without it.
NOT_IMPLEMENTED: Mapping[str, str] = {}

# Pairs that cannot train together, and why. MindSpore silently switches the
# others off when dim_reduce is on; boostax says so and stops.
INCOMPATIBLE: Mapping[tuple[str, str], str] = {
    ("dim_reduce", "grad_freeze"): (
        "DimReduce steps in a subspace spanned by all the trainable "
        "params, while freezing trains a changing subset of them"
    ),
    ("dim_reduce", "adasum"): (
        "DimReduce replaces the optimizer whose per-node updates AdaSum "
        "combines (with a mesh, DimReduce averages the gradients)"
    ),
}


class AlgorithmNotImplementedError(NotImplementedError):
    """A configuration switches on algorithms boostax does not implement yet.

    Attributes:
      algorithms: the names of the missing algorithms (see `ALGORITHMS`).
    """

    def __init__(self, message: str, algorithms: tuple[str, ...]):
        super().__init__(message)
        self.algorithms = algorithms


def check_implemented(
    config: config_lib.BoostConfig, algorithms=config_lib.ALGORITHMS
) -> None:
    """Raises if `config` switches on an algorithm that is not implemented.

    Args:
      config: the resolved configuration.
      algorithms: the algorithms to check (default: all of them).
    """
    missing = [
        name
        for name in algorithms
        if config.is_enabled(name) and name in NOT_IMPLEMENTED
    ]
    if missing:
        details = "; ".join(f"`{n}`: {NOT_IMPLEMENTED[n]}" for n in missing)
        raise AlgorithmNotImplementedError(
            f"Level {config.level!r} in mode {config.mode!r} switches on "
            f"algorithms boostax does not implement yet: {details}. Use "
            "level 'O0', or mode 'manual' with these switches set to False.",
            tuple(missing),
        )


def check_compatible(config: config_lib.BoostConfig) -> None:
    """Raises if `config` switches on algorithms that cannot train together."""
    for (a, b), why in INCOMPATIBLE.items():
        if config.is_enabled(a) and config.is_enabled(b):
            raise ValueError(
                f"`{a}` and `{b}` cannot be on together: {why}. Switch one "
                f"off (mode 'manual' with {{'{b}': False}})."
            )


def dim_reduce_from_config(
    config: config_lib.BoostConfig,
    pca_matrix: Any,
    trajectory: Any,
    data_parallel: data_parallel_lib.DataParallel | None,
    like: Any = None,
) -> optax.GradientTransformationExtraArgs:
    """DimReduce with the config's hyper-parameters and PCA matrix.

    The matrix is `pca_matrix` if given; else, as MindSpore resolves it,
    ``pca_mat_path`` if that file exists, else the PCA of `trajectory` (a
    `Trajectory` or an array of snapshots) or of the checkpoints in
    ``weight_load_dir`` (saved to ``pca_mat_path``, or
    ``<weight_load_dir>/pca_mat_temp.npy``).

    `like`, the trained params (or their shapes) when known before `init`,
    gives the matrix's expected number of columns: its shape is checked
    before its rows are (a matrix one column short is named by its shape,
    not by rows that are no longer orthonormal).
    """
    section = config.dim_reduce
    if pca_matrix is not None:
        shape = np.shape(pca_matrix)
        size = None if like is None else trajectory_lib.param_count(like)
        if len(shape) == 2 and size is not None and shape[1] != size:
            raise ValueError(
                f"`pca_matrix` has shape {shape}, expected "
                f"({section.n_components}, {size}): (n_components, number "
                "of parameters of the model being trained)."
            )
        if len(shape) != 2 or shape[0] != section.n_components:
            raise ValueError(
                f"`pca_matrix` has shape {shape}, but `dim_reduce."
                f"n_components` is {section.n_components}: the matrix must "
                "be (n_components, number of parameters). Set "
                f"{{'dim_reduce': {{'n_components': "
                f"{shape[0] if shape else '...'}}}}} in the config to use "
                "this matrix."
            )
    else:
        _check_pca_source(section, trajectory)
        pca_matrix = trajectory_lib.pca_matrix(
            section.n_components,
            pca_mat_path=section.pca_mat_path,
            weight_load_dir=section.weight_load_dir,
            snapshots=trajectory,
            like=like,
            timeout=section.timeout,
        )
    return dim_reduce_lib.dim_reduce(
        pca_matrix,
        rho=section.rho,
        gamma=section.gamma,
        alpha=section.alpha,
        sigma=section.sigma,
        axis_name=None if data_parallel is None else data_parallel.axes,
    )


def _known_params(model: Any, sample_inputs: Any) -> Any:
    """The params' shapes, where known before `init`: an NNX module's, or a
    Linen module's traced on `sample_inputs`; else ``None``."""
    if isinstance(model, nnx.Module) or (
        model is not None and sample_inputs is not None
    ):
        return model_graph.param_shapes(model, sample_inputs)
    return None


def _check_pca_source(section: config_lib.DimReduceSection, trajectory):
    """Raises, in `auto_boost`'s terms, if DimReduce has no PCA matrix.

    `trajectory_lib.pca_matrix` makes the same checks (`as_snapshots`,
    `has_pca_source`) but names its own arguments (``snapshots``), not the
    ones the user passed.
    """
    path = section.pca_mat_path
    if trajectory is not None:
        trajectory_lib.as_snapshots(trajectory, name="trajectory")
        return
    if not trajectory_lib.has_pca_source(path, section.weight_load_dir, None):
        missing = (
            "" if path is None else f" (`pca_mat_path` {path!r} does not exist)"
        )
        raise ValueError(
            "DimReduce needs a PCA matrix and has no source for it"
            f"{missing}: pass `pca_matrix=` (a (k, N) array) or "
            "`trajectory=` (a boostax.Trajectory or an (S, N) array of "
            "snapshots) to auto_boost, or set `dim_reduce.pca_mat_path` to "
            "an existing .npy file or `dim_reduce.weight_load_dir` to a "
            "directory of params checkpoints (boostax.save_snapshot)."
        )


def _check_unused_arguments(config: config_lib.BoostConfig, **given) -> None:
    """Refuses arguments that the configured algorithms would not read."""
    dim_reduce_on = config.is_enabled("dim_reduce")
    for name in ("pca_matrix", "trajectory"):
        if given[name] is not None and not dim_reduce_on:
            raise ValueError(
                f"`{name}=` is DimReduce's, and `dim_reduce` is off at level "
                f"{config.level!r} in mode {config.mode!r}: switch it on "
                "({'boost': {'mode': 'manual', 'dim_reduce': True}}) or drop "
                "the argument."
            )
    if dim_reduce_on and given["weight_decay"]:
        raise ValueError(
            "`weight_decay` cannot apply with `dim_reduce`: DimReduce "
            "replaces the optimizer and its line search minimises the loss "
            "alone (MindSpore drops the user's weight decay there). Add the "
            "L2 term to the loss instead, or switch dim_reduce off."
        )
    if given["weight_decay_mask"] is not None and not given["weight_decay"]:
        raise ValueError(
            "`weight_decay_mask` is given but `weight_decay` is 0: set the "
            "decay, or drop the mask."
        )


def _check_sample_inputs(sample_inputs: Any) -> None:
    """Raises, naming `sample_inputs`, unless it is arrays (shapes used)."""
    leaves = jax.tree.leaves(sample_inputs)
    problem = "" if leaves else "it holds no array"
    for leaf in leaves:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            problem = (
                f"a leaf is a {type(leaf).__name__}, not an array (nested "
                "lists are pytrees of scalars: pass np.asarray(...))"
            )
        elif np.dtype(leaf.dtype).kind not in "biufc":
            problem = f"a leaf of dtype {leaf.dtype} is not numeric"
        elif not np.ndim(leaf):
            problem = "a leaf is a scalar, without a batch dimension"
        else:
            continue
        break
    if problem:
        raise TypeError(
            "`sample_inputs` must be one batch of model inputs: an array or "
            f"a pytree of arrays (only shapes and dtypes are used); {problem}"
            f", {validation.got(sample_inputs)}."
        )


def apply_less_bn(
    model: Any,
    optimizer: optax.GradientTransformation,
    config: config_lib.BoostConfig,
    sample_inputs: Any,
    decay: weight_decay_lib.WeightDecay | None = None,
):
    """LessBN with the config's FN head and gradient centralization.

    Returns:
      ``(reduced_model, optimizer, convert_variables, report)``: the model
      with BatchNorms removed (and the FN head if ``less_bn.fn_flag``), the
      optimizer preceded by gradient centralization (if ``less_bn.gc_flag``;
      grouped convolutions and the FN head excluded) and before that by
      `decay` (MindSpore's order), the function that converts the original
      model's variables, and the `LessBNReport`.
    """
    decay = weight_decay_lib.WeightDecay() if decay is None else decay
    if model is None:
        raise ValueError(
            "`less_bn` rewrites a Flax model's BatchNorms: pass `model=` "
            "(a plain `loss_fn` has none), or switch less_bn off."
        )
    if sample_inputs is None:
        raise ValueError(
            "`less_bn` traces the model to find its BatchNorm structures: "
            "pass `sample_inputs=` (one batch of inputs; only shapes and "
            "dtypes are used)."
        )
    validation.check_optimizer("optimizer", optimizer)
    section = config.less_bn
    plan = less_bn_lib.plan(
        model,
        sample_inputs,
        fn_flag=section.fn_flag,
        fn_scale=section.fn_scale,
        fn_log_scale=section.fn_log_scale,
        zero_init_residual=section.zero_init_residual,
    )
    reduced = less_bn_lib.apply_plan(model, plan)
    if config.less_bn.gc_flag:
        optimizer = centralization.with_gradient_centralization(
            optimizer,
            weight_decay=decay.rate,
            weight_decay_mask=decay.mask,
            mask=functools.partial(
                centralization.gradient_centralization_mask,
                excluded_modules=plan.excluded_from_gc,
            ),
        )
    else:
        optimizer = decay.chain(optimizer)
    return (
        reduced,
        optimizer,
        less_bn_lib.variables_converter(reduced, plan),
        plan.report,
    )


def freeze_groups(model: Any, config: config_lib.BoostConfig, sample_inputs):
    """The freezing groups of the config's ``grad_freeze`` section.

    With a model, cut on `model` as given (before LessBN, as MindSpore cuts
    them on the network's own parameters) in its call order (one trace on
    `sample_inputs`); with a plain loss function, ``None``: the parameters
    are cut in a natural sort of their paths when they are known.
    """
    section = config.grad_freeze
    if model is None:
        return None
    if sample_inputs is None:
        raise ValueError(
            "`grad_freeze` groups the parameters in the order the model "
            "calls its layers, found by tracing it: pass `sample_inputs=` "
            "(one batch of inputs; only shapes and dtypes are used)."
        )
    return freezing_lib.split_parameters_groups(
        model, section.param_groups, sample_inputs=sample_inputs
    )


def with_freeze_out(optimizer, config: config_lib.BoostConfig, groups):
    """`optimizer` followed by FreezeOut's annealing with the progressive
    schedule (``grad_freeze.freeze_type`` 2), else unchanged."""
    section = config.grad_freeze
    if section.freeze_type != freezing_lib.PROGRESSIVE_STRATEGY:
        return optimizer
    steps = freezing_lib.progressive_freeze_steps(
        section.param_groups, section.freeze_p, section.total_steps
    )
    return optax.chain(
        optimizer,
        freeze_out_lib.scale_by_freeze_out(
            groups, steps, groups_number=section.param_groups
        ),
    )


def freezing_from_config(config: config_lib.BoostConfig, groups, seed: int):
    """The `Freezing` factory of the config's ``grad_freeze`` section, with
    the groups of `freeze_groups`."""
    section = config.grad_freeze
    return freezing_lib.freezing_factory(
        groups_number=section.param_groups,
        strategy=section.freeze_type,
        freeze_p=section.freeze_p,
        total_steps=section.total_steps,
        seed=seed,
        groups=groups,
        micro_steps=accumulation_steps(config),
    )


def accumulation_steps(config: config_lib.BoostConfig) -> int:
    """Micro-steps per update: ``grad_accumulation_step`` if switched on."""
    if config.is_enabled("grad_accumulation"):
        return config.grad_accumulation.grad_accumulation_step
    return 1


def loss_scale_from_config(config: config_lib.BoostConfig, loss_scale: Any):
    """Checks `loss_scale` against the ``loss_scale_group`` switch."""
    if hasattr(loss_scale, "loss_scale_rule"):  # GroupLossScaleManager
        loss_scale = loss_scale.loss_scale_rule()
    loss_scale_lib.check_loss_scale(loss_scale)
    grouped = isinstance(loss_scale, loss_scale_lib.GroupLossScale)
    if config.is_enabled("loss_scale_group") and not grouped:
        raise ValueError(
            "`loss_scale_group` is on: pass `loss_scale=` a "
            "GroupLossScaleManager (or GroupLossScale) with the groups, "
            f"{validation.got(loss_scale)}."
        )
    if grouped and not config.is_enabled("loss_scale_group"):
        raise ValueError(
            "A group loss scale needs `loss_scale_group` switched on (mode "
            "'manual' with {'loss_scale_group': True}), as in MindSpore."
        )
    return loss_scale


def data_parallel_from_config(
    config: config_lib.BoostConfig, mesh: Mesh | None
) -> data_parallel_lib.DataParallel | None:
    """The data-parallel plan of `mesh` under the config's ``adasum`` switch.

    Without AdaSum, gradients are averaged over every device of `mesh`.
    With it, a 1-D mesh is cut into nodes of ``common.device_number``
    devices (MindSpore's hierarchy: average within a node, AdaSum across
    nodes; ``device_number`` 1 gives AdaSum over every device), and a 2-D
    mesh is taken as ``(node, local)`` axes as given. AdaSum with no mesh or
    a single node has nothing to combine: it warns and averages.
    """
    if mesh is not None:
        validation.check_instance(
            "mesh",
            mesh,
            Mesh,
            "a jax.sharding.Mesh (e.g. jax.make_mesh((n,), ('data',))) or None",
        )
    adasum_on = config.is_enabled("adasum")
    if not adasum_on:
        return None if mesh is None else data_parallel_lib.DataParallel(mesh)
    if mesh is None:
        user_warnings.warn(
            "AdaSum combines the updates of data-parallel devices, and this "
            "step is not data-parallel: pass `mesh=` (a jax.sharding.Mesh) "
            "to use it. Training without AdaSum."
        )
        return None
    if len(mesh.axis_names) == 1:
        device_number = min(config.common.device_number, mesh.devices.size)
        if device_number > 1:
            mesh = data_parallel_lib.node_mesh(device_number, mesh)
    elif len(mesh.axis_names) != 2:
        raise ValueError(
            "With AdaSum, `mesh` must have one axis (cut into nodes of "
            "`common.device_number` devices) or two (node, local), got the "
            f"axes {tuple(mesh.axis_names)}."
        )
    local_axis = mesh.axis_names[1] if len(mesh.axis_names) == 2 else None
    dp = data_parallel_lib.DataParallel(
        mesh, reduction="adasum", local_axis=local_axis
    )
    if dp.num_nodes == 1:
        user_warnings.warn(
            f"AdaSum runs across nodes, and the {dp.num_devices} device(s) "
            "form a single node (`common.device_number` = "
            f"{config.common.device_number}): the gradients are averaged. "
            "Set `common.device_number` to the devices per node (1: AdaSum "
            "over every device)."
        )
        return data_parallel_lib.DataParallel(mesh)
    return dp


def auto_boost(
    level: str = "O0",
    config: config_lib.BoostConfig | Mapping | str | os.PathLike | None = None,
    *,
    optimizer: optax.GradientTransformation,
    model: Any = None,
    loss: Callable[..., Any] | None = None,
    loss_fn: Callable[..., Any] | None = None,
    has_aux: bool = False,
    predict_fn: Callable[..., Any] | None = None,
    sample_inputs: Any = None,
    seed: int = 0,
    loss_scale: Any = None,
    precision: Any = None,
    mesh: Mesh | None = None,
    pca_matrix: Any = None,
    trajectory: Any = None,
    donate_state: bool = False,
    background_compile: bool | None = None,
    freeze_warmup_steps: int | None = None,
    skip_nonfinite: bool = False,
    max_consecutive_skips: int | None = 100,
    raise_on_skips: bool = False,
    weight_decay: float = 0.0,
    weight_decay_mask: Any = None,
    batch_keys: tuple[str, str] | None = None,
    rng_collections: Sequence[str] | None = None,
    train_kwargs: Mapping[str, Any] | None = None,
    eval_kwargs: Mapping[str, Any] | None = None,
    cast_batch: Any = None,
) -> train_step_lib.TrainStep:
    """Builds the jitted train step of a boost level.

    The level and the config choose the algorithms (see `BoostConfig`):
    ``"O0"`` trains exactly as the hand-written Optax step would, ``"O1"``
    adds LessBN and gradient freezing, ``"O2"`` adds AdaSum on top (with a
    `mesh`; MindSpore's O2 skips AdaSum while freezing is on, boostax runs
    both). With ``dim_reduce`` on (manual mode), DimReduce replaces
    `optimizer`: pass the PCA matrix, a trajectory, or the config's
    ``pca_mat_path`` / ``weight_load_dir``.

    Args:
      level: ``"O0"``, ``"O1"`` or ``"O2"``.
      config: a `BoostConfig`, a MindSpore-style ``boost_config_dict``, the
        path of a JSON file holding one, or ``None`` for the level's defaults.
      optimizer: the Optax optimizer the algorithms wrap.
      model: a Flax Linen or NNX module, trained on ``(inputs, targets)``
        batches with `loss`.
      loss: with `model`, ``loss(outputs, targets) -> scalar``.
      loss_fn: instead of `model` and `loss`, ``loss_fn(params, batch)``.
      has_aux: whether the loss returns ``(scalar, metrics_dict)``.
      predict_fn: with `loss_fn`, ``predict_fn(params, inputs)``.
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
        every batch.
      pca_matrix: with ``dim_reduce``, the ``(n_components, n_params)``
        PCA matrix of the weight trajectory (default: from the config's
        ``pca_mat_path`` / ``weight_load_dir``, or `trajectory`).
      trajectory: with ``dim_reduce``, a `Trajectory` (or an array of
        flattened snapshots) to compute the PCA matrix from.
      donate_state: donate the state a call is given to the step: XLA
        writes the new state into its buffers (half the state's memory,
        and less work per call) and the state given is deleted. Default
        ``False``, like ``jax.jit``: every state stays valid, and the device
        holds two states while a step runs (see `TrainStep`). The variables
        given to `init` stay valid: the state holds copies of them.
      background_compile: with gradient freezing, compile every freeze
        depth in background threads from the first call on, while training
        runs (default: on, unless the environment variable
        ``BOOSTAX_BACKGROUND_COMPILE`` is ``0``). Off, each depth compiles
        when the sequence first reaches it.
      freeze_warmup_steps: with gradient freezing, the first train steps
        (positions) run one masked program for every depth (each depth's
        frozen gradients zeroed, its frozen params and optimizer slots
        kept: every gradient computed, no saving) while the depths' own
        programs compile; later steps run their depth's own program. The
        program of a step depends on its position alone, so the results
        do not depend on how fast the machine compiles. 0: every step runs
        its depth's own program. Default: 1024.
      skip_nonfinite: without `loss_scale`, skip (params, optimizer and
        model state left exactly as they were) a step whose gradients are
        not finite, as loss scaling does; `metrics` gets ``overflow``.
      max_consecutive_skips: after this many skipped steps in a row (NaN
        data, a dynamic loss scale stuck at its minimum), the call warns
        with a ``RuntimeWarning``; ``None``: never.
      raise_on_skips: raise ``FloatingPointError`` instead of warning.
      weight_decay: L2 weight decay, in MindSpore's place: ``weight_decay *
        params`` is added to the gradient first, then gradient
        centralization (LessBN) and `optimizer` see it — the gradient of
        ``weight_decay / 2 * sum(p ** 2)`` added to the loss, as the Flax
        examples do. With accumulation it is added once per update, with
        freezing to the trained leaves only. 0: none.
      weight_decay_mask: the leaves decayed: a pytree of bools like the
        params, or a function of the params returning one (as
        ``optax.add_decayed_weights`` takes); default: leaves with more than
        one dimension (kernels; not biases, normalisation scales or the FN
        head's multiplier), as the Flax ImageNet example decays.
      batch_keys: with `model`, ``(inputs key, targets key)`` when batches
        are dicts (``("image", "label")`` in the Flax examples); default:
        ``(inputs, targets)`` pairs.
      rng_collections: with a Linen `model`, the RNG streams it draws from
        in training (``self.make_rng(name)``); default ``("dropout",)``.
        Each step gives every stream its own key.
      train_kwargs: with `model`, keyword arguments of its call in training
        (default ``{"train": True}`` when a Linen ``__call__`` takes
        ``train``).
      eval_kwargs: the same for `TrainStep.predict` (default
        ``{"train": False}``).
      cast_batch: with `loss_fn` and a half-precision `precision`, the
        parts of the batch that are inputs, cast to the compute dtype (a
        pytree of bools, a prefix of the batch, or a function of the batch
        returning one); targets are never cast. ``None``: nothing is.

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
        switches on an algorithm listed in `NOT_IMPLEMENTED` (none today).
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
    boost_config = config_lib.boost_config(level, config)
    check_implemented(boost_config)
    check_compatible(boost_config)
    validation.check_optimizer("optimizer", optimizer)
    # Flags are checked before any tracing (LessBN, freezing groups).
    validation.check_bool("has_aux", has_aux)
    validation.check_bool("donate_state", donate_state)
    validation.check_optional_bool("background_compile", background_compile)
    if freeze_warmup_steps is not None:
        validation.check_int(
            "freeze_warmup_steps", freeze_warmup_steps, minimum=0
        )
    step_builder.check_skip_options(
        skip_nonfinite, max_consecutive_skips, raise_on_skips
    )
    validation.check_int("seed", seed, minimum=0)
    weight_decay = validation.check_number(
        "weight_decay", weight_decay, minimum=0
    )
    _check_unused_arguments(
        boost_config,
        pca_matrix=pca_matrix,
        trajectory=trajectory,
        weight_decay=weight_decay,
        weight_decay_mask=weight_decay_mask,
    )
    if sample_inputs is not None:
        _check_sample_inputs(sample_inputs)
    loss_scale = loss_scale_from_config(boost_config, loss_scale)
    precision = precision_lib.get_policy(precision)
    convert_variables, less_bn_report = None, None
    model_options = dict(
        batch_keys=batch_keys,
        rng_collections=rng_collections,
        train_kwargs=train_kwargs,
        eval_kwargs=eval_kwargs,
    )
    decay = weight_decay_lib.WeightDecay(weight_decay, weight_decay_mask)
    plain = train_step_lib.PlainRecipe(
        dict(
            optimizer=decay.chain(optimizer),
            model=model,
            loss=loss,
            loss_fn=loss_fn,
            has_aux=has_aux,
            predict_fn=predict_fn,
            **model_options,
        ),
        mesh,
    )
    if boost_config.is_enabled("less_bn"):
        model, optimizer, convert_variables, less_bn_report = apply_less_bn(
            model, optimizer, boost_config, sample_inputs, decay
        )
        if isinstance(loss_scale, loss_scale_lib.GroupLossScale):
            # Groups named on the original model, as freezing's are,
            # restricted to the reduced model's params (which LessBN's
            # folds never add to: they are model state).
            loss_scale = loss_scale.restricted(
                model_graph.param_shapes(model, sample_inputs),
                model_graph.param_shapes(plain.kwargs["model"], sample_inputs),
            )
    else:
        optimizer = decay.chain(optimizer)
    groups = None
    if boost_config.is_enabled("grad_freeze"):
        groups = freeze_groups(
            plain.kwargs["model"], boost_config, sample_inputs
        )
        optimizer = with_freeze_out(optimizer, boost_config, groups)
    data_parallel = data_parallel_from_config(boost_config, mesh)
    if boost_config.is_enabled("dim_reduce"):
        # DimReduce is the optimizer (MindSpore: SGD(lr=1) applying its step).
        optimizer = dim_reduce_from_config(
            boost_config,
            pca_matrix,
            trajectory,
            data_parallel,
            _known_params(model, sample_inputs),
        )
    if data_parallel is not None and data_parallel.reduction == "adasum":
        # Inside the accumulation: AdaSum runs on real updates only.
        optimizer = data_parallel.adasum(optimizer)
    if accumulation_steps(boost_config) > 1:
        optimizer = accumulation_lib.gradient_accumulation(
            optimizer, accumulation_steps(boost_config)
        )
    objective = objectives_lib.make_objective(
        model=model,
        loss=loss,
        loss_fn=loss_fn,
        has_aux=has_aux,
        predict_fn=predict_fn,
        convert_variables=convert_variables,
        cast_batch=cast_batch,
        **model_options,
    )
    freezing = None
    if boost_config.is_enabled("grad_freeze"):
        freezing = freezing_from_config(boost_config, groups, seed)
    train_step = train_step_lib.TrainStep(
        objective,
        optimizer,
        config=boost_config,
        freezing=freezing,
        loss_scale=loss_scale,
        data_parallel=data_parallel,
        donate_state=donate_state,
        background_compile=background_compile,
        freeze_warmup_steps=freeze_warmup_steps,
        skip_nonfinite=skip_nonfinite,
        max_consecutive_skips=max_consecutive_skips,
        raise_on_skips=raise_on_skips,
        precision=precision,
    )
    train_step.less_bn_report = less_bn_report
    train_step.plain_recipe = plain
    if sample_inputs is not None:
        train_step.sample_inputs = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)),
            sample_inputs,
        )
    return train_step
