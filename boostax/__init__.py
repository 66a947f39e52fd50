# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax: MindSpore's training-acceleration algorithms for JAX and Optax."""

# Measuring a step (its costs, bytes and timing) has a namespace of its own,
# `boostax.measure`: a training script needs none of it; so have the
# config's typed sections (`boostax.config`) and the parts a step is built
# from (`boostax.step`). MindSpore's object API (AutoBoost, the cells, ...)
# has one too, so that its names never clash with the functional API's.
from boostax import config as config
from boostax import measure as measure
from boostax import mindspore as mindspore
from boostax import step as step
from boostax._src.accumulation import (
    GradientAccumulationState as GradientAccumulationState,
)
from boostax._src.accumulation import (
    gradient_accumulation as gradient_accumulation,
)
from boostax._src.accumulation import has_updated as has_updated
from boostax._src.auto_boost import auto_boost as auto_boost
from boostax._src.config.boost_config import LEVELS as LEVELS
from boostax._src.config.boost_config import BoostConfig as BoostConfig
from boostax._src.config.boost_config import boost_config as boost_config
from boostax._src.config.components import (
    AlgorithmNotImplementedError as AlgorithmNotImplementedError,
)
from boostax._src.config.recipes import o1_recipe as o1_recipe
from boostax._src.config.recipes import recipe as recipe
from boostax._src.config.recipes import text_recipe as text_recipe
from boostax._src.config.sections import ALGORITHMS as ALGORITHMS
from boostax._src.config.sections import MODES as MODES
from boostax._src.dim_reduce.pca import (
    explained_variance_ratio as explained_variance_ratio,
)
from boostax._src.dim_reduce.pca import pca_components as pca_components
from boostax._src.dim_reduce.pca_file import (
    PCAMatrixTimeoutError as PCAMatrixTimeoutError,
)
from boostax._src.dim_reduce.pca_file import load_pca_matrix as load_pca_matrix
from boostax._src.dim_reduce.pca_file import save_pca_matrix as save_pca_matrix
from boostax._src.dim_reduce.quasi_newton import (
    DimReduceState as DimReduceState,
)
from boostax._src.dim_reduce.quasi_newton import dim_reduce as dim_reduce
from boostax._src.dim_reduce.snapshots import Trajectory as Trajectory
from boostax._src.dim_reduce.snapshots import flatten_params as flatten_params
from boostax._src.dim_reduce.snapshots import load_trajectory as load_trajectory
from boostax._src.dim_reduce.snapshots import save_snapshot as save_snapshot
from boostax._src.dim_reduce.trajectory import pca_matrix as pca_matrix
from boostax._src.distributed.adasum import AdaSumState as AdaSumState
from boostax._src.distributed.adasum import adasum as adasum
from boostax._src.distributed.adasum import adasum_gradients as adasum_gradients
from boostax._src.distributed.adasum import adasum_pair as adasum_pair
from boostax._src.distributed.adasum import adasum_reduce as adasum_reduce
from boostax._src.distributed.adasum import (
    hierarchical_adasum_reduce as hierarchical_adasum_reduce,
)
from boostax._src.distributed.data_parallel import DataParallel as DataParallel
from boostax._src.distributed.data_parallel import node_mesh as node_mesh
from boostax._src.flax_interop import (
    from_flax_train_state as from_flax_train_state,
)
from boostax._src.flax_interop import (
    to_flax_train_state as to_flax_train_state,
)
from boostax._src.freezing.freeze_out import FreezeOutState as FreezeOutState
from boostax._src.freezing.freeze_out import (
    scale_by_freeze_out as scale_by_freeze_out,
)
from boostax._src.freezing.groups import (
    split_parameters_groups as split_parameters_groups,
)
from boostax._src.freezing.plan import FreezeState as FreezeState
from boostax._src.freezing.plan import Freezing as Freezing
from boostax._src.freezing.sequence import (
    generate_freeze_index_sequence as generate_freeze_index_sequence,
)
from boostax._src.freezing.sequence import (
    progressive_freeze_steps as progressive_freeze_steps,
)
from boostax._src.less_bn.api import less_bn as less_bn
from boostax._src.less_bn.api import less_bn_report as less_bn_report
from boostax._src.less_bn.centralization import (
    centralize_gradients as centralize_gradients,
)
from boostax._src.less_bn.centralization import (
    gradient_centralization_mask as gradient_centralization_mask,
)
from boostax._src.less_bn.centralization import (
    with_gradient_centralization as with_gradient_centralization,
)
from boostax._src.less_bn.fan_in import (
    CentralizationReport as CentralizationReport,
)
from boostax._src.less_bn.fan_in import CentralizedLeaf as CentralizedLeaf
from boostax._src.less_bn.fan_in import (
    gradient_centralization_axes as gradient_centralization_axes,
)
from boostax._src.less_bn.fan_in import (
    gradient_centralization_report as gradient_centralization_report,
)
from boostax._src.less_bn.fn_head import FNHead as FNHead
from boostax._src.less_bn.fn_head import NNXFNHead as NNXFNHead
from boostax._src.less_bn.fn_head import (
    full_normalization as full_normalization,
)
from boostax._src.less_bn.linen import LinenLessBN as LinenLessBN
from boostax._src.less_bn.nnx import NNXIdentity as NNXIdentity
from boostax._src.less_bn.plan import LessBNReport as LessBNReport
from boostax._src.less_bn.plan import RemovedBatchNorm as RemovedBatchNorm
from boostax._src.loss_scale import DynamicLossScale as DynamicLossScale
from boostax._src.loss_scale import GroupLossScale as GroupLossScale
from boostax._src.loss_scale import LossScaleState as LossScaleState
from boostax._src.loss_scale import StaticLossScale as StaticLossScale
from boostax._src.loss_scale import all_finite as all_finite
from boostax._src.loss_scale import enhanced_amp as enhanced_amp
from boostax._src.methods.label_smoothing import (
    label_smoothing_loss as label_smoothing_loss,
)
from boostax._src.methods.label_smoothing import smooth_labels as smooth_labels
from boostax._src.methods.progressive_resizing import (
    ProgressiveResizing as ProgressiveResizing,
)
from boostax._src.methods.progressive_resizing import (
    progressive_resizing as progressive_resizing,
)
from boostax._src.methods.progressive_resizing import (
    resize_images as resize_images,
)
from boostax._src.methods.seq_len_warmup import SeqLenWarmup as SeqLenWarmup
from boostax._src.methods.seq_len_warmup import seq_len_warmup as seq_len_warmup
from boostax._src.methods.seq_len_warmup import (
    truncate_sequence as truncate_sequence,
)
from boostax._src.methods.test_time_flips import (
    predict_with_flips as predict_with_flips,
)
from boostax._src.methods.weight_averaging import (
    AverageParamsState as AverageParamsState,
)
from boostax._src.methods.weight_averaging import (
    average_params as average_params,
)
from boostax._src.methods.weight_averaging import (
    averaged_params as averaged_params,
)
from boostax._src.methods.weight_averaging import (
    half_life_decay as half_life_decay,
)
from boostax._src.precision import PrecisionPolicy as PrecisionPolicy
from boostax._src.precision import precision_policy as precision_policy
from boostax._src.step.factory import make_train_step as make_train_step
from boostax._src.step.objectives import FunctionObjective as FunctionObjective
from boostax._src.step.objectives import LinenObjective as LinenObjective
from boostax._src.step.objectives import NNXObjective as NNXObjective
from boostax._src.step.objectives import Objective as Objective
from boostax._src.step.objectives import make_objective as make_objective
from boostax._src.step.options import StepOptions as StepOptions
from boostax._src.step.train_step import AlgorithmStates as AlgorithmStates
from boostax._src.step.train_step import TrainState as TrainState
from boostax._src.step.train_step import TrainStep as TrainStep
from boostax._src.step.weighted_loss import WeightedLoss as WeightedLoss

