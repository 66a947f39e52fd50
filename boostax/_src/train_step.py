# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainState` and the builder of the jitted train step.

One step is::

    rng            = fold_in(state.rng, state.step)
    loss, grads    = value_and_grad(loss_fn)(params, model_state, batch, rng)
    updates, opt   = optimizer.update(grads, opt_state, params, ...)
    params         = params + updates

traced and compiled once. Everything that changes during training lives in
the `TrainState` pytree, so a state saved at step n and restored continues
exactly as the uninterrupted run.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import optax

from boostax._src import objectives as objectives_lib

PyTree = Any


class AlgorithmStates(NamedTuple):
    """One slot for each algorithm whose state lives outside the optimizer.

    A slot is ``None`` while its algorithm is off. Algorithms that are Optax
    transforms (accumulation, AdaSum, gradient centralization) keep their
    state in ``TrainState.opt_state`` instead.

    Attributes:
      loss_scale: loss-scaling state (static, dynamic or per group).
      freeze: position in the gradient-freezing sequence.
      dim_reduce: DimReduce's BFGS matrix, momentum and subspace step.
    """

    loss_scale: PyTree = None
    freeze: PyTree = None
    dim_reduce: PyTree = None


class TrainState(flax.struct.PyTreeNode):
    """Everything a train step reads and writes, as one pytree.

    Only arrays: it goes through ``jax.jit``, ``jax.tree.map`` and
    checkpointing (Orbax) unchanged. Use ``state.replace(...)`` to change a
    field.

    Attributes:
      step: number of steps taken, ``int32`` scalar.
      params: the trainable parameters.
      opt_state: the optimizer's state.
      model_state: non-trainable model variables (BatchNorm statistics,
        NNX RNG counters); ``None`` for a plain loss function.
      rng: the base PRNG key; step ``i`` uses ``fold_in(rng, i)``.
      algorithms: the `AlgorithmStates` of the boost algorithms.
    """

    step: jax.Array
    params: PyTree
    opt_state: optax.OptState
    model_state: PyTree
    rng: jax.Array
    algorithms: AlgorithmStates = AlgorithmStates()


def check_optimizer(optimizer) -> None:
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            "`optimizer` must be an optax.GradientTransformation (e.g. "
            f"optax.sgd(0.1)), got {type(optimizer).__name__}."
        )


