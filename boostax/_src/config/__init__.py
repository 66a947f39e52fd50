# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`BoostConfig`: its sections, keys, presets, components."""
