# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN's decisions for one model: the plan, and the report users read.

`plan_less_bn` runs MindSpore's patterns (``less_bn/patterns.py``) on a
model's graph (``model_graph.py``) and decides which BatchNorms go, which
dense layer becomes the FN head, which layers gradient centralization must
leave alone and which kept BatchNorms start at scale zero. The result, a
`LessBNPlan`, is framework-free (module paths only); the Linen and NNX
modules apply it. Its `LessBNReport` says what was removed and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
from flax import linen as nn
from flax import nnx

from boostax._src import model_graph, validation
from boostax._src.less_bn import patterns as less_bn_patterns

# What the report and the warning say of a model without any BatchNorm (a
# transformer: LayerNorm is not what LessBN removes).
NO_BATCH_NORM = (
    "LessBN found no BatchNorm in the model (it removes BatchNorms only; "
    "LayerNorm, GroupNorm and RMSNorm stay)"
)


@dataclasses.dataclass(frozen=True)
class RemovedBatchNorm:
    """One BatchNorm LessBN removes.

    Attributes:
      path: the BN module's path, ``/``-joined.
      block: the structure recognized (e.g. ``"ResNet basic block,
        identity shortcut"``).
      reason: which BN of that structure this is.
      pattern: the number (1-16) of MindSpore's LessBN pattern that removed
        it.
    """

    path: str
    block: str
    reason: str
    pattern: int

    def __post_init__(self):
        for name in ("path", "block", "reason"):
            validation.check_str(name, getattr(self, name), allow_empty=True)
        validation.check_int_in("pattern", self.pattern, 1, 16)


@dataclasses.dataclass(frozen=True)
class LessBNReport:
    """What LessBN does to a model.

    Attributes:
      removed: the BatchNorms removed, in call order.
      kept: paths of the BatchNorms that stay.
      fn_head: path of the dense layer replaced by the FN head, or ``None``.
      removed_parameters: trainable parameters removed (BN scales and
        biases, and the dense bias when an FN head replaces it, minus the
        FN multiplier).
      fn_head_skipped: why the FN head was not placed, when the level's
        default (``fn_flag=None``) asked for one where it cannot work
        (see `fn_head_placement`); ``None`` otherwise.
    """

    removed: tuple[RemovedBatchNorm, ...]
    kept: tuple[str, ...]
    fn_head: str | None
    removed_parameters: int
    fn_head_skipped: str | None = None

    def __post_init__(self):
        for r in validation.check_sequence(
            "removed", self.removed, "a tuple of RemovedBatchNorm"
        ):
            validation.check_instance(
                "removed", r, RemovedBatchNorm, "a tuple of RemovedBatchNorm"
            )
        for path in validation.check_sequence(
            "kept", self.kept, "a tuple of paths (strs)"
        ):
            validation.check_str("kept", path, allow_empty=True)
        if self.fn_head is not None:
            validation.check_str("fn_head", self.fn_head, allow_empty=True)
        if self.fn_head_skipped is not None:
            validation.check_str("fn_head_skipped", self.fn_head_skipped)
        # Negative when an FN head replaces a bias-free layer (+1 multiplier).
        validation.check_int("removed_parameters", self.removed_parameters)

    @property
    def found_batch_norm(self) -> bool:
        """Whether the model has any BatchNorm (removed or kept)."""
        return bool(self.removed or self.kept)

    @property
    def fn_head_line(self) -> str | None:
        """What the report says of the FN head: placed, skipped or nothing."""
        if self.fn_head_skipped is not None:
            return f"FN head not placed: {self.fn_head_skipped}."
        if self.fn_head is not None:
            return f"FN head replaces dense layer {self.fn_head}"
        return None

    def __str__(self) -> str:
        head = self.fn_head_line
        if not self.found_batch_norm:
            # Said plainly: "0 of 0 removed" reads like a failed match, and
            # a transformer's LayerNorms are not what LessBN removes.
            lines = [NO_BATCH_NORM + ", none removed."]
            if self.fn_head is not None and head is not None:
                head += f", {self.removed_parameters} parameters fewer."
            if head is not None:
                lines.append(f"  {head}")
            return "\n".join(lines)
        lines = [
            f"LessBN: {len(self.removed)} of "
            f"{len(self.removed) + len(self.kept)} BatchNorms removed, "
            f"{self.removed_parameters} parameters fewer."
        ]
        lines += [
            f"  - {r.path}: {r.block}, {r.reason} (pattern {r.pattern})"
            for r in self.removed
        ]
        lines += [f"  = {path}: kept" for path in self.kept]
        if head is not None:
            lines.append(f"  {head}")
        return "\n".join(lines)