__version__ = "0.1.0.dev0"

__all__ = (
    "ALGORITHMS",
    "AdaSumState",
    "AlgorithmNotImplementedError",
    "AlgorithmStates",
    "AverageParamsState",
    "BoostConfig",
    "CentralizationReport",
    "CentralizedLeaf",
    "DataParallel",
    "DimReduceState",
    "DynamicLossScale",
    "FNHead",
    "FreezeOutState",
    "FreezeState",
    "Freezing",
    "FunctionObjective",
    "GradientAccumulationState",
    "GroupLossScale",
    "LEVELS",
    "LessBNReport",
    "LinenLessBN",
    "LinenObjective",
    "LossScaleState",
    "MODES",
    "NNXFNHead",
    "NNXIdentity",
    "NNXObjective",
    "Objective",
    "PCAMatrixTimeoutError",
    "PrecisionPolicy",
    "ProgressiveResizing",
    "RemovedBatchNorm",
    "SeqLenWarmup",
    "StaticLossScale",
    "StepOptions",
    "TrainState",
    "TrainStep",
    "Trajectory",
    "WeightedLoss",
    "adasum",
    "adasum_gradients",
    "adasum_pair",
    "adasum_reduce",
    "all_finite",
    "auto_boost",
    "average_params",
    "averaged_params",
    "boost_config",
    "centralize_gradients",
    "dim_reduce",
    "enhanced_amp",
    "explained_variance_ratio",
    "flatten_params",
    "from_flax_train_state",
    "full_normalization",
    "generate_freeze_index_sequence",
    "gradient_accumulation",
    "gradient_centralization_axes",
    "gradient_centralization_mask",
    "gradient_centralization_report",
    "half_life_decay",
    "has_updated",
    "hierarchical_adasum_reduce",
    "label_smoothing_loss",
    "less_bn",
    "less_bn_report",
    "load_pca_matrix",
    "load_trajectory",
    "make_objective",
    "make_train_step",
    "node_mesh",
    "o1_recipe",
    "pca_components",
    "pca_matrix",
    "precision_policy",
    "predict_with_flips",
    "progressive_freeze_steps",
    "progressive_resizing",
    "recipe",
    "resize_images",
    "save_pca_matrix",
    "save_snapshot",
    "scale_by_freeze_out",
    "seq_len_warmup",
    "smooth_labels",
    "split_parameters_groups",
    "text_recipe",
    "to_flax_train_state",
    "truncate_sequence",
    "with_gradient_centralization",
)

# Keeps the private package out of the public namespace: importing its
# modules above bound `_src` here, unseen by ruff and mypy.
del _src  # type: ignore[name-defined]  # noqa: F821

# Names that moved to a namespace of their own: still read here for one
# release, with a warning naming the new home.
_MOVED = {
    **{name: "measure" for name in measure.__all__},
    # (the test-time flips' section came after the move: never top level)
    **{n: "config" for n in config.__all__ if n != "TestTimeFlipsSection"},
    **{name: "step" for name in step.__all__},
}


# Names that were renamed: the old one still read for one release.
_RENAMED = {"image_recipe": "recipe"}


def __getattr__(name: str):
    if name in _RENAMED:
        value = globals()[_RENAMED[name]]
        where = f"is now `boostax.{_RENAMED[name]}`"
    elif name in _MOVED:
        value = getattr(globals()[_MOVED[name]], name)
        where = f"moved to `boostax.{_MOVED[name]}.{name}`"
    else:
        raise AttributeError(f"module 'boostax' has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"`boostax.{name}` {where}; the old spelling will be removed in "
        "the next release.",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
