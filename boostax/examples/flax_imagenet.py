# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The Flax ImageNet example, unported, on the digits: what flax_port ports.

The structure, names and train/eval/checkpoint code of ``examples/imagenet``
in google/flax, ``train.py`` at commit
594b4529fa84bbbba5d5031d12968d355d03850f: a pmapped ``train_step`` with the
L2 penalty in its loss, the gradients ``pmean``'d and a ``DynamicScale``
branch; ``compute_metrics`` ``pmean``'d over ``'batch'``; the state
replicated (``jax_utils.replicate``), ``sync_batch_stats`` before
evaluation and checkpoints; ``save_checkpoint`` of the first replica; and
``train_and_evaluate`` evaluating at each epoch's end and returning the
final (replicated) ``TrainState``. The models section is ``models.py``'s
``ResNet`` and ``ResNetBlock``, the block's last BatchNorm initialised at
``scale_init=zeros_init()`` and every BatchNorm synchronised over the
``pmap`` axis (``axis_name='batch'``, as the example's later ``models.py``
has it; with it ``sync_batch_stats`` averages equal statistics).

What differs from the example, to run in seconds and in a test: the data
are scikit-learn's 8x8 digits in dict batches (``create_input_iter``), the
model is tiny (no max-pool stem), the config is a small dataclass (no
ml_collections), the evaluation summaries go to a `ScalarLog` (the
example's CLU writer), two blocks of ``train_and_evaluate`` are functions
here (`run_lengths`, `write_eval_summary`) that the port shares, and
``train_and_evaluate`` takes the ``devices`` to pmap over (the example uses
every local device), so that a test can run it on one device and on eight.
`boostax.examples.flax_port` is this script ported to boostax.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from absl import logging
from flax import jax_utils
from flax import linen as nn
from flax.training import checkpoints, common_utils, train_state
from flax.training import dynamic_scale as dynamic_scale_lib
from jax import lax

from boostax.examples import data

NUM_CLASSES = 10
IMAGE_SIZE = 8  # the digits' side
CHANNELS = 1

# ---------------------------------------------------------------------------
# The models file.
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
        # Each block starts as its shortcut: the branch's last BatchNorm
        # scales by zero at initialisation (as the example's models.py).
        y = self.norm(scale_init=nn.initializers.zeros_init())(
            self.conv(self.filters, (3, 3))(y)
        )
        if x.shape != y.shape:
            x = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(
                x
            )
            x = self.norm(name="norm_proj")(x)
        return self.act(x + y)


class BottleneckResNetBlock(nn.Module):
    """1x1, 3x3 and 1x1 convolutions (4x wider out) and a shortcut."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (1, 1))(x)
        y = self.act(self.norm()(y))
        y = self.conv(self.filters, (3, 3), self.strides)(y)
        y = self.act(self.norm()(y))
        y = self.conv(self.filters * 4, (1, 1))(y)
        # The branch's last BatchNorm starts at zero, as ResNetBlock's.
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(
                self.filters * 4, (1, 1), self.strides, name="conv_proj"
            )(residual)
            residual = self.norm(name="norm_proj")(residual)
        return self.act(residual + y)


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
# The block of the example's ResNet50 and deeper (its default model).
BottleneckResNet4 = functools.partial(
    ResNet, stage_sizes=(1, 1), block_cls=BottleneckResNetBlock
)


# ---------------------------------------------------------------------------
# The train file.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Config:
    """The example's config fields that these scripts read.

    Attributes:
      learning_rate: the base rate, scaled by ``batch_size / 256``.
      batch_size: examples per train step, over all devices.
      momentum: SGD's (Nesterov) momentum.
      num_epochs, warmup_epochs: the schedule's length, in epochs.
      num_train_steps: train steps to run (``<= 0``: `num_epochs` epochs).
      steps_per_eval: eval batches per evaluation (``-1``: the test set).
      log_every_steps: train-metric logging period (0: never).
      half_precision: compute in ``float16``.
      model: the model's name in this module.
      num_train_examples: the train examples used (0: all 1,347), so that
        an epoch, and the evaluation at its end, comes after a few steps.
      boost_level, boost_config: what the ported script passes to
        `boostax.auto_boost` (the unported one does not read them).
    """

    learning_rate: float = 0.1
    batch_size: int = 64
    momentum: float = 0.9
    num_epochs: float = 2.0
    warmup_epochs: float = 0.5
    num_train_steps: int = -1
    steps_per_eval: int = -1
    log_every_steps: int = 0
    half_precision: bool = False
    model: str = "ResNet4"
    num_train_examples: int = 0
    boost_level: str = "O0"
    boost_config: Any = None


class ScalarLog:
    """Keeps what the example writes with ``metric_writers`` (by step)."""

    def __init__(self):
        self.scalars: dict[int, dict[str, float]] = {}

    def write_scalars(self, step, scalars):
        self.scalars.setdefault(int(step), {}).update(
            {k: float(v) for k, v in scalars.items()}
        )

    def flush(self):
        pass


def create_model(*, model_cls, half_precision, **kwargs):
    model_dtype = jnp.float16 if half_precision else jnp.float32
    return model_cls(num_classes=NUM_CLASSES, dtype=model_dtype, **kwargs)


def initialized(key, image_size, model):
    input_shape = (1, image_size, image_size, CHANNELS)

    @jax.jit
    def init(*args):
        return model.init(*args)

    variables = init({"params": key}, jnp.ones(input_shape, model.dtype))
    return variables["params"], variables["batch_stats"]


def cross_entropy_loss(logits, labels):
    one_hot_labels = common_utils.onehot(labels, num_classes=NUM_CLASSES)
    xentropy = optax.softmax_cross_entropy(logits=logits, labels=one_hot_labels)
    return jnp.mean(xentropy)


def compute_metrics(logits, labels):
    loss = cross_entropy_loss(logits, labels)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    metrics = {
        "loss": loss,
        "accuracy": accuracy,
    }
    metrics = lax.pmean(metrics, axis_name="batch")
    return metrics


def create_learning_rate_fn(
    config: Config,
    base_learning_rate: float,
    steps_per_epoch: int,
):
    """Create learning rate schedule."""
    warmup_fn = optax.linear_schedule(
        init_value=0.0,
        end_value=base_learning_rate,
        transition_steps=config.warmup_epochs * steps_per_epoch,
    )
    cosine_epochs = max(config.num_epochs - config.warmup_epochs, 1)
    cosine_fn = optax.cosine_decay_schedule(
        init_value=base_learning_rate,
        decay_steps=cosine_epochs * steps_per_epoch,
    )
    schedule_fn = optax.join_schedules(
        schedules=[warmup_fn, cosine_fn],
        boundaries=[config.warmup_epochs * steps_per_epoch],
    )
    return schedule_fn


def train_step(state, batch, learning_rate_fn):
    """Perform a single training step."""

    def loss_fn(params):
        """loss function used for training."""
        logits, new_model_state = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            batch["image"],
            mutable=["batch_stats"],
        )
        loss = cross_entropy_loss(logits, batch["label"])
        weight_penalty_params = jax.tree_util.tree_leaves(params)
        weight_decay = 0.0001
        weight_l2 = sum(
            jnp.sum(x**2) for x in weight_penalty_params if x.ndim > 1
        )
        weight_penalty = weight_decay * 0.5 * weight_l2
        loss = loss + weight_penalty
        return loss, (new_model_state, logits)

    step = state.step
    dynamic_scale = state.dynamic_scale
    lr = learning_rate_fn(step)

    if dynamic_scale:
        grad_fn = dynamic_scale.value_and_grad(
            loss_fn, has_aux=True, axis_name="batch"
        )
        dynamic_scale, is_fin, aux, grads = grad_fn(state.params)
        # dynamic loss takes care of averaging gradients across replicas
    else:
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        aux, grads = grad_fn(state.params)
        # Re-use same axis_name as in the call to `pmap(...train_step...)`.
        grads = lax.pmean(grads, axis_name="batch")
    new_model_state, logits = aux[1]
    metrics = compute_metrics(logits, batch["label"])
    metrics["learning_rate"] = lr

    new_state = state.apply_gradients(
        grads=grads, batch_stats=new_model_state["batch_stats"]
    )
    if dynamic_scale:
        # if is_fin == False the gradients contain Inf/NaNs and optimizer
        # state and params should be restored (= skip this step).
        new_state = new_state.replace(
            opt_state=jax.tree_util.tree_map(
                functools.partial(jnp.where, is_fin),
                new_state.opt_state,
                state.opt_state,
            ),
            params=jax.tree_util.tree_map(
                functools.partial(jnp.where, is_fin),
                new_state.params,
                state.params,
            ),
            dynamic_scale=dynamic_scale,
        )
        metrics["scale"] = dynamic_scale.scale

    return new_state, metrics


def eval_step(state, batch):
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    logits = state.apply_fn(
        variables, batch["image"], train=False, mutable=False
    )
    return compute_metrics(logits, batch["label"])


def prepare_tf_data(xs, devices):
    """Reshape a host batch to ``(local_devices, device_batch, ...)``."""

    def _prepare(x):
        return x.reshape((len(devices), -1) + x.shape[1:])

    return jax.tree_util.tree_map(_prepare, xs)


def create_split(config: Config, train: bool):
    """The digits' train (shuffled, epoch after epoch) or test batches."""
    digits = data.load_digits()
    if not train:
        n = len(digits.x_test) // config.batch_size * config.batch_size
        while True:  # the example's eval split repeats
            for i in range(0, n, config.batch_size):
                s = slice(i, i + config.batch_size)
                yield {"image": digits.x_test[s], "label": digits.y_test[s]}
    x, y = digits.x_train, digits.y_train
    if config.num_train_examples:
        x, y = x[: config.num_train_examples], y[: config.num_train_examples]
    for epoch in range(1_000_000):
        for images, labels in data.batches(
            x, y, config.batch_size, seed=0, epoch=epoch
        ):
            yield {"image": images, "label": labels}


def num_examples(config: Config, split: str) -> int:
    digits = data.load_digits()
    if split == "validation":
        return len(digits.x_test)
    return config.num_train_examples or len(digits.x_train)


def create_input_iter(config, train, devices):
    it = map(
        functools.partial(prepare_tf_data, devices=devices),
        create_split(config, train),
    )
    it = jax_utils.prefetch_to_device(it, 2, devices)
    return it


class TrainState(train_state.TrainState):
    batch_stats: Any
    dynamic_scale: dynamic_scale_lib.DynamicScale


def restore_checkpoint(state, workdir):
    return checkpoints.restore_checkpoint(workdir, state)


def save_checkpoint(state, workdir):
    state = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))
    step = int(state.step)
    logging.info("Saving checkpoint step %d.", step)
    checkpoints.save_checkpoint_multiprocess(workdir, state, step, keep=3)


