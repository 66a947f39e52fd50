# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``mindspore.boost.GroupLossScaleManager``.

Mirrors ``mindspore/boost/group_loss_scale_manager.py``; the train step runs
the functional `boostax.GroupLossScale` it hands out.
"""

from __future__ import annotations

import numpy as np

from boostax._src import loss_scale as loss_scale_lib
from boostax._src import validation


class GroupLossScaleManager:
    """MindSpore's ``GroupLossScaleManager``: per-group loss scales.

    Holds the group scales ``S = [1, s_1, ..., s_n, 1]`` on the host; the
    train step (``auto_boost(..., loss_scale=manager)`` or
    `BoostTrainOneStepWithLossScaleCell`) starts from them and updates its
    own copy in the train state. Put ``manager.enhanced_amp(x, l1, l2)``
    (`boostax.enhanced_amp`) at the group boundaries of the model.

    Args:
      init_loss_scale: initial scale of every group, or one per group.
      loss_scale_groups: the groups: sequences of parameter paths, or a label
        tree of group indices (see `boostax.GroupLossScale`).
    """

    enhanced_amp = staticmethod(loss_scale_lib.enhanced_amp)

    def __init__(self, init_loss_scale, loss_scale_groups):
        count = loss_scale_lib.check_groups(
            "loss_scale_groups", loss_scale_groups
        )
        loss_scale_lib.check_init_loss_scale(init_loss_scale, count)
        self.init_loss_scale = init_loss_scale
        self.loss_scale_groups = loss_scale_groups
        rule = loss_scale_lib.GroupLossScale(init_loss_scale, loss_scale_groups)
        self.set_loss_scale_status(rule.num_groups, init_loss_scale)

    def get_loss_scale(self):
        """The initial loss scale."""
        return self.init_loss_scale

    def get_update_cell(self) -> GroupLossScaleManager:
        return self

    def set_loss_scale_status(self, loss_scale_number: int, init_loss_scale):
        """Sets ``S = [1, s_1..s_n, 1]`` for `loss_scale_number` groups."""
        loss_scale_number = validation.check_int(
            "loss_scale_number", loss_scale_number, minimum=1
        )
        loss_scale_lib.check_init_loss_scale(init_loss_scale, loss_scale_number)
        scales = np.broadcast_to(
            np.asarray(init_loss_scale, np.float32), (loss_scale_number,)
        )
        self.scales = np.concatenate([[1.0], scales, [1.0]]).astype(np.float32)

    def update_loss_scale_status(self, layer: int, update_ratio: float):
        """``S[layer + 1] *= update_ratio``; returns the new scale."""
        expected = f"`layer` must be in [0, {len(self.scales) - 3}]"
        if not validation.is_int(layer):
            raise TypeError(f"{expected} (an int), {validation.got(layer)}.")
        if not 0 <= layer < len(self.scales) - 2:
            raise ValueError(f"{expected}, got {layer}.")
        update_ratio = validation.check_number(
            "update_ratio", update_ratio, minimum=0, open_minimum=True
        )
        self.scales[layer + 1] *= update_ratio
        return float(self.scales[layer + 1])

    def loss_scale_rule(self) -> loss_scale_lib.GroupLossScale:
        """The functional `boostax.GroupLossScale`, from the current scales."""
        return loss_scale_lib.GroupLossScale(
            [float(s) for s in self.scales[1:-1]], self.loss_scale_groups
        )
