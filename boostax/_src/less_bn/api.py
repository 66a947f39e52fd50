# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN: fewer BatchNorms and a full-normalization (FN) classifier head.

MindSpore's LessBN removes the BatchNorms of a network that its graph pass
recognizes in 16 block patterns, turning each into the identity (no affine
either), and optionally replaces the last dense layer by an FN head. boostax
runs the same pass on the model's own data flow (`less_bn_patterns` on the
graph of `model_graph`), not on layer names:

=========================== ================================================
block                       BatchNorms removed (MindSpore's pattern numbers)
=========================== ================================================
ResNet bottleneck           the first two BNs of the residual branch and the
                            projection shortcut's BN (1-3)
ResNet basic block          the first BN of the residual branch and the
                            projection shortcut's BN (4-6)
MobileNetV2 inverted        the expansion conv's BN, when the block reads a
residual                    BN output (7, 11) or a residual add (8, 9)
MobileNetV2 head            the BN of the last conv-BN-ReLU6 before global
                            average pooling, without an FN head (10)
DenseNet layer              the BN applied to a concatenation (12, 13), a
                            max-pool transition's BN (13), the second BN of
                            a layer reading a max pool (16)
=========================== ================================================

The BN that feeds a residual add stays, and so does a DenseNet transition
with average pooling. Removed BNs disappear from the variables, so they have
no parameters, statistics or optimizer state. Training and evaluation use
the same reduced model.

This module holds the entry points. The decisions (`LessBNPlan`, its
`LessBNReport`) are made in ``less_bn/plan.py``; ``less_bn/linen.py`` and
``less_bn/nnx.py`` apply them to a Linen or an NNX model; the FN head is in
``fn_head.py``.

References:
  MindSpore ``mindspore.boost.LessBN`` and the graph pass
  ``frontend/optimizer/irpass/less_batch_normalization.cc``.
"""

from __future__ import annotations

import warnings

from flax import linen as nn
from flax import nnx

from boostax._src import validation
from boostax._src.less_bn.fn_head import NNXFNHead, check_fn_scale
from boostax._src.less_bn.linen import LinenLessBN, linen_plan
from boostax._src.less_bn.nnx import NNXIdentity, apply_nnx_plan, nnx_plan
from boostax._src.less_bn.plan import NO_BATCH_NORM, LessBNPlan


def plan(
    model,
    sample_inputs,
    *,
    fn_flag: bool | None = False,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
    zero_init_residual: bool = False,
) -> LessBNPlan:
    """The LessBN decisions for a Linen or NNX `model` (shapes only).

    `fn_flag` ``None`` is the levels' default: an FN head only where it can
    work (`less_bn_plan.fn_head_placement`); ``True`` where it cannot is
    refused (`ValueError`).
    """
    validation.check_optional_bool("fn_flag", fn_flag)
    fn_scale, fn_log_scale = check_fn_scale(fn_scale, fn_log_scale)
    validation.check_bool("zero_init_residual", zero_init_residual)
    if fn_flag is False and (fn_scale != 1.0 or fn_log_scale):
        raise ValueError(
            "`fn_scale` and `fn_log_scale` set the FN head, which only "
            "`fn_flag=True` builds: got fn_flag=False with "
            f"fn_scale={fn_scale!r}, fn_log_scale={fn_log_scale!r}."
        )
    options = dict(
        fn_flag=fn_flag,
        fn_scale=fn_scale,
        fn_log_scale=fn_log_scale,
        zero_init_residual=zero_init_residual,
    )
    if isinstance(model, LinenLessBN):
        model = model.network
    if isinstance(model, nn.Module):
        return linen_plan(model, sample_inputs, **options)
    if isinstance(model, nnx.Module):
        return nnx_plan(model, sample_inputs, **options)
    raise TypeError(
        "`model` must be a Flax Linen or NNX module, got "
        f"{type(model).__name__}."
    )


def less_bn_report(model, sample_inputs, *, fn_flag: bool | None = False):
    """Says which BatchNorms `less_bn` removes from `model`, and why.

    Args:
      model: a Flax Linen or NNX module.
      sample_inputs: one batch of inputs (or a tuple of positional inputs);
        only shapes and dtypes are used.
      fn_flag: whether the last dense layer becomes an FN head (see
        `less_bn`; ``None``, O1's default: where it can work, and the
        report says why not elsewhere).

    Returns:
      A `LessBNReport`; ``print(report)`` lists each BatchNorm and what
      became of the FN head.
    """
    return plan(model, sample_inputs, fn_flag=fn_flag).report


def apply_plan(model, less_bn_plan: LessBNPlan, trained: bool | None = None):
    """Builds the reduced model from a plan (see `less_bn`; `trained` is an
    NNX module's, whose weights come along)."""
    if not less_bn_plan.removed and less_bn_plan.fn_head is None:
        if less_bn_plan.report.found_batch_norm:
            found = (
                "LessBN found no BatchNorm structure it knows (ResNet, "
                "MobileNetV2, DenseNet blocks) in the model"
            )
        else:
            found = NO_BATCH_NORM
        head = less_bn_plan.report.fn_head_line
        warnings.warn(
            f"{found}; it is returned unchanged."
            + ("" if head is None else f" {head}"),
            UserWarning,
            stacklevel=3,
        )
        return model
    if isinstance(model, nn.Module):
        return LinenLessBN(
            model,
            less_bn_plan.removed,
            less_bn_plan.fn_head,
            fn_scale=less_bn_plan.fn_scale,
            fn_log_scale=less_bn_plan.fn_log_scale,
            zero_init=less_bn_plan.zero_init,
            folds=less_bn_plan.folds,
            initial=less_bn_plan.initial,
        )
    return apply_nnx_plan(model, less_bn_plan, trained=trained)


def is_reduced(model) -> bool:
    """Whether LessBN already reduced `model`."""
    if isinstance(model, LinenLessBN):
        return True
    if isinstance(model, nnx.Module):
        return any(
            isinstance(m, (NNXIdentity, NNXFNHead))
            for _, m in nnx.iter_modules(model)
        )
    return False


def variables_converter(reduced_model, less_bn_plan: LessBNPlan):
    """A function turning the original model's variables into the reduced's.

    Linen: ``reduced_model.convert_variables``. NNX: LessBN applied to the
    given module (its weights carried over); a module that already has the
    reduced structure is returned as is. Both take ``trained`` (``True``,
    ``False``, or ``None`` to read it from the weights).
    """
    if isinstance(reduced_model, LinenLessBN):
        return reduced_model.convert_variables
    if isinstance(reduced_model, nnx.Module):
        graphdef = nnx.graphdef(reduced_model)

        def convert(module, *, trained=None):
            if nnx.graphdef(module) == graphdef:
                return module
            return apply_nnx_plan(module, less_bn_plan, trained=trained)

        return convert
    return None


def less_bn(
    model,
    sample_inputs,
    *,
    fn_flag: bool | None = False,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
    zero_init_residual: bool = False,
    trained: bool | None = None,
):
    """Removes BatchNorms by MindSpore's LessBN rules.

    MindSpore's 16 patterns are matched on the model's data flow on
    `sample_inputs` (see the module docstring). A model with none of them is
    returned unchanged, with a warning.

    Args:
      model: a Flax Linen or NNX module.
      sample_inputs: one batch of inputs (or a tuple of positional inputs);
        only shapes and dtypes are used.
      fn_flag: replace the last dense layer by an FN head (kernel copied,
        bias dropped, scale `fn_scale`). It only works on a classifier's
        class logits: the model's output, one vector per example
        ``(batch, classes)``. ``True`` on any other model (a language
        model's per-position logits ``(batch, seq, vocab)``, a head that is
        no dense layer) raises `ValueError`; ``None`` (O1's and O2's
        default) places it where it works and otherwise skips it, saying
        why in `less_bn_report`.
      fn_scale: the FN head's initial scale (MindSpore: 1; see `FNHead`).
      fn_log_scale: train the FN head's ``log(s)`` instead of ``s``.
      zero_init_residual: start the BatchNorm that ends each thinned residual
        branch at scale zero, so each block starts as the identity (for
        training from scratch).
      trained: NNX: whether the module's weights were trained (their
        function is then kept: BatchNorms folded, no FN head), ``None`` to
        read it from the weights (see ``LinenLessBN.convert_variables``).
        Linen modules hold no weights: give it to ``convert_variables``.

    Returns:
      Linen: a `LinenLessBN` wrapping `model` (same variable paths minus the
      removed BNs; ``.convert_variables`` converts the original's
      variables). NNX: a new module in which removed BatchNorms are
      identities and the FN head replaces the last ``nnx.Linear``, carrying
      `model`'s current weights (`model` is not modified).

    Example:
      >>> import jax, jax.numpy as jnp, boostax
      >>> from boostax.examples import models
      >>> x = jnp.zeros((1, 8, 8, 1))
      >>> model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
      >>> reduced = boostax.less_bn(model, x, fn_flag=True)
      >>> report = boostax.less_bn_report(model, x, fn_flag=True)
      >>> [r.path for r in report.removed]
      ['BasicBlock_0/BatchNorm_0', 'BasicBlock_1/BatchNorm_0', \
'BasicBlock_1/BatchNorm_2']
      >>> variables = reduced.init(jax.random.PRNGKey(0), x, train=False)
      >>> sorted(variables["params"]["Dense_0"])
      ['kernel', 'multiplier']
    """
    if trained is not None and isinstance(model, nn.Module):
        raise ValueError(
            "`trained` is for an NNX module, which holds its weights; a Linen "
            "module's come with its variables: pass it to "
            "`reduced.convert_variables(variables, trained=...)` (or "
            "`TrainStep.init`)."
        )
    return apply_plan(
        model,
        plan(
            model,
            sample_inputs,
            fn_flag=fn_flag,
            fn_scale=fn_scale,
            fn_log_scale=fn_log_scale,
            zero_init_residual=zero_init_residual,
        ),
        trained=trained,
    )