def sync_batch_stats(state, devices):
    """Sync the batch statistics across replicas."""
    # Each device has its own version of the running average batch
    # statistics and we sync them before evaluation.
    cross_replica_mean = jax.pmap(
        lambda x: lax.pmean(x, "x"), "x", devices=devices
    )
    return state.replace(batch_stats=cross_replica_mean(state.batch_stats))


def create_train_state(
    rng, config: Config, model, image_size, learning_rate_fn
):
    """Create initial training state."""
    dynamic_scale = None
    platform = jax.local_devices()[0].platform
    if config.half_precision and platform == "gpu":
        dynamic_scale = dynamic_scale_lib.DynamicScale()
    else:
        dynamic_scale = None

    params, batch_stats = initialized(rng, image_size, model)
    tx = optax.sgd(
        learning_rate=learning_rate_fn,
        momentum=config.momentum,
        nesterov=True,
    )
    state = TrainState.create(
        apply_fn=model.apply,
        params=params,
        tx=tx,
        batch_stats=batch_stats,
        dynamic_scale=dynamic_scale,
    )
    return state


def evaluate(p_eval_step, state, eval_iter, steps_per_eval):
    """The example's evaluation loop: the mean of the pmean'd metrics."""
    eval_metrics = []
    for _ in range(steps_per_eval):
        eval_batch = next(eval_iter)
        metrics = p_eval_step(state, eval_batch)
        eval_metrics.append(metrics)
    eval_metrics = common_utils.get_metrics(eval_metrics)
    return jax.tree_util.tree_map(lambda x: x.mean(), eval_metrics)


