# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""DimReduce: snapshots, their PCA, quasi-Newton steps."""
