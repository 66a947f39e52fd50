# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Test configuration: 8 simulated CPU devices, strict rank promotion.

XLA reads its flags when the backend starts, so they are set here, before
any test module imports JAX. Freeze depths compile when first used, not all
at once in background threads: most tests run a few steps of a freezing
step, and two pytest workers share two cores (tests of background
compilation switch it on explicitly). The suite shares one persistent
compilation cache.
"""

import os
import tempfile

# The suite compiles hundreds of small steps and runs each only a few times:
# LLVM's optimizations cost more compile time than they save run time (a
# compile-bound test took half the time without them), and at that level
# XLA's CPU fusion emitters are most of what is left (without them the
# example ResNet's O1 depths compile 2.5-3x faster; the suite's compile
# time fell from 350 to 104 s). One LLVM module per program keeps O0 and the
# plain Optax step bit for bit equal under these flags, as they are under
# the default ones. Every comparison a test makes is between programs
# compiled under the same flags.
COMPILE_FAST_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_cpu_parallel_codegen_split_count=1",
)
os.environ["XLA_FLAGS"] = " ".join(
    [
        os.environ.get("XLA_FLAGS", ""),
        "--xla_force_host_platform_device_count=8",
        *COMPILE_FAST_FLAGS,
    ]
).strip()

os.environ.setdefault("BOOSTAX_BACKGROUND_COMPILE", "0")
# One persistent compilation cache for the whole suite: the pytest workers
# and the benchmark, demo and notebook runs compile many of the same steps.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(tempfile.gettempdir(), "boostax-tests-jax-cache"),
)

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
