# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Private implementation of boostax. Import from `boostax` instead."""
