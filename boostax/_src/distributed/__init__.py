# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Data parallelism, AdaSum and sharding over a device mesh."""
