# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""From a `BoostConfig` to the components of a train step.

Each function reads one section of a validated config and returns what the
step is built from: the LessBN model and optimizer, the freezing plan, the
accumulation count, the loss scale, the data-parallel plan, DimReduce. They
refuse what cannot train (an algorithm not implemented, a pair that cannot
run together) and what would be ignored. `auto_boost` (the entry point) and
the MindSpore layer (`boostax.mindspore`) both build their steps from them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from boostax._src import loss_scale as loss_scale_lib
from boostax._src import model_graph, user_warnings, validation
from boostax._src import weight_decay as weight_decay_lib
from boostax._src.config import boost_config as config_lib
from boostax._src.config import sections as config_sections
from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from boostax._src.dim_reduce import trajectory as trajectory_lib
from boostax._src.distributed import data_parallel as data_parallel_lib
from boostax._src.freezing import freeze_out as freeze_out_lib
from boostax._src.freezing import groups as freeze_groups_lib
from boostax._src.freezing import plan as freezing_lib
from boostax._src.freezing import sequence as freeze_sequence_lib
from boostax._src.less_bn import api as less_bn_lib
from boostax._src.less_bn import centralization
from boostax._src.less_bn import fan_in as fan_in_lib
from boostax._src.less_bn import plan as less_bn_plan_lib
from boostax._src.methods import weight_averaging as weight_averaging_lib

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
        check_pca_source(section, trajectory)
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
        # Over the global batch ("jit" engine) there is no axis to sum on.
        axis_name=(
            data_parallel.axes
            if data_parallel is not None and data_parallel.explicit
            else None
        ),
    )


def known_params(model: Any, sample_inputs: Any) -> Any:
    """The params' shapes, where known before `init`: an NNX module's, or a
    Linen module's traced on `sample_inputs`; else ``None``."""
    if isinstance(model, nnx.Module) or (
        model is not None and sample_inputs is not None
    ):
        return model_graph.param_shapes(model, sample_inputs)
    return None


def check_pca_source(section: config_sections.DimReduceSection, trajectory):
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
            f"{missing}: pass `options=boostax.StepOptions(pca_matrix=...)` "
            "(a (k, N) array) or `trajectory=` there (a boostax.Trajectory "
            "or an (S, N) array of snapshots) to auto_boost, or set "
            "`dim_reduce.pca_mat_path` to "
            "an existing .npy file or `dim_reduce.weight_load_dir` to a "
            "directory of params checkpoints (boostax.save_snapshot)."
        )


def check_unused_arguments(config: config_lib.BoostConfig, **given) -> None:
    """Refuses arguments that the configured algorithms would not read."""
    dim_reduce_on = config.is_enabled("dim_reduce")
    for name in ("pca_matrix", "trajectory"):
        if given[name] is not None and not dim_reduce_on:
            raise ValueError(
                f"`options.{name}` is DimReduce's, and `dim_reduce` is off at "
                f"level {config.level!r} in mode {config.mode!r}: switch it "
                "on ({'boost': {'mode': 'manual', 'dim_reduce': True}}) or "
                "drop the setting."
            )
    if dim_reduce_on and given["weight_decay"]:
        raise ValueError(
            "`weight_decay` cannot apply with `dim_reduce`: DimReduce "
            "replaces the optimizer and its line search minimises the loss "
            "alone (MindSpore drops the user's weight decay there). Add the "
            "L2 term to the loss instead, or switch dim_reduce off."
        )


def plan_less_bn(
    model: Any, config: config_lib.BoostConfig, sample_inputs: Any
) -> less_bn_lib.LessBNPlan:
    """LessBN's plan for `model` with the config's ``less_bn`` section."""
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
    section = config.less_bn
    return less_bn_lib.plan(
        model,
        sample_inputs,
        fn_flag=section.fn_flag,
        fn_scale=section.fn_scale,
        fn_log_scale=section.fn_log_scale,
        zero_init_residual=section.zero_init_residual,
    )


# What a level switches off on a model without BatchNorm, in mode "auto".
BATCH_NORM_ALGORITHMS = ("less_bn", "grad_freeze")


