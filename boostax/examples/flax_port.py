# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The Flax ImageNet example ported to boostax: the worked docs/porting_flax.md.

`boostax.examples.flax_imagenet` is the example as Flax writes it (google/flax
``examples/imagenet``, ``train.py`` at commit
594b4529fa84bbbba5d5031d12968d355d03850f, on the digits); this module is
that script after the guide's changes, and nothing else. What the port
leaves as it is, it imports from there: the models section, ``create_model``,
``initialized``, ``cross_entropy_loss``, ``compute_metrics`` (its
``lax.pmean`` included), ``create_learning_rate_fn``, ``eval_step``, the
``TrainState`` class, ``restore_checkpoint`` and the evaluation loop. What
it changes is below, every changed line marked ``# boostax:`` with the
number of its change in the guide (1 to 9). tests/flax_port_example_test.py
runs both on one device and on eight, at O0, O1 (also with gradient
accumulation) and O2, and with the optimizer state sharded (ZeRO-1), and
checks that the port reports the example's own eval numbers.

Run a level from the command line::

    python -m boostax.examples.flax_port --level O1 --epochs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import tempfile
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax
from absl import logging
from flax import jax_utils
from flax.training import checkpoints, common_utils

import boostax
from boostax.examples import flax_imagenet
from boostax.examples.flax_imagenet import (  # unchanged by the port
    CHANNELS,
    IMAGE_SIZE,
    Config,
    ScalarLog,
    TrainState,
    create_learning_rate_fn,
    create_model,
    create_split,
    cross_entropy_loss,
    eval_step,
    evaluate,
    initialized,
    num_examples,
    prepare_tf_data,
    restore_checkpoint,
    run_lengths,
    write_eval_summary,
)


def train_loss(logits, labels):  # boostax: the step's loss (change 1)
    """The loss and the example's train accuracy.

    boostax reports the loss itself (``metrics['loss']``, a reserved name);
    the example's other train metric comes back as the loss's aux output.
    """
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return cross_entropy_loss(logits, labels), {"accuracy": accuracy}


def create_input_iter(config, train, devices):
    if train:  # boostax: the host batch as it is, ts splits it (change 4)
        return create_split(config, train)
    it = map(
        functools.partial(prepare_tf_data, devices=devices),
        create_split(config, train),
    )
    it = jax_utils.prefetch_to_device(it, 2, devices)
    return it


def save_checkpoint(state, workdir):
    # boostax: no first replica to take: one pytree, sharded or not (change 7)
    step = int(state.step)
    logging.info("Saving checkpoint step %d.", step)
    checkpoints.save_checkpoint_multiprocess(workdir, state, step, keep=3)


def create_train_state(
    rng, config: Config, model, image_size, learning_rate_fn, mesh
):
    """Create the train step and its initial state.

    boostax: returns ``(ts, state)``, the step and its state (change 1).
    """
    platform = jax.local_devices()[0].platform
    if config.half_precision and platform == "gpu":
        # boostax: was DynamicScale() (change 6).
        loss_scale = boostax.DynamicLossScale(
            loss_scale_value=2.0**16, scale_window=2001
        )
    else:
        loss_scale = None

    params, batch_stats = initialized(rng, image_size, model)
    tx = optax.sgd(
        learning_rate=learning_rate_fn,
        momentum=config.momentum,
        nesterov=True,
    )
    ts = boostax.auto_boost(  # boostax: was TrainState.create (change 1)
        config.boost_level,  # boostax: the config's new fields (change 8)
        config.boost_config,  # boostax: a ConfigDict as it is (change 8)
        optimizer=tx,
        model=model,
        loss=train_loss,
        sample_inputs=jnp.ones(
            (1, image_size, image_size, CHANNELS), model.dtype
        ),
        mesh=mesh,  # boostax: the devices (change 4)
        loss_scale=loss_scale,  # boostax: was dynamic_scale (change 6)
        options=boostax.StepOptions(
            has_aux=True,
            weight_decay=0.0001,  # boostax: was the L2 term (change 2)
            batch_keys=("image", "label"),  # boostax: dict batches (change 3)
        ),
    )
    # boostax: the state of the variables (fresh: LessBN's init; change 1)
    return ts, ts.init({"params": params, "batch_stats": batch_stats})


