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

Model objectives take batches as ``(inputs, targets)`` pairs, or dicts with
`batch_keys` naming the two entries (read and checked by `batches`), and a
loss ``loss(outputs, targets) -> scalar`` (or ``(scalar, metrics)`` with
``has_aux=True``).

The attributes a model runs with in the step (its collectives' axis names,
its compute dtype) are set by `step_attributes`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import flax.core
import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

from boostax._src import precision as precision_lib
from boostax._src import validation
from boostax._src.distributed import boxed_variables
from boostax._src.model_graph import accepts_train, init_rngs
from boostax._src.step import attributes as step_attributes_lib
from boostax._src.step import model_errors, weighted_loss
from boostax._src.step.batches import (
    check_batch_keys,
    check_batch_sizes,
    inputs_and_targets,
    model_args,
)
from boostax._src.step.weighted_loss import WeightedLoss

PyTree = Any
LossAux = tuple[PyTree, dict[str, jax.Array]]


class Objective(Protocol):
    """The interface the step builder needs from a model and its loss.

    Optionally, ``constant_state(model_state)``: a bool per model-state leaf
    that the model reads and never writes (`LinenObjective.constant_state`),
    which the step then leaves as it is (never averaged over devices).
    """

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

    def check_batch(self, batch: Any) -> None:
        """Raises, before tracing, on a batch the loss cannot take (shapes
        only: no device transfer)."""

    def initial_variables(self, batch: Any) -> Any:
        """Fresh variables of the model for `batch` (what `split` takes), or
        ``None`` when there is no model to initialise (a loss function of
        the params)."""


def _check_kwargs(name: str, value) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) for k in value
    ):
        raise TypeError(
            f"`{name}` must be None or a dict of keyword arguments of the "
            f"model's call, {validation.got(value)}."
        )
    return dict(value)


def _check_rng_collections(value) -> tuple[str, ...]:
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or not all(isinstance(v, str) for v in value)
        or len(set(value)) != len(value)
    ):
        raise TypeError(
            "`rng_collections` must be a sequence of distinct RNG stream "
            "names (e.g. ('dropout', 'noise')), "
            f"{validation.got(value)}."
        )
    return tuple(value)


def _call_loss(loss, has_aux, outputs, targets):
    return _loss_result(loss(outputs, targets), has_aux, "loss")


