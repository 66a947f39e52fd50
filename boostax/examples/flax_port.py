# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A Flax ImageNet-style training script, ported to boostax.

The worked, tested version of docs/porting_flax.md. It is laid out like the
Flax ImageNet example (``examples/imagenet`` in google/flax): a models file
of Linen ResNets whose BatchNorms are synchronised over the ``pmap`` axis
``'batch'``, and a train file with a warm-up + cosine learning-rate
schedule, SGD with Nesterov momentum, a cross-entropy loss, an L2 penalty on
the kernels, a ``TrainState`` subclass holding ``batch_stats`` and
``dynamic_scale``, dict batches ``{'image', 'label'}`` and an evaluation
step on ``state.apply_fn``. The data are scikit-learn's 8x8 digits (no
download), and the model is tiny, so that a few steps compile in seconds.

What the port changed is marked ``# boostax:`` below; everything else is
as a Flax script writes it. The unported train step (a pmapped function
with the L2 term in its loss and a ``lax.pmean`` of the gradients) is in
tests/flax_port_example_test.py, which checks that O0 is that step. The
models section is the example's models file and is not changed at all: its
``axis_name='batch'`` keeps working with or without a mesh, at every level.

Run a level from the command line::

    python -m boostax.examples.flax_port --level O1 --epochs 3
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax.training import dynamic_scale as dynamic_scale_lib
from flax.training import train_state

import boostax
from boostax.examples import data

NUM_CLASSES = 10
IMAGE_SIZE = 8  # the digits' side

# ---------------------------------------------------------------------------
# The models file: unchanged by the port.
# ---------------------------------------------------------------------------

ModuleDef = Any


class ResNetBlock(nn.Module):
    """Two 3x3 convolutions and a shortcut, projected where shapes differ."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        y = self.conv(self.filters, (3, 3), self.strides)(x)
        y = self.act(self.norm()(y))
        y = self.norm()(self.conv(self.filters, (3, 3))(y))
        if x.shape != y.shape:
            x = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(
                x
            )
            x = self.norm(name="norm_proj")(x)
        return self.act(x + y)


class ResNet(nn.Module):
    """A ResNet v1 for small images, its BatchNorms synchronised over 'batch'.

    Attributes:
      stage_sizes: blocks per stage; each stage after the first halves the
        resolution and doubles the width.
      block_cls: the block.
      num_classes: outputs of the classifier.
      num_filters: width of the stem and the first stage.
      dtype: the computation dtype (``float16`` for half precision).
      act: the activation.
    """

    stage_sizes: Sequence[int]
    block_cls: ModuleDef = ResNetBlock
    num_classes: int = NUM_CLASSES
    num_filters: int = 8
    dtype: Any = jnp.float32
    act: Callable = nn.relu

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = functools.partial(
            nn.BatchNorm,
            use_running_average=not train,
            momentum=0.9,
            epsilon=1e-5,
            dtype=self.dtype,
            axis_name="batch",  # synchronised BatchNorm, written for pmap
        )
        x = conv(self.num_filters, (3, 3), name="conv_init")(x)
        x = self.act(norm(name="bn_init")(x))
        for stage, size in enumerate(self.stage_sizes):
            for index in range(size):
                x = self.block_cls(
                    self.num_filters * 2**stage,
                    conv=conv,
                    norm=norm,
                    act=self.act,
                    strides=(2, 2) if stage > 0 and index == 0 else (1, 1),
                )(x)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return jnp.asarray(x, self.dtype)


ResNet4 = functools.partial(ResNet, stage_sizes=(1, 1))  # 4 conv layers deep


# ---------------------------------------------------------------------------
# The train file.
# ---------------------------------------------------------------------------


def create_model(*, model_cls=ResNet4, half_precision=False, **kwargs):
    dtype = jnp.float16 if half_precision else jnp.float32
    return model_cls(num_classes=NUM_CLASSES, dtype=dtype, **kwargs)


def initialized(key, image_size, model):
    """The model's params and BatchNorm statistics."""
    images = jnp.ones((1, image_size, image_size, 1), model.dtype)
    variables = jax.jit(model.init)({"params": key}, images)
    return variables["params"], variables["batch_stats"]


