# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing: groups, sequence, record, FreezeOut."""
