# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Test configuration: 8 simulated CPU devices, strict rank promotion.

XLA reads its flags when the backend starts, so they are set here, before
any test module imports JAX.
"""

import os

os.environ["XLA_FLAGS"] = " ".join(
    [
        os.environ.get("XLA_FLAGS", ""),
        "--xla_force_host_platform_device_count=8",
    ]
).strip()

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
