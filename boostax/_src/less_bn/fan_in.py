# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The fan-in axes of each parameter, read from the layer that owns it.

Gradient centralization removes from each output unit's gradient its mean
over the unit's fan-in: the kernel axes the layer *contracts* with its
input. A kernel's rank does not say which axes those are, its layer does:

- ``Dense`` / ``Linear``, kernel ``(in, out)``: ``(0,)``;
- ``Conv`` (and ``ConvTranspose``), ``(kh, kw, in, out)``: ``(0, 1, 2)``;
- ``DenseGeneral`` / ``LinearGeneral``, ``(*batch, *in, *out)``: the
  ``in`` axes. Attention query, key and value ``(in, heads, head_dim)``:
  ``(0,)``; the attention output ``(heads, head_dim, out)``: ``(0, 1)``;
- ``Einsum``: the kernel axes its ``einsum_str`` sums over;
- ``ConvLocal``, ``(*positions, k * in, out)``: the ``k * in`` axis;
- ``Embed`` tables and a vocabulary-sized output layer: none.

The attention layers (``MultiHeadDotProductAttention``,
``MultiHeadAttention``) are read through their projections, which are
``DenseGeneral`` / ``LinearGeneral`` layers. ``DenseGeneral``'s batch axes
are separate weights, not fan-in. Grouped and depthwise convolutions get no
axes (MindSpore leaves them alone); biases get none.

Not centralized, by design:

- **Embedding tables.** A lookup has no fan-in: each row is one token's
  vector, and only the rows of the tokens in the batch get a gradient. The
  rank rule's mean over the vocabulary would move every token's row by the
  mean of the few seen; a mean over a row's features would remove each
  token vector's mean, which no fan-in motivates.
- **A vocabulary-sized output layer**: a dense layer producing a model
  output per position (rank 3 or more) over as many classes as an
  embedding table of the model has rows (a language model's head). It is
  the embedding's transpose, and often tied to it (``Embed.attend``, whose
  table is already left alone): untying the head must not change which
  gradients are centralized. A classifier's head (one output per example)
  is centralized, as MindSpore does.

A layer type not listed, a parameter other than a kernel, or a kernel whose
rank is not its layer's (stacked by ``nn.scan`` or ``nnx.vmap``, say) falls
back to the rank rule: every axis but the last.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

from boostax._src import model_graph, validation
from boostax._src.less_bn import centralization
from boostax._src.tree_utils import path_names

_DENSE = (nn.Dense, nnx.Linear)
_GENERAL = (nn.DenseGeneral, nnx.LinearGeneral)
_EINSUM = (nn.Einsum, nnx.Einsum)
_EMBED = (nn.Embed, nnx.Embed)
_CONV = (nn.Conv, nnx.Conv)
_CONV_TRANSPOSE = (nn.ConvTranspose, nnx.ConvTranspose)
# Layers whose kernel maps features to output features: a head candidate.
_PROJECTIONS = _DENSE + _GENERAL + _EINSUM


class LeafFanIn(NamedTuple):
    """The fan-in of one parameter, from its layer.

    Attributes:
      axes: the axes gradient centralization averages over, or ``None``
        where the layer has no fan-in to centralize.
      layer: the owning layer's type (``"rank rule"`` where none is known).
      reason: why these axes (or none).
    """

    axes: tuple[int, ...] | None
    layer: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ModelLayers:
    """The layers of a model that own its parameters.

    Attributes:
      modules: module path (a tuple of names, as `path_names` gives the
        parameters') -> the module (bound Linen module or NNX module).
      vocabulary_heads: paths of the vocabulary-sized output layers.
    """

    modules: Mapping[tuple[str, ...], Any]
    vocabulary_heads: frozenset[tuple[str, ...]]


def _path(path) -> tuple[str, ...]:
    return tuple(str(p) for p in path)


def model_layers(model: Any, sample_inputs: Any) -> ModelLayers:
    """Traces `model` once (shapes only) and records its layers.

    Args:
      model: a Linen or NNX module.
      sample_inputs: one batch of inputs (a tuple for several positional
        inputs); only shapes and dtypes are used.
    """
    validation.check_flax_module("model", model)
    jaxpr, calls, _ = model_graph.trace(model, sample_inputs)
    modules = {_path(call.path): call.module for call in calls}
    if isinstance(model, nnx.Module):
        # Modules that are never called (only a method, e.g. `attend`).
        for path, module in nnx.iter_modules(model):
            modules.setdefault(_path(path), module)
    vocabulary = {
        int(m.num_embeddings) for m in modules.values() if isinstance(m, _EMBED)
    }
    heads = set()
    for shape, owners in model_graph.output_calls(jaxpr, calls):
        layers = [c for c in owners if isinstance(c.module, _PROJECTIONS)]
        if len(shape) >= 3 and shape[-1] in vocabulary and layers:
            heads.add(_path(layers[-1].path))
    return ModelLayers(modules, frozenset(heads))