class TrainStep:
    """A jitted train step with the `init` that builds its state.

    Built by `make_train_step` or `boostax.auto_boost`. Call it as
    ``state, metrics = train_step(state, batch)``; `metrics` holds at least
    ``"loss"`` (the loss before the update), plus the loss function's own
    metrics.

    Attributes:
      objective: the `Objective` being trained.
      optimizer: the Optax optimizer.
      config: the `BoostConfig` it was built from (``None`` when built by
        `make_train_step`).
      trace_count: how many times the step has been traced (1 after any
        number of steps with fixed shapes).
    """

    def __init__(
        self,
        objective: objectives_lib.Objective,
        optimizer: optax.GradientTransformation,
        *,
        config: Any = None,
        donate_state: bool = False,
    ):
        check_optimizer(optimizer)
        self.objective = objective
        self.optimizer = optimizer
        self.config = config
        self.trace_count = 0
        self._step = jax.jit(
            self._train_step, donate_argnums=(0,) if donate_state else ()
        )
        self._predict = jax.jit(objective.predict)

    def init(self, variables: Any, *, rng: jax.Array | None = None):
        """Builds the initial `TrainState`.

        Args:
          variables: the model's variables: the dict from ``module.init``
            for Linen, the module itself for NNX (default: the objective's
            module), the params pytree for a plain loss function.
          rng: base PRNG key for the model's random streams (dropout);
            default ``jax.random.PRNGKey(0)``.

        Returns:
          A `TrainState` at step 0.
        """
        params, model_state = self.objective.split(variables)
        return TrainState(
            step=jnp.zeros([], jnp.int32),
            params=params,
            opt_state=self.optimizer.init(params),
            model_state=model_state,
            rng=jax.random.PRNGKey(0) if rng is None else rng,
        )

    def _loss_and_grads(self, state: TrainState, batch):
        rng = jax.random.fold_in(state.rng, state.step)

        def loss_fn(params):
            return self.objective.loss_fn(params, state.model_state, batch, rng)

        (loss, (model_state, metrics)), grads = jax.value_and_grad(
            loss_fn, has_aux=True
        )(state.params)
        # Line searches (optax.lbfgs, ...) re-evaluate the loss at trial
        # params on the same batch; unused, this closure costs nothing.
        value_fn = lambda params: loss_fn(params)[0]  # noqa: E731
        return loss, grads, model_state, metrics, value_fn

    def _train_step(self, state: TrainState, batch):
        self.trace_count += 1
        loss, grads, model_state, metrics, value_fn = self._loss_and_grads(
            state, batch
        )
        if isinstance(self.optimizer, optax.GradientTransformationExtraArgs):
            updates, opt_state = self.optimizer.update(
                grads,
                state.opt_state,
                state.params,
                value=loss,
                grad=grads,
                value_fn=value_fn,
            )
        else:
            updates, opt_state = self.optimizer.update(
                grads, state.opt_state, state.params
            )
        new_state = state.replace(
            step=optax.safe_increment(state.step),
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
            model_state=model_state,
        )
        return new_state, {"loss": loss, **metrics}

    def __call__(self, state: TrainState, batch) -> tuple[TrainState, dict]:
        """Runs one step: returns the new state and the step's metrics."""
        return self._step(state, batch)

    @property
    def model(self):
        """The model being trained (after LessBN), ``None`` for a function."""
        return getattr(self.objective, "module", None)

    @property
    def step(self):
        """The jitted ``step(state, batch) -> (state, metrics)`` function."""
        return self._step

    def lower(self, state: TrainState, batch) -> jax.stages.Lowered:
        """Lowers the step for `state` and `batch` (for cost analysis)."""
        return self._step.lower(state, batch)

    def predict(self, state: TrainState, inputs):
        """The model's outputs on `inputs` in evaluation mode."""
        return self._predict(state.params, state.model_state, inputs)

    def variables(self, state: TrainState):
        """The trained model's variables (Linen dict, NNX module, params)."""
        return self.objective.merge(state.params, state.model_state)


def make_train_step(
    optimizer: optax.GradientTransformation,
    *,
    model=None,
    loss=None,
    loss_fn=None,
    has_aux: bool = False,
    predict_fn=None,
    donate_state: bool = False,
) -> TrainStep:
    """Builds a jitted train step from a model or loss and an optimizer.

    Args:
      optimizer: any Optax optimizer. Optimizers that take extra arguments
        (``optax.GradientTransformationExtraArgs``) also receive ``value``,
        ``grad`` and ``value_fn`` (the loss at other params on the same
        batch), so line-search optimizers such as ``optax.lbfgs`` work.
      model: a Flax Linen or NNX module; batches are ``(inputs, targets)``.
      loss: with `model`, ``loss(outputs, targets) -> scalar``.
      loss_fn: instead of `model`/`loss`, ``loss_fn(params, batch)``.
      has_aux: whether the loss returns ``(scalar, metrics_dict)``.
      predict_fn: with `loss_fn`, ``predict_fn(params, inputs)``.
      donate_state: donate the input state's buffers to the step (saves
        memory; the old state cannot be used afterwards).

    Returns:
      A `TrainStep`: ``state = ts.init(variables)`` then
      ``state, metrics = ts(state, batch)``.

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> loss_fn = lambda w, batch: jnp.mean((batch[0] @ w - batch[1]) ** 2)
      >>> ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=loss_fn)
      >>> state = ts.init(jnp.zeros(3))
      >>> x = jnp.eye(3); y = jnp.array([1.0, 2.0, 3.0])
      >>> for _ in range(50):
      ...   state, metrics = ts(state, (x, y))
      >>> bool(metrics["loss"] < 1e-2), ts.trace_count
      (True, 1)
    """
    objective = objectives_lib.make_objective(
        model=model,
        loss=loss,
        loss_fn=loss_fn,
        has_aux=has_aux,
        predict_fn=predict_fn,
    )
    return TrainStep(objective, optimizer, donate_state=donate_state)