def path_str(path: Sequence[Any]) -> str:
    return "/".join(str(p) for p in path)


@dataclasses.dataclass(frozen=True)
class BatchNormFold:
    """Where a removed BatchNorm's trained function goes.

    A trained BatchNorm computes, at inference, the per-channel affine map
    ``x * a + b`` with ``a = scale / sqrt(var + epsilon)`` and
    ``b = bias - mean * a``. When LessBN removes it from a model whose
    weights were trained, the map is folded into the layer before it
    (`into`): its kernel's output channels are multiplied by ``a`` and
    ``b`` is added to its bias. What the layer cannot take stays at the
    BatchNorm's place as a fixed per-channel map (`keeps`): ``b`` when the
    layer has no bias, ``a`` and ``b`` without such a layer (the BatchNorm
    reads a concatenation, an activation, or a layer whose output is read
    elsewhere too).

    What stays depends on the model only, never on the values: fresh
    weights keep the identity (``a = 1``, ``b = 0``), so a step's state has
    the same structure whichever weights it starts from.

    Attributes:
      path: the removed BatchNorm's module path.
      into: the module path of the convolution or dense layer whose output
        only this BatchNorm reads, or ``None``.
      epsilon: the BatchNorm's epsilon.
      channels_last: whether it normalises over the last axis (a fold
        needs that: the kernel's output channels are its last axis).
      keeps: the parts of ``x * a + b`` that stay at the BatchNorm's place:
        ``("scale", "bias")`` without `into`, ``("bias",)`` when `into` has
        no bias, ``()`` when it has one, or when the BatchNorm does not
        normalise over the last axis (trained weights are then refused).
      features: its number of channels (the size of ``a`` and ``b``).
    """

    path: tuple[Any, ...]
    into: tuple[Any, ...] | None
    epsilon: float
    channels_last: bool
    keeps: tuple[str, ...]
    features: int


@dataclasses.dataclass(frozen=True)
class InitialValue:
    """A variable of the model and the initialiser the model gives it.

    What tells trained weights from fresh ones: a variable whose initialiser
    is a constant (a BatchNorm's running statistics, Flax's zero biases, a
    BatchNorm scale that starts at one, or at zero as in Flax's ImageNet
    ``ResNetBlock``) holds that constant until training moves it. The
    initialiser is the model's own, read from its layer (Linen modules keep
    theirs; NNX modules do not, so for them only what Flax fixes is known:
    running statistics, and biases at Flax's default zeros).

    Attributes:
      path: the layer's module path.
      name: the variable's name (``"scale"``, ``"bias"``, ``"mean"``,
        ``"var"``).
      init: ``init(key, shape, dtype)``, the layer's initialiser for it.
      layer: what the layer is, for messages (``"BatchNorm"``, ``"dense
        layer"``, ``"convolution"``).
    """

    path: tuple[Any, ...]
    name: str
    init: Any
    layer: str


_LAYER_NAMES = {
    "batch_norm": "BatchNorm",
    "dense": "dense layer",
    "conv": "convolution",
    "grouped_conv": "convolution",
}


def _zeros(key, shape, dtype):
    del key
    return np.zeros(shape, dtype)


def _ones(key, shape, dtype):
    del key
    return np.ones(shape, dtype)


def running_statistics(path: tuple[Any, ...]) -> dict[str, InitialValue]:
    """The `InitialValue` of a BatchNorm's running mean and variance: both
    Flax APIs start them at 0 and 1, whatever the model."""
    return {
        "mean": InitialValue(path, "mean", _zeros, "BatchNorm"),
        "var": InitialValue(path, "var", _ones, "BatchNorm"),
    }