def cross_entropy_loss(logits, labels):
    logits = jnp.asarray(logits, jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


def compute_metrics(logits, labels):
    return {
        "loss": cross_entropy_loss(logits, labels),
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == labels),
    }


def create_learning_rate_fn(
    base_learning_rate: float,
    steps_per_epoch: int,
    *,
    warmup_epochs: float,
    num_epochs: float,
) -> optax.Schedule:
    """Linear warm-up to `base_learning_rate`, then a cosine decay to 0.

    boostax: `steps_per_epoch` counts optimizer *updates*: with gradient
    accumulation over k micro-batches that is the train steps per epoch
    divided by k (the schedule runs inside the optimizer, once per update).
    """
    warmup_steps = int(warmup_epochs * steps_per_epoch)
    warmup_fn = optax.linear_schedule(
        init_value=0.0,
        end_value=base_learning_rate,
        transition_steps=warmup_steps,
    )
    cosine_fn = optax.cosine_decay_schedule(
        init_value=base_learning_rate,
        decay_steps=max(int(num_epochs * steps_per_epoch) - warmup_steps, 1),
    )
    return optax.join_schedules(
        schedules=[warmup_fn, cosine_fn], boundaries=[warmup_steps]
    )


class TrainState(train_state.TrainState):
    """What the evaluation step and the checkpoint code read."""

    batch_stats: Any
    dynamic_scale: dynamic_scale_lib.DynamicScale


def eval_step(state: TrainState, batch):
    """The metrics of a batch in evaluation mode (a Flax ``TrainState``)."""
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    logits = state.apply_fn(
        variables, batch["image"], train=False, mutable=False
    )
    return compute_metrics(logits, batch["label"])


def create_input_iter(images, labels, batch_size, *, seed=0):
    """Dict batches ``{'image', 'label'}``, epoch after epoch."""
    for epoch in range(1_000_000):
        for x, y in data.batches(
            images, labels, batch_size, seed=seed, epoch=epoch
        ):
            yield {"image": x, "label": y}


def with_accumulation(config, accumulation: int):
    """`config` (a dict or ``None``) with k-step gradient accumulation on."""
    if accumulation == 1:
        return config
    config = {key: dict(value) for key, value in (config or {}).items()}
    config.setdefault("boost", {}).update(mode="manual", grad_accumulation=True)
    config.setdefault("grad_accumulation", {})["grad_accumulation_step"] = (
        accumulation
    )
    return config


class Result(NamedTuple):
    """What `train_and_evaluate` returns.

    Attributes:
      accuracy: the test-set accuracy of the final state.
      state: the final boostax `TrainState`.
      train_step: the `TrainStep` that trained it (for conversions).
      metrics: the last train step's metrics.
    """

    accuracy: float
    state: boostax.TrainState
    train_step: boostax.TrainStep
    metrics: Mapping[str, Any]


