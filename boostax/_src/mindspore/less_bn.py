# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""``LessBN``: MindSpore's ``mindspore.boost.LessBN`` (fewer BatchNorms).

Mirrors ``mindspore/boost/less_batch_normalization.py``; the work is done by
`boostax.less_bn`.
"""

from __future__ import annotations

from typing import Any

from boostax._src import validation
from boostax._src.less_bn import api as less_bn_lib


def LessBN(  # noqa: N802
    network: Any, fn_flag: bool | None = False, *, sample_inputs: Any = None
):
    """MindSpore's ``LessBN(network, fn_flag=False)``: `boostax.less_bn`.

    MindSpore finds the BatchNorm structures when its graph compiles; a JAX
    model has no graph until it is traced, so LessBN needs one batch of
    `sample_inputs` (only shapes and dtypes are used).

    Args:
      network: a Flax Linen or NNX module.
      fn_flag: replace the last dense layer by an FN head (``None``, what
        ``AutoBoost`` passes by default: only where it can work, a
        classifier's class logits; see `boostax.less_bn`).
      sample_inputs: one batch of inputs.

    Returns:
      The reduced network (see `boostax.less_bn`).
    """
    validation.check_flax_module("network", network)
    validation.check_optional_bool("fn_flag", fn_flag)
    if sample_inputs is None:
        raise TypeError(
            "LessBN traces the network to find its BatchNorm structures: "
            "pass `sample_inputs=` (one batch of inputs)."
        )
    return less_bn_lib.less_bn(network, sample_inputs, fn_flag=fn_flag)