def _rank_rule(ndim: int, why: str) -> LeafFanIn:
    if ndim < 2:
        return LeafFanIn(None, "rank rule", "1-D")
    return LeafFanIn(
        tuple(range(ndim - 1)), "rank rule", f"{why}: every axis but the last"
    )


def _einsum_axes(einsum_str: str | None, ndim: int) -> tuple[int, ...] | None:
    """Kernel axes an explicit ``"lhs,rhs->out"`` sums over (rhs: kernel)."""
    if not einsum_str or "->" not in einsum_str or "." in einsum_str:
        return None
    inputs, out = einsum_str.replace(" ", "").split("->")
    if inputs.count(",") != 1:
        return None
    lhs, rhs = inputs.split(",")
    if len(rhs) != ndim:
        return None
    return tuple(i for i, c in enumerate(rhs) if c in lhs and c not in out)


def _kernel_axes(module: Any, ndim: int) -> tuple[int, ...] | None:
    """The fan-in axes of a known layer's kernel of rank `ndim`, or ``None``
    where the rank is not the layer's (then the rank rule applies)."""
    if isinstance(module, _DENSE):
        return (0,) if ndim == 2 else None
    if isinstance(module, nn.DenseGeneral):
        # `axis` and `features`: an int or a sequence of them.
        axis = (module.axis,) if isinstance(module.axis, int) else module.axis
        features = module.features
        n_out = 1 if isinstance(features, int) else len(features)
        start = len(module.batch_dims)
    elif isinstance(module, nnx.LinearGeneral):
        axis, n_out = module.in_features, len(module.out_features)
        start = len(module.batch_axis)
    elif isinstance(module, _EINSUM):
        return _einsum_axes(module.einsum_str, ndim)
    elif isinstance(module, nn.ConvLocal):
        return (ndim - 2,) if ndim >= 3 else None
    elif isinstance(module, _CONV + _CONV_TRANSPOSE):
        size = module.kernel_size
        if ndim != (1 if isinstance(size, int) else len(size)) + 2:
            return None
        output = ndim - 2 if getattr(module, "transpose_kernel", False) else -1
        return tuple(a for a in range(ndim) if a != output % ndim)
    else:
        return None
    if ndim != start + len(axis) + n_out:
        return None
    return tuple(range(start, start + len(axis)))


def leaf_fan_in(
    names: tuple[str, ...], ndim: int, layers: ModelLayers
) -> LeafFanIn:
    """The fan-in of the parameter at `names` (of rank `ndim`)."""
    owner, name = names[:-1], (names[-1] if names else "")
    module = layers.modules.get(owner)
    known = _PROJECTIONS + _CONV + _CONV_TRANSPOSE + (nn.ConvLocal,)
    if module is None or not isinstance(module, known + _EMBED):
        return _rank_rule(ndim, "no known layer")
    layer = type(module).__name__
    if isinstance(module, _EMBED):
        if name == "embedding":
            return LeafFanIn(None, layer, "embedding table: no fan-in")
        return _rank_rule(ndim, f"not a parameter of {layer}")
    if name == "bias":
        return LeafFanIn(None, layer, "bias")
    if name != "kernel":
        return _rank_rule(ndim, f"not a parameter of {layer}")
    if owner in layers.vocabulary_heads:
        return LeafFanIn(None, layer, "vocabulary-sized output layer")
    if getattr(module, "feature_group_count", 1) > 1:
        return LeafFanIn(None, layer, "grouped or depthwise convolution")
    axes = _kernel_axes(module, ndim)
    if axes is None:
        return _rank_rule(ndim, f"kernel of rank {ndim}, not {layer}'s")
    if not axes or len(axes) == ndim:
        return LeafFanIn(None, layer, "no contracted axis or no output axis")
    return LeafFanIn(axes, layer, "contracted axes")


def leaf_axes(params: Any, layers: ModelLayers) -> Any:
    """Each leaf's fan-in axes (a tuple, or ``None``), matched by path."""
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            leaf_fan_in(path_names(path), jnp.ndim(leaf), layers).axes
        ),
        params,
    )


def gradient_centralization_axes(
    model: Any, sample_inputs: Any, params: Any = None
) -> Any:
    """The fan-in axes of each parameter, from the layer that owns it.

    Pass the result as ``axes=`` to `centralize_gradients`,
    `with_gradient_centralization` or `gradient_centralization_mask`. The
    layers and their axes are listed in ``boostax/_src/less_bn/fan_in.py``:
    Dense
    ``(in, out)`` -> ``(0,)``; Conv ``(kh, kw, in, out)`` -> ``(0, 1, 2)``;
    attention query/key/value ``(in, heads, head_dim)`` -> ``(0,)``, output
    ``(heads, head_dim, out)`` -> ``(0, 1)``; DenseGeneral and Einsum their
    contracted axes; embedding tables and a language model's
    vocabulary-sized output layer ``None`` (not centralized). A layer type
    it does not know falls back to the rank rule (every axis but the last).

    Args:
      model: a Linen or NNX module.
      sample_inputs: one batch of its inputs (only shapes are used).
      params: the tree to match by path (default: the model's parameters;
        for Linen, the ``params`` collection).

    Returns:
      A pytree with the structure of `params`: a tuple of axes per leaf, or
      ``None``.

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> from flax import nnx
      >>> from boostax.examples import models
      >>> model = models.NNXTransformer(context=8, d_model=32, num_blocks=1,
      ...                               rngs=nnx.Rngs(0))
      >>> axes = boostax.gradient_centralization_axes(
      ...     model, jnp.zeros((1, 8), jnp.int32))
      >>> axes["blocks"][0]["attention"]["out"]["kernel"].get_value()
      (0, 1)
      >>> axes["tokens"]["embedding"].get_value() is None
      True
    """
    layers = model_layers(model, sample_inputs)
    if params is None:
        params = model_graph.param_shapes(model, sample_inputs)
    return leaf_axes(params, layers)