def train_and_evaluate(
    level: str = "O0",
    config: Mapping | None = None,
    *,
    steps: int | None = None,
    batch_size: int = 32,
    mesh: jax.sharding.Mesh | None = None,
    loss_scale: Any = None,
    accumulation: int = 1,
    learning_rate: float = 0.1,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    warmup_epochs: float = 0.5,
    num_epochs: float = 3.0,
    half_precision: bool = False,
    model_cls=ResNet4,
    seed: int = 0,
) -> Result:
    """Trains the model with boostax at `level`, then evaluates it.

    Args:
      level: ``"O0"``, ``"O1"`` or ``"O2"``.
      config: the boost config dict (MindSpore's ``boost_config_dict``).
      steps: train steps to run (micro-steps with accumulation); default:
        `num_epochs` epochs.
      batch_size: examples per train step (per micro-step).
      mesh: the devices to train data-parallel on (replaces ``pmap``).
      loss_scale: e.g. `boostax.DynamicLossScale` (replaces the example's
        ``DynamicScale``); overflowing steps are skipped.
      accumulation: micro-steps per optimizer update (switches on the
        config's ``grad_accumulation``).
      learning_rate: peak of the warm-up + cosine schedule.
      momentum: SGD's (Nesterov) momentum.
      weight_decay: the L2 penalty's factor (kernels only).
      warmup_epochs, num_epochs: the schedule's length, in epochs.
      half_precision: compute in ``float16``.
      model_cls: the model.
      seed: for the initial params and the batch order.

    Returns:
      A `Result`: the test accuracy, the final state, the train step and
      the last step's metrics.
    """
    digits = data.load_digits()
    model = create_model(model_cls=model_cls, half_precision=half_precision)

    steps_per_epoch = data.steps_per_epoch(len(digits.x_train), batch_size)
    # boostax: the schedule counts updates, one per `accumulation` steps.
    updates_per_epoch = max(steps_per_epoch // accumulation, 1)
    if steps is None:
        steps = int(steps_per_epoch * num_epochs)
    learning_rate_fn = create_learning_rate_fn(
        learning_rate,
        updates_per_epoch,
        warmup_epochs=warmup_epochs,
        num_epochs=num_epochs,
    )
    tx = optax.sgd(
        learning_rate=learning_rate_fn, momentum=momentum, nesterov=True
    )

    # boostax: one call replaces the pmapped train_step, its L2 term, the
    # gradient pmean, sync_batch_stats and DynamicScale.
    ts = boostax.auto_boost(
        level,
        with_accumulation(config, accumulation),
        optimizer=tx,
        model=model,
        loss=cross_entropy_loss,
        sample_inputs=digits.x_train[:1],
        mesh=mesh,
        loss_scale=loss_scale,  # boostax: was TrainState.dynamic_scale
        weight_decay=weight_decay,  # boostax: was the L2 term in the loss
        batch_keys=("image", "label"),  # boostax: dict batches
    )
    params, batch_stats = initialized(
        jax.random.PRNGKey(seed), IMAGE_SIZE, model
    )
    # boostax: was TrainState.create(...) and jax_utils.replicate.
    state = ts.init({"params": params, "batch_stats": batch_stats})

    train_iter = create_input_iter(
        digits.x_train, digits.y_train, batch_size, seed=seed
    )
    metrics: Mapping[str, Any] = {}
    for _, batch in zip(range(steps), train_iter, strict=False):
        state, metrics = ts(state, batch)  # boostax: was p_train_step

    # boostax: the Flax evaluation step reads a converted state (was
    # sync_batch_stats). One host batch here, so the step is jitted; the
    # pmapped version runs on `jax_utils.replicate(eval_state)` as well.
    eval_state = boostax.to_flax_train_state(
        ts, state, cls=TrainState, dynamic_scale=None
    )
    summary = jax.jit(eval_step)(
        eval_state, {"image": digits.x_test, "label": digits.y_test}
    )
    return Result(float(summary["accuracy"]), state, ts, metrics)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", default="O0", choices=("O0", "O1", "O2"))
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument(
        "--devices", type=int, default=1, help="mesh size (O2: 2 nodes)"
    )
    args = parser.parse_args(argv)
    steps_per_epoch = data.steps_per_epoch(1347, args.batch_size)
    updates = int(steps_per_epoch * args.epochs) // args.accumulation
    config = {}
    if args.level != "O0":  # 4 freeze groups: the tiny model has 7 chunks
        config["grad_freeze"] = {"param_groups": 4, "total_steps": updates}
    if args.level == "O2":
        config["common"] = {"device_number": max(args.devices // 2, 1)}
    mesh = None
    if args.devices > 1:
        mesh = jax.make_mesh((args.devices,), ("batch",))
    result = train_and_evaluate(
        args.level,
        config,
        batch_size=args.batch_size,
        mesh=mesh,
        accumulation=args.accumulation,
        num_epochs=args.epochs,
    )
    print(
        f"{args.level}: loss {float(result.metrics['loss']):.4f}, "
        f"test accuracy {result.accuracy:.4f}"
    )


if __name__ == "__main__":
    main()
