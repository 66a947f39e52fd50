# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Watching a training loop for runs of skipped steps, without stalling it.

A step with loss scaling (or `skip_nonfinite`) skips an update whose
gradients are not finite; its ``metrics["overflow"]`` says so, on the
device. A run of them (a NaN in the data, a dynamic loss scale stuck at its
minimum) means training has stopped. `SkipWatch` keeps the flags as the
step returns them and reads them in windows of up to `SKIP_CHECK_WINDOW`
steps, never the step just dispatched, so the host never waits for the
device: a run is noticed at most that many steps late.
"""

from __future__ import annotations

import jax

from boostax._src import user_warnings

# The most steps whose skip flags the host holds before reading them: a
# run of skipped steps is noticed at most this many steps late.
SKIP_CHECK_WINDOW = 100


class SkipWatch:
    """Warns (or raises) after `limit` skipped steps in a row.

    Args:
      limit: skipped steps in a row that trigger the warning (or error);
        ``None``: never.
      raise_on_skips: raise ``FloatingPointError`` instead of warning.

    Attributes:
      flags: the skip flags (device scalars) not read yet; `record` appends
        to it, `check` reads it (a caller may test it is empty first, to
        spend nothing per call).
    """

    def __init__(self, limit: int | None, raise_on_skips: bool):
        self.limit = limit
        self.raise_on_skips = raise_on_skips
        self.flags: list[jax.Array] = []
        self._run = 0

    def record(self, metrics) -> None:
        """Keeps a step's skip flag for `check` (not read now)."""
        if self.limit is not None and "overflow" in metrics:
            self.flags.append(metrics["overflow"])

    def check(self) -> None:
        """Reads the flags once a window is full; warns or raises at the
        `limit`-th skipped step in a row.

        Run it before the next step is dispatched, so an error leaves the
        caller's state valid (even with a donated state).
        """
        limit = self.limit
        if limit is None or len(self.flags) <= min(limit, SKIP_CHECK_WINDOW):
            return
        # Every flag but the newest: the device has finished (or is
        # finishing) those steps, so reading them does not stall it.
        flags = jax.device_get(self.flags[:-1])
        del self.flags[:-1]
        for skipped in flags:
            self._run = self._run + 1 if bool(skipped) else 0
            if self._run != limit:
                continue
            message = (
                f"{limit} train steps in a row were skipped: their gradients "
                "were not finite (NaN or inf), so the params and optimizer "
                "state have not changed since. Look for NaN or inf in the "
                "data and the loss; a dynamic loss scale at its minimum that "
                "still overflows means the unscaled loss does. (Set "
                "`max_consecutive_skips` to change this limit, "
                "`raise_on_skips=True` to stop training instead.)"
            )
            if self.raise_on_skips:
                raise FloatingPointError(message)
            user_warnings.warn(message, RuntimeWarning)
