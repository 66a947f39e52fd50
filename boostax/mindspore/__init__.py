# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``mindspore.boost`` object API, name for name, over boostax.

A MindSpore script ports with ``from boostax import mindspore as boost``
where it had ``from mindspore import boost``: ``boost.AutoBoost(...)``,
``boost.BoostTrainOneStepCell(...)``. Each class keeps MindSpore's name,
parameters and defaults, and is built from boostax's functional API
(`boostax.auto_boost`, `boostax.BoostConfig`, the Optax transforms).
"""

from boostax._src.mindspore.accumulation import (
    GradientAccumulation as GradientAccumulation,
)
from boostax._src.mindspore.adasum import AdaSum as AdaSum
from boostax._src.mindspore.auto_boost import AutoBoost as AutoBoost
from boostax._src.mindspore.dim_reduce import DimReduce as DimReduce
from boostax._src.mindspore.freeze import FreezeCells as FreezeCells
from boostax._src.mindspore.freeze import FreezeOpt as FreezeOpt
from boostax._src.mindspore.freeze import GradientFreeze as GradientFreeze
from boostax._src.mindspore.freeze import freeze_cell as freeze_cell
from boostax._src.mindspore.less_bn import LessBN as LessBN
from boostax._src.mindspore.loss_scale import (
    GroupLossScaleManager as GroupLossScaleManager,
)
from boostax._src.mindspore.processes import (
    OptimizerProcess as OptimizerProcess,
)
from boostax._src.mindspore.processes import (
    ParameterProcess as ParameterProcess,
)
from boostax._src.mindspore.train_one_step import (
    BoostTrainOneStepCell as BoostTrainOneStepCell,
)
from boostax._src.mindspore.train_one_step import (
    BoostTrainOneStepWithLossScaleCell as BoostTrainOneStepWithLossScaleCell,
)

__all__ = (
    "AdaSum",
    "AutoBoost",
    "BoostTrainOneStepCell",
    "BoostTrainOneStepWithLossScaleCell",
    "DimReduce",
    "FreezeCells",
    "FreezeOpt",
    "GradientAccumulation",
    "GradientFreeze",
    "GroupLossScaleManager",
    "LessBN",
    "OptimizerProcess",
    "ParameterProcess",
    "freeze_cell",
)