def _loss_result(result, has_aux: bool, name: str):
    """``(scalar, metrics)`` from a loss's result, checked at trace time
    (the scalar may be a `WeightedLoss`, which the step normalises)."""
    if isinstance(result, WeightedLoss):
        if has_aux:
            raise TypeError(
                f"With `has_aux=True`, `{name}` must return (loss, dict of "
                "metrics), got a bare WeightedLoss: return "
                "(WeightedLoss(total, weight), metrics)."
            )
        weighted_loss.check(result, name)
        return result, {}
    if has_aux:
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(
                f"With `has_aux=True`, `{name}` must return (scalar loss, "
                f"dict of metrics), got {type(result).__name__}."
            )
        value, metrics = result
        if not isinstance(metrics, Mapping):
            raise TypeError(
                f"With `has_aux=True`, `{name}` must return (scalar loss, "
                f"dict of metrics); its metrics are a "
                f"{type(metrics).__name__}."
            )
        metrics = dict(metrics)
        if isinstance(value, WeightedLoss):
            weighted_loss.check(value, name)
            return value, metrics
    else:
        value, metrics = result, {}
        if isinstance(result, (tuple, list)):
            raise TypeError(
                f"`{name}` returned a {type(result).__name__}: a loss that "
                "also returns metrics needs `has_aux=True`."
            )
    if jnp.ndim(value) != 0:
        raise TypeError(
            f"`{name}` must return a scalar loss (e.g. a mean over the "
            f"batch), got shape {jnp.shape(value)}."
        )
    return value, metrics


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
        training (``make_rng(name)``); stream ``i`` gets
        ``fold_in(step key, i)``.
      convert_variables: applied to the variables given to `split` (e.g.
        LessBN's conversion of the original model's variables).
      batch_keys: ``(inputs key, targets key)`` for dict batches (the
        inputs key may be a tuple of keys: the model's positional inputs);
        ``None``: ``(inputs, targets)`` pairs.
    """

    module: nn.Module
    loss: Callable[..., Any]
    has_aux: bool = False
    train_kwargs: Mapping[str, Any] | None = None
    eval_kwargs: Mapping[str, Any] | None = None
    rng_collections: Sequence[str] = ("dropout",)  # a tuple once checked
    convert_variables: Callable[[Any], Any] | None = None
    batch_keys: tuple[Any, str] | None = None

    def __post_init__(self):
        object.__setattr__(
            self,
            "rng_collections",
            _check_rng_collections(self.rng_collections),
        )
        object.__setattr__(
            self, "batch_keys", check_batch_keys(self.batch_keys)
        )
        for name in ("train_kwargs", "eval_kwargs"):
            object.__setattr__(
                self, name, _check_kwargs(name, getattr(self, name))
            )
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
        # Boxes annotated to shard refused (the step would replicate
        # them), the others opened: before LessBN's conversion reads them.
        variables = boxed_variables.unbox_linen(variables)
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

    def check_batch(self, batch) -> None:
        check_batch_sizes(inputs_and_targets(batch, self.batch_keys))

    def initial_variables(self, batch):
        inputs, _ = inputs_and_targets(batch, self.batch_keys)
        return self.module.init(
            init_rngs(),
            *model_args(inputs, self.batch_keys),
            **self.eval_kwargs,
        )

    def loss_fn(self, params, model_state, batch, rng):
        inputs, targets = inputs_and_targets(batch, self.batch_keys)
        rngs = {
            name: jax.random.fold_in(rng, i)
            for i, name in enumerate(self.rng_collections)
        }
        explained = model_errors.explained(self, params, inputs, train=True)
        policy = precision_lib.current()
        if policy is not None:
            params = policy.cast_parameters(params)
            inputs = policy.cast_inputs(inputs)
        variables = self.merge(params, model_state)
        with explained, step_attributes_lib.linen_step_attributes(policy):
            if model_state:
                outputs, new_state = self.module.apply(
                    variables,
                    *model_args(inputs, self.batch_keys),
                    rngs=rngs,
                    mutable=list(model_state),
                    **self.train_kwargs,
                )
                new_state = flax.core.unfreeze(new_state)
            else:
                outputs = self.module.apply(
                    variables,
                    *model_args(inputs, self.batch_keys),
                    rngs=rngs,
                    **self.train_kwargs,
                )
                new_state = model_state
        if policy is not None:
            outputs = policy.cast_outputs(outputs)
        value, metrics = _call_loss(self.loss, self.has_aux, outputs, targets)
        return value, (new_state, metrics)

    def predict(self, params, model_state, inputs, module=None):
        """The outputs of `module` (default: the objective's) in evaluation.

        `module` is another Linen module of the same variables: a script's
        evaluation model (Flax's lm1b builds ``TransformerLM(eval_config)``
        with ``deterministic=True``). Where the objective's module wraps
        the original (LessBN's `LinenLessBN`), the same wrapper is put
        around `module`.
        """
        if module is None:
            module = self.module
        else:
            module = _wrapped_like(self.module, module)
        explained = model_errors.explained(self, params, inputs, train=False)
        with explained, step_attributes_lib.linen_step_attributes():
            return module.apply(
                self.merge(params, model_state),
                *model_args(inputs, self.batch_keys),
                **self.eval_kwargs,
            )

    def constant_state(self, model_state):
        """A bool per leaf of `model_state`: whether the module only reads
        it (its ``constant_variables``, e.g. what a BatchNorm removed by
        LessBN keeps), or ``None`` when the module says nothing of it.

        The step returns such leaves as they are: an average over devices
        would round them differently at each step.
        """
        constant = getattr(self.module, "constant_variables", None)
        return None if constant is None else constant(model_state)


def _wrapped_like(wrapper: nn.Module, module: nn.Module) -> nn.Module:
    """`module` in the wrapper the objective's module is (LessBN's, whose
    `network` field holds the original), or as it is."""
    if not isinstance(module, nn.Module):
        raise TypeError(
            "`model` of `predict` must be a Flax Linen module of the step's "
            f"variables (e.g. the script's evaluation model), got "
            f"{type(module).__name__}."
        )
    network = getattr(wrapper, "network", None)
    if isinstance(network, nn.Module):
        return wrapper.clone(network=module)
    return module


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
      train_kwargs: keyword arguments of the module's call in training.
      eval_kwargs: the same in evaluation.
      batch_keys: ``(inputs key, targets key)`` for dict batches (the
        inputs key may be a tuple of keys: the model's positional inputs);
        ``None``: ``(inputs, targets)`` pairs.
    """

    def __init__(
        self,
        module: nnx.Module,
        loss: Callable[..., Any],
        *,
        has_aux=False,
        convert_variables: Callable[[Any], Any] | None = None,
        train_kwargs: Mapping[str, Any] | None = None,
        eval_kwargs: Mapping[str, Any] | None = None,
        batch_keys: tuple[Any, str] | None = None,
    ):
        self.module = module
        self.loss = loss
        self.has_aux = has_aux
        self.convert_variables = convert_variables
        self.train_kwargs = _check_kwargs("train_kwargs", train_kwargs) or {}
        self.eval_kwargs = _check_kwargs("eval_kwargs", eval_kwargs) or {}
        self.batch_keys = check_batch_keys(batch_keys)
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
        boxed_variables.check_nnx(params)  # the step would replicate them
        return params, model_state

    def merge(self, params, model_state):
        # Fresh Variables: the module may be mutated (BatchNorm statistics)
        # inside a trace other than the one that created the states.
        return nnx.merge(self.graphdef, params, model_state, copy=True)

    def check_batch(self, batch) -> None:
        check_batch_sizes(inputs_and_targets(batch, self.batch_keys))

    def initial_variables(self, batch):
        del batch  # an NNX module is its own variables
        return self.module

    def loss_fn(self, params, model_state, batch, rng):
        del rng  # NNX modules carry their own RNG streams in model_state.
        inputs, targets = inputs_and_targets(batch, self.batch_keys)
        policy = precision_lib.current()
        if policy is not None:
            params = policy.cast_parameters(params)
            inputs = policy.cast_inputs(inputs)
        module = self.merge(params, model_state)
        module.train()
        step_attributes_lib.set_nnx_step_attributes(module, policy)
        outputs = module(
            *model_args(inputs, self.batch_keys), **self.train_kwargs
        )
        _, _, new_state = nnx.split(module, nnx.Param, ...)
        if policy is not None:
            outputs = policy.cast_outputs(outputs)
        value, metrics = _call_loss(self.loss, self.has_aux, outputs, targets)
        return value, (new_state, metrics)

    def predict(self, params, model_state, inputs):
        module = self.merge(params, model_state)
        module.eval()
        step_attributes_lib.set_nnx_step_attributes(module)
        return module(*model_args(inputs, self.batch_keys), **self.eval_kwargs)


@dataclasses.dataclass(frozen=True)
class FunctionObjective:
    """A plain loss function of the params, with no model state.

    Under a precision policy the parameters are cast to its compute dtype
    and the loss comes back in float32; the batch is passed as given (its
    targets, whatever their range, are never cast), except the leaves
    `cast_batch` marks as inputs.

    Args:
      loss_fn: ``loss_fn(params, batch) -> scalar``, or ``(scalar, metrics)``
        when `has_aux`. A `loss_fn` with a parameter named ``rng`` gets the
        step's PRNG key there (``fold_in(state.rng, state.step)``, as a
        model's streams do; for dropout in a hand-written forward pass).
      has_aux: whether `loss_fn` also returns a dict of metrics.
      predict_fn: optional ``predict_fn(params, inputs) -> outputs`` for
        evaluation.
      cast_batch: under a half-precision policy, which parts of the batch
        are inputs whose floating leaves are cast to the compute dtype: a
        pytree of bools, a prefix of the batch (``(True, False)`` for an
        ``(inputs, targets)`` pair), or a function of the batch returning
        one; ``None``: nothing of the batch is cast.
    """

    loss: Callable[..., Any]
    has_aux: bool = False
    predict_fn: Callable[..., Any] | None = None
    cast_batch: Any = None

    def __post_init__(self):
        precision_lib.check_cast_batch(self.cast_batch)

    @functools.cached_property
    def takes_rng(self) -> bool:
        """Whether the loss function takes the step's key (``rng=``)."""
        try:
            parameters = inspect.signature(self.loss).parameters
        except (TypeError, ValueError):  # a callable without a signature
            return False
        return "rng" in parameters

    def split(self, variables):
        return variables, None

    def merge(self, params, model_state):
        del model_state
        return params

    def check_batch(self, batch) -> None:
        del batch  # any pytree the loss takes

    def initial_variables(self, batch):
        del batch  # a loss function has no model to initialise
        return None

    def loss_fn(self, params, model_state, batch, rng):
        policy = precision_lib.current()
        if policy is not None:
            # No layers to cast their own: the parameters are cast, and the
            # batch's leaves the user marked as inputs; targets never (1e5
            # is inf in float16). The loss comes back in float32.
            params = precision_lib.cast_floating(params, policy.compute_dtype)
            if self.cast_batch is not None:
                batch = precision_lib.cast_batch_leaves(
                    batch, self.cast_batch, policy.compute_dtype
                )
        extra = {"rng": rng} if self.takes_rng else {}
        value, metrics = _loss_result(
            self.loss(params, batch, **extra), self.has_aux, "loss_fn"
        )
        if policy is not None:
            value = policy.cast_outputs(value)
        return value, (model_state, metrics)

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
    batch_keys: tuple[str, str] | None = None,
    rng_collections: Sequence[str] | None = None,
    train_kwargs: Mapping[str, Any] | None = None,
    eval_kwargs: Mapping[str, Any] | None = None,
    cast_batch: Any = None,
) -> Objective:
    """Builds the objective for a Linen or NNX `model` + `loss`, or `loss_fn`.

    Args:
      model: a Flax Linen or NNX module (with `loss`).
      loss: ``loss(outputs, targets)`` for `model`; batches are
        ``(inputs, targets)`` pairs (or dicts, with `batch_keys`).
      loss_fn: instead of `model` and `loss`: ``loss_fn(params, batch)``.
      has_aux: whether the loss also returns a dict of metrics.
      predict_fn: with `loss_fn`, ``predict_fn(params, inputs)`` for
        evaluation.
      convert_variables: with `model`, applied to the variables given to
        ``split`` (`LinenObjective`, `NNXObjective`).
      batch_keys: with `model`, ``(inputs key, targets key)`` of dict
        batches.
      rng_collections: with a Linen `model`, the RNG streams it draws from
        in training (default ``("dropout",)``).
      train_kwargs, eval_kwargs: with `model`, keyword arguments of its call
        in training / evaluation (Linen default: ``train=True`` / ``False``
        when its ``__call__`` takes ``train``).
      cast_batch: with `loss_fn`, which parts of the batch a half-precision
        policy casts (`FunctionObjective`); ``None``: none.

    Returns:
      A `LinenObjective`, `NNXObjective` or `FunctionObjective`.
    """
    validation.check_bool("has_aux", has_aux)
    if (model is None) == (loss_fn is None):
        raise ValueError(
            "Pass either `model=` (with `loss=`) or `loss_fn=`, got "
            + ("both." if model is not None else "neither.")
        )
    model_options = dict(
        batch_keys=batch_keys,
        rng_collections=rng_collections,
        train_kwargs=train_kwargs,
        eval_kwargs=eval_kwargs,
    )
    if loss_fn is not None:
        if loss is not None:
            raise ValueError("`loss=` goes with `model=`; got `loss_fn=`.")
        given = [k for k, v in model_options.items() if v is not None]
        if given:
            raise ValueError(
                f"`{given[0]}=` configures how a `model` is called; a plain "
                "`loss_fn(params, batch)` receives the whole batch and calls "
                "its model itself."
            )
        validation.check_callable("loss_fn", loss_fn, "a callable")
        if predict_fn is not None:
            validation.check_callable("predict_fn", predict_fn, "a callable")
        return FunctionObjective(loss_fn, has_aux, predict_fn, cast_batch)
    if cast_batch is not None:
        raise ValueError(
            "`cast_batch=` goes with `loss_fn=`: with `model=`, a precision "
            "policy casts the inputs of each (inputs, targets) batch and "
            "never the targets."
        )
    if not callable(loss):
        raise TypeError(
            f"`loss` must be a callable loss(outputs, targets), got {loss!r}."
        )
    if predict_fn is not None:
        raise ValueError("`predict_fn=` goes with `loss_fn=`, not `model=`.")
    if isinstance(model, nn.Module):
        return LinenObjective(
            model,
            loss,
            has_aux,
            train_kwargs=train_kwargs,
            eval_kwargs=eval_kwargs,
            rng_collections=(
                ("dropout",) if rng_collections is None else rng_collections
            ),
            convert_variables=convert_variables,
            batch_keys=batch_keys,
        )
    if isinstance(model, nnx.Module):
        if rng_collections is not None:
            raise ValueError(
                "`rng_collections=` names the RNG streams of a Linen model; "
                "an NNX module carries its own (nnx.Rngs), which the step "
                "advances in the model state."
            )
        return NNXObjective(
            model,
            loss,
            has_aux=has_aux,
            convert_variables=convert_variables,
            train_kwargs=train_kwargs,
            eval_kwargs=eval_kwargs,
            batch_keys=batch_keys,
        )
    raise TypeError(
        "`model` must be a Flax Linen or NNX module, got "
        f"{type(model).__name__}."
    )
