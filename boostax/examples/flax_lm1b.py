# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The Flax lm1b example, unported, on a tiny language: what flax_lm1b_port
ports.

The structure, names and train/eval/sampling code of ``examples/lm1b`` in
google/flax: ``train.py`` read at commit
0740ef63c4eae05de58d80f85a05fc23bb8b3261 (a pmapped ``train_step``: the
token-weighted cross-entropy ``loss / weight_sum``, the dropout key
``fold_in(dropout_rng, state.step)``, the gradients ``pmean``'d and the
metrics' sums ``psum``'d over ``'batch'``; ``eval_step`` on the
``deterministic`` eval config; ``predict_step``'s temperature sampling from
the ``cache`` collection of the ``decode`` config). Its ``models.py`` and
``temperature_sampler.py`` are `boostax.examples.flax_lm1b_models`,
imported under both names.

What differs from the example, to run in seconds and in a test: the data
are generated with a fixed seed (`get_datasets`: sentences of a tiny
language whose next token is a function of the last one, packed into rows
of ``inputs``, ``inputs_position`` and ``inputs_segmentation`` for
training, one sentence a row for evaluation), prompts are token ids (no
SentencePiece), the model is tiny and float32, the config is a small
dataclass (no ml_collections), the summaries go to a `SummaryLog` (the
example's CLU writer), checkpoints are left out (docs/porting_flax.md
ports the ImageNet example's), a few blocks of ``train_and_evaluate`` are
functions here (`create_model_configs`, `initial_variables`,
`create_optimizer`, `create_train_state`, `write_train_summary`,
`write_eval_summary`), ``train_and_evaluate`` takes the ``devices`` to pmap
over (the example uses every local device), so that a test can run it on
one device and on eight, and `decode_tokens` keeps every id of a sample
without EOS (the example's keeps the first only).
`boostax.examples.flax_lm1b_port` is this script ported to boostax.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import jax_utils
from flax import linen as nn
from flax.training import common_utils, train_state
from jax import random

from boostax.examples import flax_lm1b_models as models
from boostax.examples import flax_lm1b_models as temperature_sampler

# ---------------------------------------------------------------------------
# The input pipeline: a tiny language, generated.
# ---------------------------------------------------------------------------


def next_token(token: int, vocab_size: int) -> int:
    """The language's rule: each token after a sentence's first one."""
    return 3 + (5 * (token - 3) + 1) % (vocab_size - 3)


def sentences(vocab_size: int, seed: int) -> Iterator[np.ndarray]:
    """Sentences of 3 to 12 tokens and an EOS, endlessly (ids 0 to 2 are
    padding, unused and EOS): a random first token, then the rule."""
    rng = np.random.default_rng(seed)
    while True:
        tokens = [int(rng.integers(3, vocab_size))]
        for _ in range(int(rng.integers(2, 12))):
            tokens.append(next_token(tokens[-1], vocab_size))
        yield np.array(tokens + [temperature_sampler.EOS_ID], np.int32)


def pack_examples(source: Iterator[np.ndarray], rows: int, length: int):
    """`rows` packed rows of `length` positions: whole sentences while they
    fit, the rest padding (lm1b's ``pack_dataset``)."""
    batch = {
        k: np.zeros((rows, length), np.int32)
        for k in ("inputs", "inputs_position", "inputs_segmentation")
    }
    pending = None
    for row in range(rows):
        start, segment = 0, 1
        while True:
            sentence = next(source) if pending is None else pending
            if start + len(sentence) > length:
                pending = sentence
                break
            pending = None
            end = start + len(sentence)
            batch["inputs"][row, start:end] = sentence
            batch["inputs_position"][row, start:end] = np.arange(len(sentence))
            batch["inputs_segmentation"][row, start:end] = segment
            start, segment = end, segment + 1
    return batch


def get_datasets(n_devices: int, config: Config):
    """The train batches (packed, endless) and the eval batches (a list of
    ``num_eval_steps``, one sentence a row, unpacked)."""
    batch_size = config.per_device_batch_size * n_devices
    eval_batch_size = config.eval_per_device_batch_size * n_devices

    def train_ds():
        source = sentences(config.vocab_size, config.seed)
        while True:
            yield pack_examples(source, batch_size, config.max_target_length)

    source = sentences(config.vocab_size, config.seed + 1)
    eval_ds = []
    for _ in range(config.num_eval_steps):
        inputs = np.zeros(
            (eval_batch_size, config.max_eval_target_length), np.int32
        )
        for row in inputs:
            sentence = next(source)
            row[: len(sentence)] = sentence
        eval_ds.append({"inputs": inputs})
    return train_ds(), eval_ds


# ---------------------------------------------------------------------------
# The train file.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Config:
    """The example's config fields that these scripts read (its names).

    Attributes:
      vocab_size: token ids (0 is padding, 2 is EOS).
      per_device_batch_size, eval_per_device_batch_size: rows per device.
      sampling_temperature, sampling_top_k: the sampler's.
      num_train_steps, num_eval_steps: steps to run, eval batches.
      eval_every_steps: evaluation (and sampling) period; the first step
        and the last are evaluated too.
      learning_rate, warmup_steps: the rsqrt schedule's.
      label_smoothing, weight_decay: the loss's and AdamW's.
      max_target_length, max_eval_target_length, max_predict_length: the
        lengths of train rows, eval rows and samples.
      num_layers, qkv_dim, emb_dim, mlp_dim, num_heads: the model's sizes.
      dropout_rate, attention_dropout_rate: dropout.
      seed: the PRNG and data seed.
      prompts: the sampling prompt, as token ids.
      boost_level, boost_config, shard_optimizer_state: what the ported
        script passes to `boostax.auto_boost` (the unported one does not
        read them).
    """

    vocab_size: int = 32
    per_device_batch_size: int = 8
    eval_per_device_batch_size: int = 8
    sampling_temperature: float = 0.6
    sampling_top_k: int = 20
    num_train_steps: int = 200
    num_eval_steps: int = 2
    eval_every_steps: int = 50
    learning_rate: float = 0.01
    warmup_steps: int = 20
    label_smoothing: float = 0.0
    weight_decay: float = 0.1
    max_target_length: int = 32
    max_eval_target_length: int = 32
    max_predict_length: int = 16
    logits_via_embedding: bool = False
    num_layers: int = 2
    qkv_dim: int = 32
    emb_dim: int = 32
    mlp_dim: int = 64
    num_heads: int = 2
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    seed: int = 0
    prompts: tuple[int, ...] = (5,)
    boost_level: str = "O0"
    boost_config: Any = None
    shard_optimizer_state: bool = False


class SummaryLog:
    """Keeps what the example writes with ``metric_writers``: scalars and
    texts, by step."""

    def __init__(self):
        self.scalars: dict[int, dict[str, float]] = {}
        self.texts: dict[int, dict[str, str]] = {}

    def write_scalars(self, step, scalars):
        self.scalars.setdefault(int(step), {}).update(
            {k: float(v) for k, v in scalars.items()}
        )

    def write_texts(self, step, texts):
        self.texts.setdefault(int(step), {}).update(texts)


def rsqrt_schedule(init_value: float, shift: int = 0):
    """Applies a reverse square-root schedule."""

    def schedule(count):
        return init_value * (count + shift) ** -0.5 * shift**0.5

    return schedule


def create_learning_rate_schedule(learning_rate: float, warmup_steps: int):
    """Creates a rsqrt schedule with linear warmup."""
    return optax.join_schedules(
        [
            optax.linear_schedule(
                init_value=0,
                end_value=learning_rate,
                transition_steps=warmup_steps,
            ),
            rsqrt_schedule(init_value=learning_rate, shift=warmup_steps),
        ],
        boundaries=[warmup_steps],
    )


def compute_weighted_cross_entropy(
    logits, targets, weights=None, label_smoothing=0.0
):
    """Compute weighted cross entropy and entropy for log probs and targets.

    Returns:
      Tuple of scalar loss and batch normalizing factor.
    """
    if logits.ndim != targets.ndim + 1:
        raise ValueError(
            f"Incorrect shapes. Got shape {logits.shape} logits and "
            f"{targets.shape} targets"
        )
    vocab_size = logits.shape[-1]
    confidence = 1.0 - label_smoothing
    low_confidence = (1.0 - confidence) / (vocab_size - 1)
    normalizing_constant = -(
        confidence * jnp.log(confidence)
        + (vocab_size - 1) * low_confidence * jnp.log(low_confidence + 1e-20)
    )
    soft_targets = common_utils.onehot(
        targets, vocab_size, on_value=confidence, off_value=low_confidence
    )

    loss = -jnp.sum(soft_targets * nn.log_softmax(logits), axis=-1)
    loss = loss - normalizing_constant

    normalizing_factor = np.prod(targets.shape)
    if weights is not None:
        loss = loss * weights
        normalizing_factor = weights.sum()

    return loss.sum(), normalizing_factor


def compute_weighted_accuracy(logits, targets, weights=None):
    """Compute weighted accuracy for log probs and targets."""
    if logits.ndim != targets.ndim + 1:
        raise ValueError(
            f"Incorrect shapes. Got shape {logits.shape} logits and "
            f"{targets.shape} targets"
        )
    loss = jnp.equal(jnp.argmax(logits, axis=-1), targets)
    normalizing_factor = np.prod(logits.shape[:-1])
    if weights is not None:
        loss = loss * weights
        normalizing_factor = weights.sum()

    return loss.sum(), normalizing_factor


def compute_metrics(logits, labels, weights, label_smoothing=0.0):
    """Compute summary metrics."""
    loss, weight_sum = compute_weighted_cross_entropy(
        logits, labels, weights, label_smoothing
    )
    acc, _ = compute_weighted_accuracy(logits, labels, weights)
    metrics = {
        "loss": loss,
        "accuracy": acc,
        "denominator": weight_sum,
    }
    metrics = jax.lax.psum(metrics, axis_name="batch")
    return metrics


# Primary training / eval / decode step functions.
# ---------------------------------------------------------------------------


def train_step(
    state,
    batch,
    config,
    learning_rate_fn,
    label_smoothing=0.0,
    dropout_rng=None,
):
    """Perform a single training step."""
    # X_position and X_segmentation are needed only when using "packed
    # examples" where multiple sequences are packed into the same example
    # with this metadata.
    train_keys = ["inputs", "inputs_position", "inputs_segmentation"]
    (inputs, inputs_positions, inputs_segmentation) = (
        batch.get(k, None) for k in train_keys
    )

    weights = jnp.where(inputs > 0, 1, 0).astype(jnp.float32)

    dropout_rng = jax.random.fold_in(dropout_rng, state.step)

    def loss_fn(params):
        """loss function used for training."""
        logits = models.TransformerLM(config).apply(
            {"params": params},
            inputs,
            inputs_positions=inputs_positions,
            inputs_segmentation=inputs_segmentation,
            rngs={"dropout": dropout_rng},
        )

        loss, weight_sum = compute_weighted_cross_entropy(
            logits, inputs, weights, label_smoothing
        )
        mean_loss = loss / weight_sum
        return mean_loss, logits

    step = state.step
    lr = learning_rate_fn(step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (_, logits), grads = grad_fn(state.params)
    grads = jax.lax.pmean(grads, "batch")
    new_state = state.apply_gradients(grads=grads)
    metrics = compute_metrics(logits, inputs, weights)
    metrics["learning_rate"] = lr

    return new_state, metrics


def eval_step(params, batch, config, label_smoothing=0.0):
    """Calculate evaluation metrics on a batch."""
    inputs = batch["inputs"]
    weights = jnp.where(inputs > 0, 1.0, 0.0)
    logits = models.TransformerLM(config).apply({"params": params}, inputs)

    return compute_metrics(logits, inputs, weights, label_smoothing)


def predict_step(
    inputs, params, rngkey, eos_id, max_decode_len, config, temperature, top_k
):
    """Predict language model on a batch."""
    target_shape = (inputs.shape[0], max_decode_len) + inputs.shape[2:]
    initial_variables = models.TransformerLM(config).init(
        jax.random.PRNGKey(0), jnp.ones(target_shape, config.dtype)
    )
    cache = initial_variables["cache"]

    def tokens_ids_to_logits(flat_ids, flat_cache):
        """Token slice to logits from decoder model."""
        # --> [batch * beam, 1, vocab]
        flat_logits, new_vars = models.TransformerLM(config).apply(
            {"params": params, "cache": flat_cache},
            flat_ids,
            mutable=["cache"],
        )
        new_flat_cache = new_vars["cache"]
        # Remove singleton sequence-length dimension:
        # [batch, 1, vocab] --> [batch, vocab]
        flat_logits = flat_logits.squeeze(axis=1)
        return flat_logits, new_flat_cache

    seqs = temperature_sampler.temperature_sample(
        inputs,
        cache,
        tokens_ids_to_logits,
        rngkey,
        temperature=temperature,
        topk=top_k,
        eos_token=eos_id,
    )

    return seqs


# Utils for prediction
# ---------------------------------------------------------------------------


def pad_examples(x, desired_batch_size):
    """Expand batch to desired size by repeating last slice."""
    batch_pad = desired_batch_size - x.shape[0]
    return np.concatenate([x, np.tile(x[-1], (batch_pad, 1))], axis=0)


def tohost(x):
    """Collect batches from all devices to host and flatten batch dims."""
    n_device, n_batch, *remaining_dims = x.shape
    return np.array(x).reshape((n_device * n_batch,) + tuple(remaining_dims))


def shard(xs, n_devices):
    """`common_utils.shard` for `n_devices` (the example: every device)."""
    return jax.tree_util.tree_map(
        lambda x: x.reshape((n_devices, -1) + x.shape[1:]), xs
    )


def evaluate(*, p_eval_step, params, eval_ds, num_eval_steps: int, n_devices):
    """Evaluate the target an return a dictionary with the metrics."""
    logging.info("Gathering evaluation metrics.")
    eval_metrics = []
    eval_iter = iter(eval_ds)
    for _, eval_batch in zip(range(num_eval_steps), eval_iter, strict=False):
        eval_batch = shard(eval_batch, n_devices)
        metrics = p_eval_step(params, eval_batch)
        eval_metrics.append(metrics)
    eval_metrics = common_utils.get_metrics(eval_metrics)
    eval_metrics_sums = jax.tree_util.tree_map(jnp.sum, eval_metrics)
    eval_denominator = eval_metrics_sums.pop("denominator")
    eval_summary = jax.tree_util.tree_map(
        lambda x: x / eval_denominator, eval_metrics_sums
    )
    return eval_summary


def generate_prediction(
    *,
    p_pred_step,
    params,
    tokenized_prompts,
    eos_id,
    inference_rng,
    decode_tokens,
    max_predict_length: int,
    n_devices: int,
):
    """Generate text from the prompt."""
    logging.info("Generating text.")
    predictions = []
    # Use batch of prompts provided by user.
    for pred_batch in jnp.array_split(
        tokenized_prompts, int(np.ceil(len(tokenized_prompts) / n_devices))
    ):
        cur_pred_batch_size = pred_batch.shape[0]
        if cur_pred_batch_size % n_devices:
            padded_size = int(
                np.ceil(cur_pred_batch_size / n_devices) * n_devices
            )
            pred_batch = jax.tree_util.tree_map(
                lambda x, n=padded_size: pad_examples(x, n), pred_batch
            )
        pred_batch = shard(pred_batch, n_devices)
        inference_rng, sub_rng = random.split(inference_rng)
        inference_rngs = random.split(sub_rng, n_devices)

        predicted = p_pred_step(
            pred_batch, params, inference_rngs, eos_id, max_predict_length
        )
        predicted = tohost(predicted)
        # Iterate through non-padding examples of batch.
        for s in predicted[:cur_pred_batch_size]:
            prediction = decode_tokens(s)
            logging.info("Sample: %s", str(prediction))
            predictions.append(prediction)

    exemplars = ""
    for prediction in predictions:
        exemplars += f"{prediction}\n\n"
    return exemplars


def create_model_configs(config: Config, vocab_size: int):
    """The train, eval and predict model configs (``train.py``'s)."""
    train_config = models.TransformerConfig(
        vocab_size=vocab_size,
        output_vocab_size=vocab_size,
        logits_via_embedding=config.logits_via_embedding,
        dtype=jnp.float32,
        emb_dim=config.emb_dim,
        num_heads=config.num_heads,
        num_layers=config.num_layers,
        qkv_dim=config.qkv_dim,
        mlp_dim=config.mlp_dim,
        max_len=max(config.max_target_length, config.max_eval_target_length),
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        deterministic=False,
        decode=False,
        kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6),
    )
    # (flax.struct.dataclass's `replace`, which mypy does not see)
    eval_config = train_config.replace(  # type: ignore[attr-defined]
        deterministic=True
    )
    predict_config = train_config.replace(  # type: ignore[attr-defined]
        deterministic=True, decode=True
    )
    return train_config, eval_config, predict_config


def initial_variables(init_rng, config: Config, eval_config):
    """The model's variables, from its eval config (``train.py``'s)."""
    input_shape = (config.per_device_batch_size, config.max_target_length)
    m = models.TransformerLM(eval_config)
    return jax.jit(m.init)(init_rng, jnp.ones(input_shape, jnp.float32))


def create_optimizer(config: Config, learning_rate_fn):
    return optax.adamw(
        learning_rate_fn,
        b1=0.9,
        b2=0.98,
        eps=1e-9,
        weight_decay=config.weight_decay,
    )


def create_train_state(init_rng, config: Config, eval_config, learning_rate_fn):
    """The initial `TrainState` (``train.py``'s, unreplicated)."""
    m = models.TransformerLM(eval_config)
    variables = initial_variables(init_rng, config, eval_config)
    return train_state.TrainState.create(
        apply_fn=m.apply,
        params=variables["params"],
        tx=create_optimizer(config, learning_rate_fn),
    )


def encode_prompts(config: Config):
    """The prompts, one a row of ``max_predict_length`` (zeros after)."""
    tokenized = np.zeros((1, config.max_predict_length), np.int32)
    tokenized[0, : len(config.prompts)] = config.prompts
    return tokenized


def decode_tokens(toks):
    """The ids up to EOS (all of them without one: lm1b keeps the first
    only then), as text (lm1b detokenizes them)."""
    eos_id = temperature_sampler.EOS_ID
    end = np.argmax(toks == eos_id) + 1 if (toks == eos_id).any() else None
    valid_toks = toks[:end].astype(np.int32)
    return " ".join(str(t) for t in valid_toks)


def write_train_summary(writer, step, train_metrics):
    """lm1b's train summary: the metrics' sums over the steps since the
    last one, divided by the tokens counted (``denominator``)."""
    lr = train_metrics.pop("learning_rate").mean()
    metrics_sums = jax.tree_util.tree_map(jnp.sum, train_metrics)
    denominator = metrics_sums.pop("denominator")
    summary = jax.tree_util.tree_map(lambda x: x / denominator, metrics_sums)
    summary["learning_rate"] = lr
    summary["perplexity"] = jnp.clip(jnp.exp(summary["loss"]), max=1.0e4)
    summary = {"train_" + k: v for k, v in summary.items()}
    writer.write_scalars(step, summary)


def write_eval_summary(writer, step, eval_results):
    # (clipped) perplexity after averaging log-perplexities
    eval_results["perplexity"] = jnp.clip(
        jnp.exp(eval_results["loss"]), max=1.0e4
    )
    writer.write_scalars(
        step, {"eval_" + k: v for k, v in eval_results.items()}
    )


def train_and_evaluate(
    config: Config,
    workdir: str,
    *,
    writer: SummaryLog | None = None,
    devices: Sequence[jax.Device] | None = None,
):
    """Runs a training and evaluation loop.

    Args:
      config: Configuration to use.
      workdir: Working directory (unused: no checkpoints here).
      writer: where the train and eval summaries and the samples go.
      devices: the devices to pmap over (default: every local device).

    Returns:
      The final TrainState (replicated over `devices`).
    """
    del workdir
    writer = SummaryLog() if writer is None else writer
    devices = jax.local_devices() if devices is None else list(devices)
    n_devices = len(devices)

    # Load Dataset
    # -----------------------------------------------------------------------
    logging.info("Initializing dataset.")
    train_ds, eval_ds = get_datasets(n_devices=n_devices, config=config)
    train_iter = iter(train_ds)
    vocab_size = config.vocab_size
    eos_id = temperature_sampler.EOS_ID

    tokenized_prompts = encode_prompts(config)

    logging.info("Initializing model, optimizer, and step functions.")
    # Build Model and Optimizer
    # -----------------------------------------------------------------------
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
    state = create_train_state(init_rng, config, eval_config, learning_rate_fn)

    # Replicate optimizer.
    state = jax_utils.replicate(state, devices)

    # compile multidevice versions of train/eval/predict step fn.
    p_train_step = jax.pmap(
        functools.partial(
            train_step, config=train_config, learning_rate_fn=learning_rate_fn
        ),
        axis_name="batch",
        donate_argnums=(0,),
        devices=devices,
    )
    p_eval_step = jax.pmap(
        functools.partial(eval_step, config=eval_config),
        axis_name="batch",
        devices=devices,
    )
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

    # Main Train Loop
    # -----------------------------------------------------------------------

    # We init the first set of dropout PRNG keys, but update it afterwards
    # inside the main pmap'd training update for performance.
    dropout_rngs = jax.random.split(rng, n_devices)
    del rng

    logging.info("Starting training loop.")
    train_metrics = []
    for step in range(start_step, config.num_train_steps):
        is_last_step = step == config.num_train_steps - 1

        # Shard data to devices and do a training step.
        batch = shard(
            jax.tree_util.tree_map(np.asarray, next(train_iter)), n_devices
        )
        state, metrics = p_train_step(state, batch, dropout_rng=dropout_rngs)
        train_metrics.append(metrics)

        # Periodic metric handling.
        if step % config.eval_every_steps == 0 or is_last_step:
            logging.info("Gathering training metrics.")
            train_metrics = common_utils.get_metrics(train_metrics)
            write_train_summary(writer, step, train_metrics)
            train_metrics = []

            eval_results = evaluate(
                p_eval_step=p_eval_step,
                params=state.params,
                eval_ds=eval_ds,
                num_eval_steps=config.num_eval_steps,
                n_devices=n_devices,
            )
            write_eval_summary(writer, step, eval_results)

            exemplars = generate_prediction(
                p_pred_step=p_pred_step,
                params=state.params,
                tokenized_prompts=tokenized_prompts,
                eos_id=eos_id,
                inference_rng=inference_rng,
                decode_tokens=decode_tokens,
                max_predict_length=config.max_predict_length,
                n_devices=n_devices,
            )
            writer.write_texts(step, {"samples": exemplars})

    return state
