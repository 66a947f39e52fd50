# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Objectives: what a train step differentiates, for every kind of model.

The step builder (`train_step.py`) sees one signature only::

    loss_fn(params, model_state, batch, rng) -> (loss, (model_state, metrics))

An *objective* adapts a model to it and knows how to split the model's
variables into trainable ``params`` and the rest (``model_state``: BatchNorm
statistics, NNX RNG counters, ...), how to put them back together, and how to
predict in evaluation mode. Three are provided:

- `LinenObjective`: a Flax Linen module; mutable collections such as
  ``batch_stats`` are threaded through the step.
- `NNXObjective`: a Flax NNX module, via ``nnx.split`` / ``nnx.merge``.
- `FunctionObjective`: a plain ``loss_fn(params, batch)``.

Model objectives take batches as ``(inputs, targets)`` pairs and a loss
``loss(outputs, targets) -> scalar`` (or ``(scalar, metrics)`` with
``has_aux=True``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import flax.core
import jax
import numpy as np
from flax import linen as nn
from flax import nnx

PyTree = Any
LossAux = tuple[PyTree, dict[str, jax.Array]]


class Objective(Protocol):
    """The interface the step builder needs from a model and its loss."""

    def split(self, variables: Any) -> tuple[PyTree, PyTree]:
        """Returns ``(params, model_state)`` from the model's variables."""

    def merge(self, params: PyTree, model_state: PyTree) -> Any:
        """Inverse of `split`: the model's variables (or NNX module)."""

    def loss_fn(
        self, params: PyTree, model_state: PyTree, batch: Any, rng: jax.Array
    ) -> tuple[jax.Array, LossAux]:
        """The training loss, the new model state and extra metrics."""

    def predict(self, params: PyTree, model_state: PyTree, inputs: Any) -> Any:
        """The model's outputs in evaluation mode."""


def inputs_and_targets(batch) -> tuple[Any, Any]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(
            "A model objective takes batches as (inputs, targets) pairs, got "
            f"{type(batch).__name__}"
            + (
                f" of length {len(batch)}"
                if isinstance(batch, (tuple, list))
                else ""
            )
            + ". Use `loss_fn=` for other batch structures."
        )
    return batch[0], batch[1]


def _leading_sizes(name: str, tree) -> list[tuple[str, int]]:
    """``(entry, leading size)`` of the arrays of `tree` (scalars skipped)."""
    return [
        (name + jax.tree_util.keystr(path), shape[0])
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
        for shape in [np.shape(leaf)]
        if shape
    ]


def check_batch_sizes(batch) -> None:
    """Raises if a model batch's targets and inputs differ in batch size.

    Runs on the host before the step is traced, where a mismatch would
    otherwise surface as a broadcasting error inside the loss. Only shapes
    are read (no device transfer).

    Args:
      batch: an ``(inputs, targets)`` pair of arrays or pytrees of arrays.

    Raises:
      ValueError: naming every entry and its leading size, when a target's
        leading size differs from the first input's.
    """
    inputs, targets = inputs_and_targets(batch)
    entries = _leading_sizes("inputs", inputs)
    target_entries = _leading_sizes("targets", targets)
    if not entries or all(n == entries[0][1] for _, n in target_entries):
        return
    listed = ", ".join(f"{e}: {n}" for e, n in entries + target_entries)
    raise ValueError(
        "The batch's targets and inputs differ in their leading (batch) "
        f"size: {listed}. Every array of an (inputs, targets) batch needs "
        f"the inputs' batch size {entries[0][1]} as its first dimension."
    )


def _call_loss(loss, has_aux, outputs, targets):
    if has_aux:
        value, metrics = loss(outputs, targets)
        return value, dict(metrics)
    return loss(outputs, targets), {}


def accepts_train(module: nn.Module) -> bool:
    """Whether a Linen module's ``__call__`` takes a ``train`` argument.

    A wrapper whose ``__call__`` forwards ``**kwargs`` to a `network` field
    (like `LinenLessBN`) is looked through.
    """
    try:
        parameters = inspect.signature(type(module).__call__).parameters
    except (TypeError, ValueError):
        return False
    if "train" in parameters:
        return True
    forwards = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    inner = getattr(module, "network", None)
    return forwards and isinstance(inner, nn.Module) and accepts_train(inner)


@dataclasses.dataclass(frozen=True)
class LinenObjective:
    """A Flax Linen module and a loss on its outputs.

    Every variable collection other than ``params`` (e.g. ``batch_stats``) is
    model state, passed as mutable in training and read-only in evaluation.

    Args:
      module: the Linen module.
      loss: ``loss(outputs, targets) -> scalar``, or ``(scalar, metrics)``
        when `has_aux`.
      has_aux: whether `loss` also returns a dict of metrics.
      train_kwargs: keyword arguments of ``module.apply`` in training;
        default ``{"train": True}`` if ``module.__call__`` takes ``train``,
        else ``{}``.
      eval_kwargs: the same in evaluation; default ``{"train": False}`` or
        ``{}``.
      rng_collections: names of the RNG streams the module draws from in
        training (each gets a key derived from the step's key).
      convert_variables: applied to the variables given to `split` (e.g.
        LessBN's conversion of the original model's variables).
    """

    module: nn.Module
    loss: Callable[..., Any]
    has_aux: bool = False
    train_kwargs: Mapping[str, Any] | None = None
    eval_kwargs: Mapping[str, Any] | None = None
    rng_collections: tuple[str, ...] = ("dropout",)
    convert_variables: Callable[[Any], Any] | None = None

    def __post_init__(self):
        takes_train = accepts_train(self.module)
        if self.train_kwargs is None:
            object.__setattr__(
                self, "train_kwargs", {"train": True} if takes_train else {}
            )
        if self.eval_kwargs is None:
            object.__setattr__(
                self, "eval_kwargs", {"train": False} if takes_train else {}
            )

    def split(self, variables):
        if self.convert_variables is not None:
            variables = self.convert_variables(variables)
        if not isinstance(variables, Mapping) or "params" not in variables:
            raise TypeError(
                "`variables` of a Linen model must be the dict returned by "
                "`module.init` (with a 'params' collection), got "
                f"{type(variables).__name__}."
            )
        variables = flax.core.unfreeze(variables)
        params = variables.pop("params")
        return params, variables

    def merge(self, params, model_state):
        return {"params": params, **model_state}

    def loss_fn(self, params, model_state, batch, rng):
        inputs, targets = inputs_and_targets(batch)
        rngs = {
            name: jax.random.fold_in(rng, i)
            for i, name in enumerate(self.rng_collections)
        }
        variables = self.merge(params, model_state)
        if model_state:
            outputs, new_state = self.module.apply(
                variables,
                inputs,
                rngs=rngs,
                mutable=list(model_state),
                **self.train_kwargs,
            )
            new_state = flax.core.unfreeze(new_state)
        else:
            outputs = self.module.apply(
                variables, inputs, rngs=rngs, **self.train_kwargs
            )
            new_state = model_state
        value, metrics = _call_loss(self.loss, self.has_aux, outputs, targets)
        return value, (new_state, metrics)

    def predict(self, params, model_state, inputs):
        return self.module.apply(
            self.merge(params, model_state), inputs, **self.eval_kwargs
        )


class NNXObjective:
    """A Flax NNX module and a loss on its outputs.

    The module is split once into a static graph definition, its
    ``nnx.Param`` state (the params) and everything else (the model state:
    BatchNorm statistics, RNG counters). Each step merges a fresh copy in
    training mode (``module.train()``); `predict` uses ``module.eval()``.
    The module given is not modified.

    Args:
      module: the NNX module (its current values are the default variables
        for `split`).
      loss: ``loss(outputs, targets) -> scalar``, or ``(scalar, metrics)``
        when `has_aux`.
      has_aux: whether `loss` also returns a dict of metrics.
      convert_variables: applied to a module given to `split` (e.g. LessBN
        applied to the original model).
    """

    def __init__(
        self,
        module: nnx.Module,
        loss: Callable[..., Any],
        *,
        has_aux=False,
        convert_variables: Callable[[Any], Any] | None = None,
    ):
        self.module = module
        self.loss = loss
        self.has_aux = has_aux
        self.convert_variables = convert_variables
        self.graphdef = nnx.graphdef(module)

    def split(self, variables=None):
        """Splits `variables` (an NNX module; default: the objective's)."""
        module = self.module if variables is None else variables
        if not isinstance(module, nnx.Module):
            raise TypeError(
                "`variables` of an NNX model must be an nnx.Module, got "
                f"{type(module).__name__}."
            )
        if self.convert_variables is not None:
            module = self.convert_variables(module)
        _, params, model_state = nnx.split(module, nnx.Param, ...)
        return params, model_state

    def merge(self, params, model_state):
        # Fresh Variables: the module may be mutated (BatchNorm statistics)
        # inside a trace other than the one that created the states.
        return nnx.merge(self.graphdef, params, model_state, copy=True)

    def loss_fn(self, params, model_state, batch, rng):
        del rng  # NNX modules carry their own RNG streams in model_state.
        inputs, targets = inputs_and_targets(batch)
        module = self.merge(params, model_state)
        module.train()
        outputs = module(inputs)
        _, _, new_state = nnx.split(module, nnx.Param, ...)
        value, metrics = _call_loss(self.loss, self.has_aux, outputs, targets)
        return value, (new_state, metrics)

    def predict(self, params, model_state, inputs):
        module = self.merge(params, model_state)
        module.eval()
        return module(inputs)


@dataclasses.dataclass(frozen=True)
class FunctionObjective:
    """A plain loss function of the params, with no model state.

    Args:
      loss_fn: ``loss_fn(params, batch) -> scalar``, or ``(scalar, metrics)``
        when `has_aux`.
      has_aux: whether `loss_fn` also returns a dict of metrics.
      predict_fn: optional ``predict_fn(params, inputs) -> outputs`` for
        evaluation.
    """

    loss: Callable[..., Any]
    has_aux: bool = False
    predict_fn: Callable[..., Any] | None = None

    def split(self, variables):
        return variables, None

    def merge(self, params, model_state):
        del model_state
        return params

    def loss_fn(self, params, model_state, batch, rng):
        del rng
        if self.has_aux:
            value, metrics = self.loss(params, batch)
            return value, (model_state, dict(metrics))
        return self.loss(params, batch), (model_state, {})

    def predict(self, params, model_state, inputs):
        del model_state
        if self.predict_fn is None:
            raise ValueError(
                "This objective was built from a plain `loss_fn`; pass "
                "`predict_fn=` to evaluate it."
            )
        return self.predict_fn(params, inputs)


def make_objective(
    *,
    model: nn.Module | nnx.Module | None = None,
    loss: Callable[..., Any] | None = None,
    loss_fn: Callable[..., Any] | None = None,
    has_aux: bool = False,
    predict_fn: Callable[..., Any] | None = None,
    convert_variables: Callable[[Any], Any] | None = None,
) -> Objective:
    """Builds the objective for a Linen or NNX `model` + `loss`, or `loss_fn`.

    Args:
      model: a Flax Linen or NNX module (with `loss`).
      loss: ``loss(outputs, targets)`` for `model`; batches are
        ``(inputs, targets)`` pairs.
      loss_fn: instead of `model` and `loss`: ``loss_fn(params, batch)``.
      has_aux: whether the loss also returns a dict of metrics.
      predict_fn: with `loss_fn`, ``predict_fn(params, inputs)`` for
        evaluation.
      convert_variables: with `model`, applied to the variables given to
        ``split`` (`LinenObjective`, `NNXObjective`).

    Returns:
      A `LinenObjective`, `NNXObjective` or `FunctionObjective`.
    """
    if (model is None) == (loss_fn is None):
        raise ValueError(
            "Pass either `model=` (with `loss=`) or `loss_fn=`, got "
            + ("both." if model is not None else "neither.")
        )
    if loss_fn is not None:
        if loss is not None:
            raise ValueError("`loss=` goes with `model=`; got `loss_fn=`.")
        if not callable(loss_fn):
            raise TypeError(f"`loss_fn` must be callable, got {loss_fn!r}.")
        return FunctionObjective(loss_fn, has_aux, predict_fn)
    if not callable(loss):
        raise TypeError(
            f"`loss` must be a callable loss(outputs, targets), got {loss!r}."
        )
    if predict_fn is not None:
        raise ValueError("`predict_fn=` goes with `loss_fn=`, not `model=`.")
    if isinstance(model, nn.Module):
        return LinenObjective(
            model, loss, has_aux, convert_variables=convert_variables
        )
    if isinstance(model, nnx.Module):
        return NNXObjective(
            model, loss, has_aux=has_aux, convert_variables=convert_variables
        )
    raise TypeError(
        "`model` must be a Flax Linen or NNX module, got "
        f"{type(model).__name__}."
    )