def run_lengths(config: Config) -> tuple[int, int, int, int]:
    """Steps per epoch, train steps, eval steps and steps per checkpoint."""
    steps_per_epoch = num_examples(config, "train") // config.batch_size
    if config.num_train_steps <= 0:
        num_steps = int(steps_per_epoch * config.num_epochs)
    else:
        num_steps = config.num_train_steps
    if config.steps_per_eval == -1:
        num_validation_examples = num_examples(config, "validation")
        steps_per_eval = num_validation_examples // config.batch_size
    else:
        steps_per_eval = config.steps_per_eval
    steps_per_checkpoint = steps_per_epoch * 10
    return steps_per_epoch, num_steps, steps_per_eval, steps_per_checkpoint


def write_eval_summary(writer, step, epoch, summary):
    logging.info(
        "eval epoch: %d, loss: %.4f, accuracy: %.2f",
        epoch,
        summary["loss"],
        summary["accuracy"] * 100,
    )
    writer.write_scalars(
        step + 1, {f"eval_{key}": val for key, val in summary.items()}
    )
    writer.flush()


def train_and_evaluate(
    config: Config,
    workdir: str,
    *,
    writer: ScalarLog | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> TrainState:
    """Execute model training and evaluation loop.

    Args:
      config: Hyperparameter configuration for training and evaluation.
      workdir: Directory where the checkpoints are written to.
      writer: where the train and eval summaries go.
      devices: the devices to pmap over (default: every local device).

    Returns:
      Final TrainState (replicated over `devices`).
    """
    writer = ScalarLog() if writer is None else writer
    devices = jax.local_devices() if devices is None else list(devices)

    rng = jax.random.key(0)

    image_size = IMAGE_SIZE

    if config.batch_size % len(devices) > 0:
        raise ValueError(
            "Batch size must be divisible by the number of devices"
        )

    train_iter = create_input_iter(config, True, devices)
    eval_iter = create_input_iter(config, False, devices)

    steps_per_epoch, num_steps, steps_per_eval, steps_per_checkpoint = (
        run_lengths(config)
    )

    base_learning_rate = config.learning_rate * config.batch_size / 256.0

    model_cls = globals()[config.model]
    model = create_model(
        model_cls=model_cls, half_precision=config.half_precision
    )

    learning_rate_fn = create_learning_rate_fn(
        config, base_learning_rate, steps_per_epoch
    )

    state = create_train_state(rng, config, model, image_size, learning_rate_fn)
    state = restore_checkpoint(state, workdir)
    # step_offset > 0 if restarting from checkpoint
    step_offset = int(state.step)
    state = jax_utils.replicate(state, devices)

    p_train_step = jax.pmap(
        functools.partial(train_step, learning_rate_fn=learning_rate_fn),
        axis_name="batch",
        devices=devices,
    )
    p_eval_step = jax.pmap(eval_step, axis_name="batch", devices=devices)

    train_metrics = []
    for step, batch in zip(
        range(step_offset, num_steps), train_iter, strict=False
    ):
        state, metrics = p_train_step(state, batch)

        if config.log_every_steps:
            train_metrics.append(metrics)
            if (step + 1) % config.log_every_steps == 0:
                train_metrics = common_utils.get_metrics(train_metrics)
                summary = {
                    f"train_{k}": v
                    for k, v in jax.tree_util.tree_map(
                        lambda x: x.mean(), train_metrics
                    ).items()
                }
                writer.write_scalars(step + 1, summary)
                train_metrics = []

        if (step + 1) % steps_per_epoch == 0:
            epoch = step // steps_per_epoch
            # sync batch statistics across replicas
            state = sync_batch_stats(state, devices)
            summary = evaluate(p_eval_step, state, eval_iter, steps_per_eval)
            write_eval_summary(writer, step, epoch, summary)
        if (step + 1) % steps_per_checkpoint == 0 or step + 1 == num_steps:
            state = sync_batch_stats(state, devices)
            save_checkpoint(state, workdir)

    return state
