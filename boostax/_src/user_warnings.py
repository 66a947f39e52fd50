# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Warnings attributed to the user's line, not to boostax's internals."""

from __future__ import annotations

import os
import sys
import types
import warnings

from boostax._src import validation

# Frames in this directory are boostax's own; the warning skips them.
_SRC = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the first caller outside ``boostax/_src``.

    A fixed ``stacklevel`` is right for one call path only: the same warning
    is reached from `auto_boost`, the public helpers and `boostax.mindspore`
    at different depths. (Python 3.12's ``skip_file_prefixes`` does this;
    boostax supports 3.11.)

    Args:
      message: the warning's text.
      category: the warning class.
    """
    validation.check_str("message", message)
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(
            f"`category` must be a Warning class, {validation.got(category)}."
        )
    frame: types.FrameType | None = sys._getframe(1)
    level = 2  # the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith(_SRC):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
