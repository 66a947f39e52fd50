# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""What a train step costs: FLOPs, bytes, kernels, time."""
