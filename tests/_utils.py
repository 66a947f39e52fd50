# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Shared test helpers: tree comparisons and the example problems."""

import functools
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

import boostax


def assert_trees_equal(actual, expected):
    """Bit-for-bit equality of two pytrees with the same structure."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected), (
        jax.tree.structure(actual),
        jax.tree.structure(expected),
    )
    for a, e in zip(
        jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def orbax_round_trip(state, target):
    """`state` saved with Orbax and restored into the shapes, dtypes and
    shardings of `target` (docs/checkpointing.md's recipe)."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        ocp.CheckpointManager(tmp) as m,
    ):
        m.save(1, args=ocp.args.StandardSave(state))
        m.wait_until_finished()
        shapes = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        return m.restore(1, args=ocp.args.StandardRestore(shapes))


def assert_trees_all_close(actual, expected, *, rtol, atol):
    for a, e in zip(
        jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True
    ):
        np.testing.assert_allclose(
            np.asarray(a), np.asarray(e), rtol=rtol, atol=atol
        )


@functools.cache
def digits(flat=False):
    from boostax.examples import data

    return data.load_digits(flat=flat)


def fp16_underflow_problem():
    """Params and a batch whose float16 gradients need per-group scales.

    Features ~1e-3 into a layer whose activations are ~1e4: the late
    kernel's gradient is ~2e4, so one global scale cannot exceed ~2 without
    overflowing it, and the early kernel's gradient (~1e-10 in float32) then
    rounds to zero in float16 (`fp16_underflow_groups` fixes it).
    """
    rng = np.random.default_rng(0)
    params = {
        "early": {
            "kernel": jnp.asarray(rng.normal(size=(4, 8)), jnp.float32),
            "bias": jnp.full((1, 8), 1e4, jnp.float32),
        },
        "late": {
            "kernel": jnp.asarray(1e-6 * rng.normal(size=(8, 1)), jnp.float32),
            "bias": jnp.zeros((1, 1), jnp.float32),
        },
    }
    x = 1e-3 * rng.uniform(0.5, 1.5, size=(8, 4))
    return params, (jnp.asarray(x, jnp.float32), jnp.ones((8, 1), jnp.float32))


def fp16_underflow_groups():
    """Per-group scales of `fp16_underflow_problem`: 2**20 early, 1 late."""
    return boostax.GroupLossScale(
        [2.0**20, 1.0],
        {"early": {"kernel": 0, "bias": 0}, "late": {"kernel": 1, "bias": 1}},
    )


def with_step_options(kwargs, **options):
    """A step builder's `kwargs` with `boostax.StepOptions`' fields among
    them (and `options`) gathered into its ``options=``: for the tests'
    helpers that pass a test's settings on to `auto_boost` or
    `make_train_step`."""
    fields = boostax.StepOptions.__dataclass_fields__
    kwargs = dict(kwargs)
    options.update({k: kwargs.pop(k) for k in list(kwargs) if k in fields})
    return {**kwargs, "options": boostax.StepOptions(**options)}