class CentralizedLeaf(NamedTuple):
    """One row of a `CentralizationReport`.

    Attributes:
      path: the parameter's path, ``/``-joined.
      shape: its shape.
      layer: its layer's type (`LeafFanIn.layer`).
      axes: the fan-in axes its layer gives (``None``: none).
      fan_in: the product of their sizes (0 without axes).
      centralized: whether gradient centralization changes it.
      reason: why, or why not.
    """

    path: str
    shape: tuple[int, ...]
    layer: str
    axes: tuple[int, ...] | None
    fan_in: int
    centralized: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class CentralizationReport:
    """Which parameters gradient centralization changes, over which axes.

    Attributes:
      leaves: one `CentralizedLeaf` per parameter of 2 or more dimensions
        (1-D parameters are never centralized), in the params' order.
      one_d: how many 1-D parameters there are.
    """

    leaves: tuple[CentralizedLeaf, ...]
    one_d: int

    def table(self) -> str:
        """A Markdown table, one row per kind of leaf.

        Leaves that differ only in a block's number (NNX list indices,
        Linen's ``_0``, ``_1`` suffixes; shown as ``*``) and agree in shape,
        axes and decision share a row, with their count.
        """
        rows: dict[tuple, int] = {}
        for leaf in self.leaves:
            pattern = "/".join(map(_numbered, leaf.path.split("/")))
            key = (pattern, *leaf[1:])
            rows[key] = rows.get(key, 0) + 1
        lines = [
            "| parameter | count | shape | layer | axes | fan-in | "
            "centralized |",
            "|---|---|---|---|---|---|---|",
        ]
        for (pattern, shape, layer, axes, fan_in, on, why), n in rows.items():
            axes_text = "-" if axes is None else str(axes)
            decision = "yes" if on else f"no: {why}"
            lines.append(
                f"| `{pattern}` | {n} | {shape} | {layer} | {axes_text} | "
                f"{fan_in or '-'} | {decision} |"
            )
        lines.append(f"\n{self.one_d} 1-D parameters (never centralized).")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _numbered(name: str) -> str:
    """``3`` -> ``*`` (NNX list indices), ``Conv_3`` -> ``Conv_*`` (Linen's
    auto-names)."""
    if name.isdigit():
        return "*"
    stem, _, number = name.rpartition("_")
    return f"{stem}_*" if stem and number.isdigit() else name


def gradient_centralization_report(
    model: Any,
    sample_inputs: Any,
    *,
    excluded_modules=(),
    fan_in_multiple: int = 16,
    excluded_names=centralization.EXCLUDED_NAMES,
) -> CentralizationReport:
    """Which parameters of `model` gradient centralization changes, and why.

    The axes come from `gradient_centralization_axes`; MindSpore's rules
    (`gradient_centralization_mask`) then apply to each leaf's fan-in (the
    product of its axes' sizes).

    Args:
      model: a Linen or NNX module.
      sample_inputs: one batch of its inputs (only shapes are used).
      excluded_modules, fan_in_multiple, excluded_names: as in
        `gradient_centralization_mask`.

    Returns:
      A `CentralizationReport`; ``print`` it for a Markdown table.
    """
    layers = model_layers(model, sample_inputs)
    params = model_graph.param_shapes(model, sample_inputs)
    rules = centralization.MaskRules.of(
        excluded_modules, fan_in_multiple, excluded_names
    )
    leaves, one_d = [], 0
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    for path, leaf in flat:
        names, shape = path_names(path), tuple(jnp.shape(leaf))
        if len(shape) < 2:
            one_d += 1
            continue
        fan_in = leaf_fan_in(names, len(shape), layers)
        why = fan_in.reason if fan_in.axes is None else None
        why = why or rules.skip_reason(names, shape, fan_in.axes)
        size = 0
        if fan_in.axes is not None:
            size = math.prod(shape[a] for a in fan_in.axes)
        leaves.append(
            CentralizedLeaf(
                "/".join(names),
                shape,
                fan_in.layer,
                fan_in.axes,
                size,
                why is None,
                why or fan_in.reason,
            )
        )
    return CentralizationReport(tuple(leaves), one_d)