def initial_values(graph: model_graph.Graph) -> tuple[InitialValue, ...]:
    """The `InitialValue` of each variable the model's BatchNorms, dense
    layers and convolutions initialise (those held: ``use_bias=False`` has
    no bias)."""
    found: dict[tuple[Any, ...], InitialValue] = {}
    for call in graph.calls:
        if call.kind not in _LAYER_NAMES:
            continue
        module, path = call.module, tuple(call.path)
        values = {}
        if call.kind == "batch_norm":
            values = running_statistics(path)
        for name in ("scale", "bias"):
            if getattr(module, f"use_{name}", name == "bias"):
                init = _initialiser(module, name)
                if init is not None:
                    values[name] = InitialValue(
                        path, name, init, _LAYER_NAMES[call.kind]
                    )
        for name, value in values.items():
            found.setdefault((*path, name), value)
    return tuple(found.values())


def _initialiser(module: Any, name: str):
    """`module`'s initialiser of its variable `name`, or ``None`` where it
    is not known."""
    if isinstance(module, nn.Module):
        # Linen layers keep their initialisers as fields.
        return getattr(module, f"{name}_init", None)
    # NNX layers do not: Flax's default where it is one constant for every
    # layer of a kind (biases at zero); a BatchNorm's scale is often
    # initialised otherwise (zero-initialised residual branches).
    if name == "bias" and isinstance(module, (nnx.Linear, nnx.Conv)):
        return _zeros
    return None


def batch_norm_folds(
    graph: model_graph.Graph, removed: Sequence[tuple[Any, ...]]
) -> tuple[BatchNormFold, ...]:
    """The `BatchNormFold` of each removed BatchNorm (see there)."""
    calls: dict[tuple[Any, ...], int] = {}
    for call in graph.calls:
        calls[tuple(call.path)] = calls.get(tuple(call.path), 0) + 1
    folds = []
    for path in removed:
        node = next(n for n in graph.layers("batch_norm") if n.path == path)
        module = node.layer.module
        axis = getattr(module, "axis", -1)
        rank = len(node.shape)
        channels_last = axis in (-1, rank - 1) if rank else axis == -1
        source = graph.producer(node)
        into = None
        if (
            source is not None
            and source.kind in ("conv", "grouped_conv", "dense")
            and [c.id for c in graph.data_consumers(source)] == [node.id]
            and calls.get(tuple(source.layer.path)) == 1
            and calls.get(tuple(path)) == 1
            and tuple(source.shape) == tuple(node.shape)
        ):
            into = tuple(source.layer.path)
        folds.append(
            BatchNormFold(
                tuple(path),
                into,
                float(getattr(module, "epsilon", 1e-5)),
                channels_last,
                _fold_keeps(source if into else None, channels_last),
                int(node.shape[-1]) if rank else 1,
            )
        )
    return tuple(folds)


def _fold_keeps(into, channels_last: bool) -> tuple[str, ...]:
    """`BatchNormFold.keeps` for the layer `into` (a graph node, or
    ``None``)."""
    if not channels_last:
        return ()
    if into is None:
        return ("scale", "bias")
    # Flax's Conv and Dense (Linen and NNX) have a bias unless use_bias=False.
    return () if getattr(into.call.module, "use_bias", True) else ("bias",)


@dataclasses.dataclass(frozen=True)
class LessBNPlan:
    """The decisions of LessBN for one model.

    Attributes:
      removed: module paths of the BatchNorms to remove.
      fn_head: module path of the dense layer to turn into an FN head.
      excluded_from_gc: module paths gradient centralization leaves alone
        (grouped and depthwise convolutions, FN heads).
      report: the `LessBNReport`.
      fn_scale: the FN head's initial scale (`FNHead.scale_init`).
      fn_log_scale: whether the FN head trains ``log(s)``.
      zero_init: paths of the kept BatchNorms whose scale starts at zero
        (the last BatchNorm of each residual branch, with
        ``zero_init_residual``), so that each block starts as the identity.
      folds: one `BatchNormFold` per removed BatchNorm: where its function
        goes when trained weights are brought into the reduced model.
      initial: the model's constant-initialised variables and their
        initialisers (`InitialValue`): what tells trained weights from
        fresh ones.
    """

    removed: tuple[tuple[Any, ...], ...]
    fn_head: tuple[Any, ...] | None
    excluded_from_gc: tuple[tuple[Any, ...], ...]
    report: LessBNReport
    fn_scale: float = 1.0
    fn_log_scale: bool = False
    zero_init: tuple[tuple[Any, ...], ...] = ()
    folds: tuple[BatchNormFold, ...] = ()
    initial: tuple[InitialValue, ...] = ()


