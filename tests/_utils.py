# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Shared test helpers: tree comparisons and the example problems."""

import functools

import jax
import numpy as np


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
