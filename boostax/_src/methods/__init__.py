# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Methods that buy accuracy per step or make early steps cheap."""