def residual_branch_ends(
    graph: model_graph.Graph, removed: Collection[tuple[Any, ...]]
) -> tuple[tuple[Any, ...], ...]:
    """The kept BatchNorms that end a residual branch LessBN thinned.

    A BatchNorm ends a residual branch when a residual add reads its output
    (through reshapes and casts); the branch was thinned when LessBN removed
    a BatchNorm upstream of it within the same block (before the add's
    other operand joins). Zero-initialising their scales (Goyal et al.,
    2017; torchvision's ``zero_init_residual``) makes every such block start
    as the identity, the role SkipInit's and Fixup's zero gates play in
    BatchNorm-free networks.
    """
    removed = set(removed)
    ends = []
    for node in graph.layers("batch_norm"):
        if node.path in removed:
            continue
        if not any(c.kind == "add" for c in graph.data_consumers(node)):
            continue
        upstream = [
            n.path
            for n in graph.backward_chain(node)[1:]
            if n.kind == "batch_norm" or n.kind == "add"
        ]
        # Up to the previous block's add (the block's input).
        for path in upstream:
            if path is None:
                break
            if path in removed:
                ends.append(node.layer.path)
                break
    return tuple(ends)


def fn_head_placement(
    graph: model_graph.Graph,
) -> tuple[model_graph.Node | None, str | None]:
    """Where LessBN's FN head can go: ``(node, None)`` or ``(None, why)``.

    The FN head turns a dense layer's outputs into cosines times a learned
    scale that starts at 1 (`FNHead`): that suits a classifier's class
    logits, one vector per example, which it replaces in MindSpore's
    networks. It does not suit a language model's per-position logits:
    a next-token distribution over a vocabulary must sharpen far beyond
    what scaled cosines give at first (on the bundled byte-level
    transformer the loss stalled at 2.55 against plain's 1.86). So the FN
    head goes on the last dense layer (in call order) only when

    - its output is the model's output: nothing reads it but reshapes,
      casts and constant scalings (a tied-embedding ``attend`` head is no
      dense layer, so the last one is then inside a block, feeding more);
    - its output is one vector per example: ``(batch, classes)`` with the
      batch of the model's first input, or ``(classes,)``. Rank 3 and more,
      ``(batch, seq, vocab)``, is per position, and so is a ``(batch * seq,
      vocab)`` output whose rows are not the batch's.

    Returns:
      The dense layer's node and ``None``, or ``None`` and the reason in
      words (for `LessBNReport.fn_head_skipped` and error messages).
    """
    dense = list(graph.layers("dense"))
    if not dense:
        return None, "the model has no dense layer (nn.Dense, nnx.Linear)"
    node = dense[-1]
    where = f"the last dense layer {path_str(node.layer.path)!r}"
    shape = tuple(node.shape)
    readers = graph.data_consumers(node)
    if readers:
        read_by = ", ".join(
            n.kind if n.call is None else f"{n.kind} {path_str(n.call.path)!r}"
            for n in readers
        )
        return None, (
            f"{where} does not give the model's output (its output is read "
            f"by {read_by}), so it computes no class logits"
        )
    if len(shape) > 2:
        return None, (
            f"the output {shape} of {where} is per position, not one "
            "vector of class logits per example (batch, classes)"
        )
    batch = graph.nodes[0].shape[:1]
    if len(shape) == 2 and batch and shape[0] != batch[0]:
        return None, (
            f"the output {shape} of {where} has {shape[0]} rows for a "
            f"batch of {batch[0]}: one per position, not one per example"
        )
    return node, None


