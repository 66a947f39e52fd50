# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN: fewer BatchNorms, the FN head, gradient centralization."""