def accumulation_steps(config: Config) -> int:  # boostax: k (change 5)
    """Micro-steps per optimizer update (1 without gradient accumulation).

    ``k``, read from the boost config as the step reads it: the level's
    defaults, then ``boost.mode`` and the sections (a ``ConfigDict`` or a
    dict).
    """
    boost_config = boostax.BoostConfig.from_dict(
        config.boost_config, level=config.boost_level
    )
    if not boost_config.is_enabled("grad_accumulation"):
        return 1
    return boost_config.grad_accumulation.grad_accumulation_step


def train_and_evaluate(
    config: Config,
    workdir: str,
    *,
    writer: ScalarLog | None = None,
    devices: Sequence[jax.Device] | None = None,
):
    """Execute model training and evaluation loop, with boostax.

    Args:
      config: Hyperparameter configuration for training and evaluation;
        ``boost_level`` and ``boost_config`` go to `boostax.auto_boost`.
      workdir: Directory where the checkpoints are written to.
      writer: where the train and eval summaries go.
      devices: the devices to train on (default: every local device).

    Returns:
      ``(ts, state)``: the `boostax.TrainStep` and its final state, one
      pytree with no replica axis. boostax: the example returns its final
      ``TrainState``, replicated over the devices; ``to_flax_train_state(ts,
      state, cls=TrainState, dynamic_scale=None)`` gives it, unreplicated
      (change 9).
    """
    writer = ScalarLog() if writer is None else writer
    devices = jax.local_devices() if devices is None else list(devices)
    # boostax: a mesh of the devices replaces pmap (change 4).
    mesh = jax.make_mesh((len(devices),), ("batch",), devices=devices)

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

    model_cls = getattr(flax_imagenet, config.model)
    model = create_model(
        model_cls=model_cls, half_precision=config.half_precision
    )

    # boostax: the schedule counts optimizer updates (change 5).
    accumulation = accumulation_steps(config)
    learning_rate_fn = create_learning_rate_fn(
        config, base_learning_rate, steps_per_epoch // accumulation
    )

    ts, state = create_train_state(
        rng, config, model, image_size, learning_rate_fn, mesh
    )
    state = restore_checkpoint(state, workdir)
    # step_offset > 0 if restarting from checkpoint
    step_offset = int(state.step)
    # boostax: no replicate and no pmapped train step (change 1)

    p_eval_step = jax.pmap(eval_step, axis_name="batch", devices=devices)

    train_metrics = []
    for step, batch in zip(
        range(step_offset, num_steps), train_iter, strict=False
    ):
        # boostax: was p_train_step (change 1)
        state, metrics = ts(state, batch)

        if config.log_every_steps:
            # boostax: the rate on the host (change 1).
            lr = learning_rate_fn(step // accumulation)
            train_metrics.append({**metrics, "learning_rate": lr})
            if (step + 1) % config.log_every_steps == 0:
                # boostax: scalars, stacked (was get_metrics; change 4)
                train_metrics = common_utils.stack_forest(
                    jax.device_get(train_metrics)
                )
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
            # boostax: the Flax TrainState the eval step reads, replicated
            # as the example's state is (was sync_batch_stats; change 7)
            eval_state = jax_utils.replicate(
                boostax.to_flax_train_state(
                    ts, state, cls=TrainState, dynamic_scale=None
                ),
                devices,
            )
            summary = evaluate(
                p_eval_step, eval_state, eval_iter, steps_per_eval
            )
            write_eval_summary(writer, step, epoch, summary)
        if (step + 1) % steps_per_checkpoint == 0 or step + 1 == num_steps:
            save_checkpoint(state, workdir)  # boostax: no sync (change 7)

    return ts, state  # boostax: the step and its state (change 9)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", default="O0", choices=("O0", "O1", "O2"))
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    steps_per_epoch = num_examples(Config(), "train") // Config().batch_size
    steps = int(steps_per_epoch * args.epochs)
    boost_config: dict[str, dict[str, int]] | None = None
    if args.level != "O0":
        boost_config = {
            "grad_freeze": {"param_groups": 4, "total_steps": steps}
        }
        if args.level == "O2":
            boost_config["common"] = {
                "device_number": max(jax.local_device_count() // 2, 1)
            }
    config = dataclasses.replace(
        Config(),
        num_epochs=args.epochs,
        boost_level=args.level,
        boost_config=boost_config,
    )
    writer = ScalarLog()
    train_and_evaluate(
        config, args.workdir or tempfile.mkdtemp(), writer=writer
    )
    last = writer.scalars[max(writer.scalars)]
    print(
        f"{args.level}: eval loss {last['eval_loss']:.4f}, "
        f"eval accuracy {last['eval_accuracy']:.4f}"
    )


if __name__ == "__main__":
    main()