def _refuse_fn_head(given: str, reason: str) -> ValueError:
    return ValueError(
        f"{given} asks for LessBN's FN head, which cannot work on this "
        f"model: {reason}. The FN head (cosine logits times a learned "
        "scale) replaces a classifier's class-logit layer. Pass "
        "`fn_flag=False` (in a boost config {'less_bn': {'fn_flag': "
        "False}}), or leave `fn_flag` unset (None, the levels' default): "
        "the FN head then goes only where it can work, and the LessBN "
        "report says why it did not."
    )


def _fn_head_request(fn_flag, fn_scale, fn_log_scale) -> str | None:
    """The settings that ask for an FN head explicitly, or ``None``."""
    if fn_flag:
        return "`fn_flag=True`"
    changed = []
    if fn_scale != 1.0:
        changed.append(f"`fn_scale={fn_scale!r}`")
    if fn_log_scale:
        changed.append("`fn_log_scale=True`")
    if not changed:
        return None
    return " and ".join(changed) + " (with `fn_flag` left to the level)"


def plan_less_bn(
    graph: model_graph.Graph,
    *,
    fn_flag: bool | None,
    param_counts,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
    zero_init_residual: bool = False,
) -> LessBNPlan:
    """Applies the rules to a model graph.

    Args:
      graph: the model's `model_graph.Graph`.
      fn_flag: also replace the last dense layer by an FN head: ``True``
        (refused with a `ValueError` where it cannot work, see
        `fn_head_placement`), ``False``, or ``None``, the levels' default:
        where it can work, else skipped with the reason in the report (a
        non-default `fn_scale` or `fn_log_scale` asks for the head as
        ``True`` does).
      param_counts: ``param_counts(path) -> int``, the number of trainable
        parameters of the module at `path`.
      fn_scale, fn_log_scale: the FN head's scale (see `FNHead`).
      zero_init_residual: start each thinned residual branch's last
        BatchNorm at scale zero (`residual_branch_ends`).
    """
    fn_head_node, skipped = None, None
    if fn_flag is not False:
        fn_head_node, skipped = fn_head_placement(graph)
        # An explicit request is never dropped: fn_flag=True, or an FN
        # head's own option set with fn_flag left to the level.
        given = _fn_head_request(fn_flag, fn_scale, fn_log_scale)
        if skipped is not None and given is not None:
            raise _refuse_fn_head(given, skipped)
    # MindSpore's FN head puts L2Normalize before its MatMul, so the dense
    # layer it replaces starts no match.
    matches = less_bn_patterns.match(
        graph, not_starts=() if fn_head_node is None else (fn_head_node.id,)
    )
    removed_paths = [graph.nodes[m.batch_norm].layer.path for m in matches]
    kept = tuple(
        path_str(n.layer.path)
        for n in graph.layers("batch_norm")
        if n.path not in removed_paths
    )
    removed_parameters = sum(param_counts(p) for p in removed_paths)
    fn_head = None
    if fn_head_node is not None:
        fn_head = fn_head_node.path
        # The bias goes, the multiplier comes.
        module = fn_head_node.layer.module
        use_bias = getattr(module, "use_bias", True)
        features = getattr(
            module, "features", getattr(module, "out_features", 0)
        )
        removed_parameters += (features if use_bias else 0) - 1
    report = LessBNReport(
        removed=tuple(
            RemovedBatchNorm(
                path_str(path), m.pattern.block, m.role, m.pattern.number
            )
            for path, m in zip(removed_paths, matches, strict=True)
        ),
        kept=kept,
        fn_head=None if fn_head is None else path_str(fn_head),
        removed_parameters=removed_parameters,
        fn_head_skipped=skipped,
    )
    excluded = [
        n.layer.path
        for n in graph.nodes
        if n.kind in ("grouped_conv", "fn_head")
    ]
    if fn_head is not None:
        excluded.append(fn_head)
    return LessBNPlan(
        tuple(removed_paths),
        fn_head,
        tuple(excluded),
        report,
        fn_scale=fn_scale,
        fn_log_scale=fn_log_scale,
        zero_init=residual_branch_ends(graph, removed_paths)
        if zero_init_residual
        else (),
        folds=batch_norm_folds(graph, removed_paths),
        initial=initial_values(graph),
    )