def level_on_model(
    config: config_lib.BoostConfig, report: less_bn_plan_lib.LessBNReport
) -> config_lib.BoostConfig:
    """The level's algorithms that can pay on the model `report` describes.

    MindSpore's O1 and O2 are made for convolutional networks with
    BatchNorm: LessBN removes BatchNorms and makes up for them (gradient
    centralization, the FN head), and gradient freezing was tuned there. On
    a model without BatchNorm there is nothing to make up for, and both
    cost loss: on the bundled transformer (docs/results.md, "A
    transformer") MindSpore's freezing ends 0.09 nats behind plain Optax
    at plain's budget and centralization 0.01. So in mode ``"auto"`` the
    level switches neither on there, and says so; mode ``"manual"`` (the
    user's own switches) is kept as given.

    Args:
      config: the resolved configuration.
      report: LessBN's report on the model.

    Returns:
      `config`, or `config` with `BATCH_NORM_ALGORITHMS` off (mode
      ``"manual"``), with a warning naming any of their settings now unused.
    """
    if config.mode != "auto" or report.found_batch_norm:
        return config
    off = [a for a in BATCH_NORM_ALGORITHMS if config.is_enabled(a)]
    if not off:
        return config
    adjusted = config_lib.with_switches(config, **dict.fromkeys(off, False))
    left = adjusted.enabled_algorithms
    ignored = [k for a in off for k in config_lib.ignored_settings(config, a)]
    user_warnings.warn(
        f"Level {config.level!r} on this model: {less_bn_lib.NO_BATCH_NORM}, "
        "so the level switches on neither LessBN nor gradient freezing: "
        "both are made for convolutional networks with BatchNorm, and cost "
        "loss where measured without one (the transformer of "
        "docs/results.md). "
        + (
            f"The step trains with {', '.join(left)} only. "
            if left
            else "The step trains as at level 'O0'. "
        )
        + (
            f"Unused with them: {', '.join(f'`{k}`' for k in ignored)}. "
            if ignored
            else ""
        )
        + "For a language model, config=boostax.text_recipe(total_steps) "
        "pays; for MindSpore's level as is, {'boost': {'mode': 'manual', "
        "'less_bn': True, 'grad_freeze': True}}.",
        UserWarning,
    )
    return adjusted


