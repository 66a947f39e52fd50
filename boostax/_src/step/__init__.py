# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The train step: its builder, state, programs and checks."""
