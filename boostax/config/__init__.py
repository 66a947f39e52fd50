# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The typed sections of a boost configuration.

A config is a dict (or a JSON file) of sections; `boostax.BoostConfig`
validates it once and gives each section back as one of these frozen
views, so a script reads ``config.less_bn.gc_flag`` rather than a dict's
key. A training script rarely names them: it passes the dict.

Example:
  >>> import boostax
  >>> config = boostax.BoostConfig.from_dict(
  ...     {"label_smoothing": {"enabled": True, "alpha": 0.1}}, level="O0"
  ... )
  >>> section = config.label_smoothing
  >>> isinstance(section, boostax.config.LabelSmoothingSection), section.alpha
  (True, 0.1)
"""

from boostax._src.config.sections import BoostSection as BoostSection
from boostax._src.config.sections import CommonSection as CommonSection
from boostax._src.config.sections import (
    DataParallelSection as DataParallelSection,
)
from boostax._src.config.sections import DimReduceSection as DimReduceSection
from boostax._src.config.sections import (
    GradAccumulationSection as GradAccumulationSection,
)
from boostax._src.config.sections import GradFreezeSection as GradFreezeSection
from boostax._src.config.sections import (
    LabelSmoothingSection as LabelSmoothingSection,
)
from boostax._src.config.sections import LessBNSection as LessBNSection
from boostax._src.config.sections import (
    ProgressiveResizingSection as ProgressiveResizingSection,
)
from boostax._src.config.sections import (
    SeqLenWarmupSection as SeqLenWarmupSection,
)
from boostax._src.config.sections import (
    TestTimeFlipsSection as TestTimeFlipsSection,
)
from boostax._src.config.sections import (
    WeightAveragingSection as WeightAveragingSection,
)

__all__ = (
    "BoostSection",
    "CommonSection",
    "DataParallelSection",
    "DimReduceSection",
    "GradAccumulationSection",
    "GradFreezeSection",
    "LabelSmoothingSection",
    "LessBNSection",
    "ProgressiveResizingSection",
    "SeqLenWarmupSection",
    "TestTimeFlipsSection",
    "WeightAveragingSection",
)