def apply_less_bn(
    model: Any,
    optimizer: optax.GradientTransformation,
    config: config_lib.BoostConfig,
    sample_inputs: Any,
    decay: weight_decay_lib.WeightDecay | None = None,
    plan: less_bn_lib.LessBNPlan | None = None,
):
    """LessBN with the config's FN head and gradient centralization.

    Returns:
      ``(reduced_model, optimizer, convert_variables, report)``: the model
      with BatchNorms removed (and the FN head if ``less_bn.fn_flag``), the
      optimizer preceded by gradient centralization (if ``less_bn.gc_flag``;
      over each kernel's fan-in axes from its layer, `fan_in.py`; grouped
      convolutions, the FN head, embeddings and a vocabulary-sized output
      layer excluded) and before that by
      `decay` (MindSpore's order), the function that converts the original
      model's variables, and the `LessBNReport`.
    """
    decay = weight_decay_lib.WeightDecay() if decay is None else decay
    if plan is None:
        plan = plan_less_bn(model, config, sample_inputs)
    validation.check_optimizer("optimizer", optimizer)
    reduced = less_bn_lib.apply_plan(model, plan)
    if config.less_bn.gc_flag:
        # Each kernel's fan-in axes from its layer (attention projections,
        # embeddings, a language model's head), read from `model` as given:
        # LessBN keeps the parameter paths.
        axes = functools.partial(
            fan_in_lib.leaf_axes,
            layers=fan_in_lib.model_layers(model, sample_inputs),
        )
        optimizer = centralization.with_gradient_centralization(
            optimizer,
            weight_decay=decay.rate,
            weight_decay_mask=decay.mask,
            mask=functools.partial(
                centralization.gradient_centralization_mask,
                excluded_modules=plan.excluded_from_gc,
                axes=axes,
            ),
            axes=axes,
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
    return freeze_groups_lib.split_parameters_groups(
        model, section.param_groups, sample_inputs=sample_inputs
    )


def with_freeze_out(optimizer, config: config_lib.BoostConfig, groups):
    """`optimizer` followed by FreezeOut's annealing with the progressive
    schedule (``grad_freeze.freeze_type`` 2), else unchanged."""
    section = config.grad_freeze
    if section.freeze_type != freeze_sequence_lib.PROGRESSIVE_STRATEGY:
        return optimizer
    steps = freeze_sequence_lib.progressive_freeze_steps(
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


def with_weight_averaging(optimizer, config: config_lib.BoostConfig):
    """`optimizer` followed by `average_params` with the config's
    ``weight_averaging`` section when it is enabled, else unchanged.

    Chained onto the optimizer that makes the final updates (after AdaSum,
    DimReduce and FreezeOut), and inside gradient accumulation, so that
    the average moves on real updates only.
    """
    section = config.weight_averaging
    if not section.enabled:
        return optimizer
    return optax.chain(
        optimizer,
        weight_averaging_lib.average_params(
            section.decay,
            start_step=section.start_step,
            debias=section.debias,
        ),
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


def _shard_optimizer_state(config: config_lib.BoostConfig, given) -> bool:
    """The argument, or the config's key where it is ``None``."""
    configured = config.data_parallel.shard_optimizer_state
    if given is None:
        return configured
    validation.check_bool("shard_optimizer_state", given)
    if configured and not given:
        raise ValueError(
            "`shard_optimizer_state=False` contradicts the config's "
            "`data_parallel.shard_optimizer_state` True: drop one of them."
        )
    return given


def _shard_params(config: config_lib.BoostConfig, given) -> bool | None:
    """The argument, or the config's key where it is ``None`` (``None``
    in both: decided when the step is built)."""
    configured = config.data_parallel.shard_params
    if given is None:
        return configured
    validation.check_optional_bool("shard_params", given)
    if configured is not None and configured != given:
        raise ValueError(
            f"`shard_params={given}` contradicts the config's "
            f"`data_parallel.shard_params` {configured}: drop one of them."
        )
    return given


def data_parallel_from_config(
    config: config_lib.BoostConfig,
    mesh: Mesh | None,
    *,
    shard_optimizer_state: bool | None = None,
    shard_params: bool | None = None,
) -> data_parallel_lib.DataParallel | None:
    """The data-parallel plan of `mesh` under the config's ``adasum`` switch.

    `shard_optimizer_state` goes to the `DataParallel` plan (it needs a
    `mesh`; with AdaSum, nodes of 2 or more devices); ``None`` takes the
    config's ``data_parallel.shard_optimizer_state``, which an explicit
    ``False`` may not contradict. So does `shard_params` (``True`` needs
    the optimizer state sharded); ``None`` takes the config's
    ``data_parallel.shard_params``, which an explicit value may not
    contradict (``None`` in both: decided when the step is built).

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
    shard_optimizer_state = _shard_optimizer_state(
        config, shard_optimizer_state
    )
    if shard_optimizer_state and mesh is None:
        raise ValueError(
            "`shard_optimizer_state=True` splits the optimizer state over "
            "the devices of a mesh: pass `mesh=` (a jax.sharding.Mesh)."
        )
    shard_params = _shard_params(config, shard_params)
    if shard_params and mesh is None:
        raise ValueError(
            "`shard_params=True` splits the params over the devices of a "
            "mesh: pass `mesh=` (a jax.sharding.Mesh) and "
            "`shard_optimizer_state=True`."
        )
    plan = functools.partial(
        data_parallel_lib.DataParallel,
        shard_optimizer_state=shard_optimizer_state,
        shard_params=shard_params,
        engine=config.data_parallel.engine,
        logical_axis_rules=config.data_parallel.logical_axis_rules,
    )
    adasum_on = config.is_enabled("adasum")
    if not adasum_on:
        return None if mesh is None else plan(mesh)
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
    dp = plan(mesh, reduction="adasum", local_axis=local_axis)
    if dp.num_nodes == 1:
        user_warnings.warn(
            f"AdaSum runs across nodes, and the {dp.num_devices} device(s) "
            "form a single node (`common.device_number` = "
            f"{config.common.device_number}): the gradients are averaged. "
            "Set `common.device_number` to the devices per node (1: AdaSum "
            "over every device)."
        )
        return plan(mesh)
    return dp
