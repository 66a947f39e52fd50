# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The Flax lm1b example ported to boostax: the worked docs/porting_lm1b.md.

`boostax.examples.flax_lm1b` is the example as Flax writes it (google/flax
``examples/lm1b``, on a tiny generated language); this module is that
script after the guide's changes, and nothing else. What the port leaves as
it is, it imports from there (and the models and the sampler from
`boostax.examples.flax_lm1b_models`): ``predict_step``,
``generate_prediction``, the loss and accuracy functions, the schedule, the
optimizer, the model configs and initial variables, the data. What it
changes is below, each change marked ``# boostax:`` with its number in the
guide. tests/flax_lm1b_port_test.py checks the port against the example:
its step bit for bit at O0, its evaluation and samples, the
sequence-length warm-up and a sharded optimizer state on eight devices.

Run it from the command line::

    python -m boostax.examples.flax_lm1b_port --warmup --steps 200
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import jax_utils
from flax.training import common_utils
from jax import random

import boostax
from boostax.examples import flax_lm1b_models as models
from boostax.examples import flax_lm1b_models as temperature_sampler
from boostax.examples.flax_lm1b import (  # unchanged by the port
    Config,
    SummaryLog,
    compute_weighted_accuracy,
    compute_weighted_cross_entropy,
    create_learning_rate_schedule,
    create_model_configs,
    create_optimizer,
    decode_tokens,
    encode_prompts,
    generate_prediction,
    get_datasets,
    initial_variables,
    predict_step,
    write_eval_summary,
    write_train_summary,
)

# boostax: the model's positional inputs, then its targets: the inputs,
# which it shifts itself (change 1).
TRAIN_KEYS = ("inputs", "inputs_position", "inputs_segmentation")
BATCH_KEYS = (TRAIN_KEYS, "inputs")


def train_loss(logits, targets, label_smoothing=0.0):
    """train_step's loss, and compute_metrics' sums (boostax: change 2).

    The targets are the inputs (``batch_keys``' targets key); the sums come
    back as the loss's aux output, without ``psum``: the step averages
    them over the devices.
    """
    weights = jnp.where(targets > 0, 1, 0).astype(jnp.float32)
    loss, weight_sum = compute_weighted_cross_entropy(
        logits, targets, weights, label_smoothing
    )
    acc, _ = compute_weighted_accuracy(logits, targets, weights)
    mean_loss = loss / weight_sum
    # boostax: 'loss' is the step's own metric (mean_loss): the sum is
    # 'loss_sum' (change 2).
    return mean_loss, {
        "loss_sum": loss,
        "accuracy": acc,
        "denominator": weight_sum,
    }


def create_train_step(
    config: Config, train_config, learning_rate_fn, variables, rng, mesh
):
    """The train step and its state (boostax: change 1, was
    ``TrainState.create``, ``replicate`` and the pmapped ``train_step``)."""
    boost_config = dict(config.boost_config or {})
    # boostax: ZeRO-1 is the config's (change 4).
    boost_config["data_parallel"] = {
        **boost_config.get("data_parallel", {}),
        "shard_optimizer_state": config.shard_optimizer_state,
    }
    ts = boostax.auto_boost(
        config.boost_level,
        boost_config,
        optimizer=create_optimizer(config, learning_rate_fn),
        model=models.TransformerLM(train_config),
        loss=train_loss,
        sample_inputs=tuple(
            jnp.ones((1, config.max_target_length), jnp.int32)
            for _ in TRAIN_KEYS
        ),
        mesh=mesh,  # boostax: was pmap (change 4)
        options=boostax.StepOptions(
            has_aux=True,
            batch_keys=BATCH_KEYS,
            # boostax: each step's dropout key from `rng` (change 3).
            rng_collections=("dropout",),
        ),
    )
    return ts, ts.init(variables, rng=rng)


def eval_step(ts, state, batch, config, label_smoothing=0.0):
    """Calculate evaluation metrics on a batch (boostax: change 6)."""
    inputs = batch["inputs"]
    weights = jnp.where(inputs > 0, 1.0, 0.0)
    # boostax: the trained params in the eval model (deterministic=True).
    logits = ts.predict(state, (inputs,), model=models.TransformerLM(config))
    loss, weight_sum = compute_weighted_cross_entropy(
        logits, inputs, weights, label_smoothing
    )
    acc, _ = compute_weighted_accuracy(logits, inputs, weights)
    # boostax: the whole batch's sums, no psum (change 6).
    return {"loss": loss, "accuracy": acc, "denominator": weight_sum}


def evaluate(*, p_eval_step, state, eval_ds, num_eval_steps: int):
    """Evaluate the target an return a dictionary with the metrics."""
    logging.info("Gathering evaluation metrics.")
    eval_metrics = []
    eval_iter = iter(eval_ds)
    for _, eval_batch in zip(range(num_eval_steps), eval_iter, strict=False):
        # boostax: the host batch as it is, no shard (change 6).
        metrics = p_eval_step(state, eval_batch)
        eval_metrics.append(metrics)
    # boostax: one copy of each metric (was get_metrics; change 6).
    eval_metrics = common_utils.stack_forest(jax.device_get(eval_metrics))
    eval_metrics_sums = jax.tree_util.tree_map(jnp.sum, eval_metrics)
    eval_denominator = eval_metrics_sums.pop("denominator")
    eval_summary = jax.tree_util.tree_map(
        lambda x: x / eval_denominator, eval_metrics_sums
    )
    return eval_summary


