# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Walking a jaxpr's equations, nested programs included.

``jax.make_jaxpr`` nests programs in an equation's parameters: ``jit``'s
and ``shard_map``'s body, ``cond``'s branches, ``scan``'s and
``while``'s bodies, custom derivatives' functions. JAX's own walkers of
them (``jax._src.core.subjaxprs``) are private; these two are all boostax
needs, and know nothing of any algorithm.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax.extend.core as jax_core


def sub_jaxprs(eqn) -> list[Any]:
    """The jaxprs nested in `eqn`'s parameters (a ``ClosedJaxpr``'s own
    ``jaxpr``), in the order of its parameters."""
    found = []
    for value in eqn.params.values():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, jax_core.ClosedJaxpr):
                found.append(v.jaxpr)
            elif isinstance(v, jax_core.Jaxpr):
                found.append(v)
    return found


def equations(jaxpr) -> Iterator[Any]:
    """Every equation of `jaxpr` and of the jaxprs nested in it, each
    followed by its nested ones' (depth first)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from equations(sub)
