# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax: MindSpore's training-acceleration algorithms for JAX and Optax."""

from boostax._src.auto_boost import (
    AlgorithmNotImplementedError as AlgorithmNotImplementedError,
)
from boostax._src.auto_boost import auto_boost as auto_boost
from boostax._src.compat import AutoBoost as AutoBoost
from boostax._src.config import ALGORITHMS as ALGORITHMS
from boostax._src.config import LEVELS as LEVELS
from boostax._src.config import MODES as MODES
from boostax._src.config import BoostConfig as BoostConfig
from boostax._src.config import BoostSection as BoostSection
from boostax._src.config import CommonSection as CommonSection
from boostax._src.config import DimReduceSection as DimReduceSection
from boostax._src.config import (
    GradAccumulationSection as GradAccumulationSection,
)
from boostax._src.config import GradFreezeSection as GradFreezeSection
from boostax._src.config import LessBNSection as LessBNSection
from boostax._src.config import boost_config as boost_config
from boostax._src.objectives import FunctionObjective as FunctionObjective
from boostax._src.objectives import LinenObjective as LinenObjective
from boostax._src.objectives import NNXObjective as NNXObjective
from boostax._src.objectives import Objective as Objective
from boostax._src.objectives import make_objective as make_objective
from boostax._src.train_step import AlgorithmStates as AlgorithmStates
from boostax._src.train_step import TrainState as TrainState
from boostax._src.train_step import TrainStep as TrainStep
from boostax._src.train_step import make_train_step as make_train_step

__version__ = "0.1.0.dev0"

__all__ = (
    "ALGORITHMS",
    "AlgorithmNotImplementedError",
    "AlgorithmStates",
    "AutoBoost",
    "BoostConfig",
    "BoostSection",
    "CommonSection",
    "DimReduceSection",
    "FunctionObjective",
    "GradAccumulationSection",
    "GradFreezeSection",
    "LEVELS",
    "LessBNSection",
    "LinenObjective",
    "MODES",
    "NNXObjective",
    "Objective",
    "TrainState",
    "TrainStep",
    "auto_boost",
    "boost_config",
    "make_objective",
    "make_train_step",
)

del _src  # noqa: F821  (keep the private package out of the public namespace)