def train_and_evaluate(
    config: Config,
    workdir: str,
    *,
    writer: SummaryLog | None = None,
    devices: Sequence[jax.Device] | None = None,
):
    """Runs a training and evaluation loop, with boostax.

    Args:
      config: Configuration to use; ``boost_level`` and ``boost_config``
        go to `boostax.auto_boost`, ``shard_optimizer_state`` into the
        config's ``data_parallel`` section.
      workdir: Working directory (unused: no checkpoints here).
      writer: where the train and eval summaries and the samples go.
      devices: the devices to train on (default: every local device).

    Returns:
      ``(train_step, state)``: the `boostax.TrainStep` and its final state.
    """
    del workdir
    writer = SummaryLog() if writer is None else writer
    devices = jax.local_devices() if devices is None else list(devices)
    n_devices = len(devices)
    # boostax: a mesh of the devices replaces pmap (change 4).
    mesh = jax.make_mesh((n_devices,), ("batch",), devices=devices)

    logging.info("Initializing dataset.")
    train_ds, eval_ds = get_datasets(n_devices=n_devices, config=config)
    train_iter = iter(train_ds)
    vocab_size = config.vocab_size
    eos_id = temperature_sampler.EOS_ID

    tokenized_prompts = encode_prompts(config)

    logging.info("Initializing model, optimizer, and step functions.")
    train_config, eval_config, predict_config = create_model_configs(
        config, vocab_size
    )

    start_step = 0
    rng = jax.random.PRNGKey(config.seed)
    rng, init_rng = jax.random.split(rng)
    rng, inference_rng = random.split(rng)

    learning_rate_fn = create_learning_rate_schedule(
        learning_rate=config.learning_rate, warmup_steps=config.warmup_steps
    )
    # boostax: one base key for dropout; the step folds in the step, the
    # device and the stream (was split(rng, n_devices); change 3).
    ts, state = create_train_step(
        config,
        train_config,
        learning_rate_fn,
        initial_variables(init_rng, config, eval_config),
        rng,
        mesh,
    )
    del rng

    # boostax: the eval step is the trained state's predict (change 6).
    p_eval_step = functools.partial(eval_step, ts, config=eval_config)
    p_pred_step = jax.pmap(
        functools.partial(
            predict_step,
            config=predict_config,
            temperature=config.sampling_temperature,
            top_k=config.sampling_top_k,
        ),
        axis_name="batch",
        static_broadcasted_argnums=(3, 4),
        devices=devices,
    )

    logging.info("Starting training loop.")
    train_metrics = []
    for step in range(start_step, config.num_train_steps):
        is_last_step = step == config.num_train_steps - 1

        # boostax: the host batch as it is: the step splits it (change 4).
        batch = jax.tree_util.tree_map(np.asarray, next(train_iter))
        state, metrics = ts(state, batch)  # boostax: was p_train_step (1)
        # boostax: the schedule's rate, on the host (change 5).
        train_metrics.append(
            {
                "loss": metrics["loss_sum"],
                "accuracy": metrics["accuracy"],
                "denominator": metrics["denominator"],
                "learning_rate": learning_rate_fn(jnp.asarray(step)),
            }
        )

        if step % config.eval_every_steps == 0 or is_last_step:
            logging.info("Gathering training metrics.")
            # boostax: scalar metrics, stacked (was get_metrics; change 5).
            train_metrics = common_utils.stack_forest(
                jax.device_get(train_metrics)
            )
            write_train_summary(writer, step, train_metrics)
            train_metrics = []

            eval_results = evaluate(
                p_eval_step=p_eval_step,
                state=state,
                eval_ds=eval_ds,
                num_eval_steps=config.num_eval_steps,
            )
            write_eval_summary(writer, step, eval_results)

            exemplars = generate_prediction(
                p_pred_step=p_pred_step,
                # boostax: the trained params, replicated for the pmapped
                # sampler (change 7).
                params=jax_utils.replicate(
                    ts.variables(state)["params"], devices
                ),
                tokenized_prompts=tokenized_prompts,
                eos_id=eos_id,
                inference_rng=inference_rng,
                decode_tokens=decode_tokens,
                max_predict_length=config.max_predict_length,
                n_devices=n_devices,
            )
            writer.write_texts(step, {"samples": exemplars})

    return ts, state


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--warmup",
        action="store_true",
        help="the sequence-length warm-up (boostax.text_recipe)",
    )
    parser.add_argument(
        "--shard-optimizer-state", action="store_true", help="ZeRO-1"
    )
    args = parser.parse_args(argv)
    config = dataclasses.replace(
        Config(),
        num_train_steps=args.steps,
        boost_level="O1" if args.warmup else "O0",
        # boostax: sequence-length warm-up (change 8).
        boost_config=boostax.text_recipe(args.steps) if args.warmup else None,
        shard_optimizer_state=args.shard_optimizer_state,
    )
    writer = SummaryLog()
    train_and_evaluate(config, "", writer=writer)
    last = max(writer.scalars)
    print(
        f"step {last}: train loss {writer.scalars[last]['train_loss']:.4f}, "
        f"eval loss {writer.scalars[last]['eval_loss']:.4f}, "
        f"sample: {writer.texts[last]['samples'].strip()}"
    )


if __name__ == "__main__":
    main()
