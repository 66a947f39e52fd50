# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""docs/porting_lm1b.md, change by change: `boostax.examples.flax_lm1b_port`.

`boostax.examples.flax_lm1b` is Flax's lm1b example as Flax writes it
(a pmapped ``train_step`` with dropout, ``eval_step`` on the deterministic
config, temperature sampling from the decode config's cache); the port is
it after the guide's changes. At O0 on one device the port's step is the
script's own step bit for bit with dropout on, once the script is given
boostax's dropout key; without dropout both ``train_and_evaluate``s log the
same numbers, train and eval, and draw the same samples. The
sequence-length warm-up trains on the batch's first positions, all three
packed entries cut. On eight devices with a sharded optimizer state the
port matches one device on batches without padding, and the pmapped script
on eight devices on padded ones: both normalise the token-weighted loss
per device.
"""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from flax import jax_utils

import boostax
from boostax.examples import flax_lm1b as example
from boostax.examples import flax_lm1b_models as models
from boostax.examples import flax_lm1b_port as port
from tests import _utils

DROPOUT = example.Config(num_train_steps=6, eval_every_steps=5)
NO_DROPOUT = dataclasses.replace(
    DROPOUT, dropout_rate=0.0, attention_dropout_rate=0.0
)


def setup(config):
    """What both scripts' train_and_evaluate build before the loop."""
    train_config, eval_config, _ = example.create_model_configs(
        config, config.vocab_size
    )
    rng = jax.random.PRNGKey(config.seed)
    rng, init_rng = jax.random.split(rng)
    rng, _ = jax.random.split(rng)  # the inference key
    learning_rate_fn = example.create_learning_rate_schedule(
        config.learning_rate, config.warmup_steps
    )
    return train_config, eval_config, init_rng, rng, learning_rate_fn


def script_step(config, devices):
    """The example's pmapped train step, its replicated state and the key
    its dropout keys are split from."""
    train_config, eval_config, init_rng, rng, learning_rate_fn = setup(config)
    state = example.create_train_state(
        init_rng, config, eval_config, learning_rate_fn
    )
    p_train_step = jax.pmap(
        functools.partial(
            example.train_step,
            config=train_config,
            learning_rate_fn=learning_rate_fn,
        ),
        axis_name="batch",
        donate_argnums=(0,),
        devices=devices,
    )
    return p_train_step, jax_utils.replicate(state, devices), rng


def port_step(config, devices):
    """The port's train step and state (its train_and_evaluate's)."""
    train_config, eval_config, init_rng, rng, learning_rate_fn = setup(config)
    mesh = jax.make_mesh((len(devices),), ("batch",), devices=devices)
    variables = example.initial_variables(init_rng, config, eval_config)
    return port.create_train_step(
        config, train_config, learning_rate_fn, variables, rng, mesh
    )


def packed_batches(config, n):
    """The example's first `n` train batches (packed, padded rows)."""
    train_ds, _ = example.get_datasets(1, config)
    return list(itertools.islice(train_ds, n))


def unpadded_batch(config, seed):
    """8 packed rows without padding: the sentences run on, cut at each
    row's end (each row's segments numbered from 1)."""
    rows, length = 8, config.max_target_length
    source = example.sentences(config.vocab_size, seed)
    tokens, positions, segments = [], [], []
    for segment in itertools.count(1):
        if len(tokens) >= rows * length:
            break
        sentence = next(source)
        tokens += list(sentence)
        positions += range(len(sentence))
        segments += [segment] * len(sentence)

    def cut(x):
        return np.asarray(x[: rows * length], np.int32).reshape(rows, length)

    segmentation = cut(segments)
    return {
        "inputs": cut(tokens),
        "inputs_position": cut(positions),
        "inputs_segmentation": segmentation - segmentation[:, :1] + 1,
    }


def first_replica(tree):
    # Not flax's `jax_utils.unreplicate`: on a pmap over 1 of 8 devices it
    # reads the array as replicated and returns it whole.
    return jax.tree.map(lambda x: x[0], tree)


def shard(batch, n_devices):
    return example.shard(batch, n_devices)


def boostax_key(rng, step):
    """The key the script's `train_step` folds into the port's dropout key
    at ``state.step == 0``: boostax's step `step`, device 0 of the mesh
    (the stream index 0, 'dropout', is the script's fold)."""
    return jax.random.fold_in(jax.random.fold_in(rng, step), 0)


def cut(batch, length):
    return {k: v[:, :length] for k, v in batch.items()}


class Lm1bPortTest(absltest.TestCase):
    def test_o0_is_the_scripts_step_bit_for_bit_with_dropout(self):
        devices = jax.devices()[:1]
        p_train_step, flax_state, rng = script_step(DROPOUT, devices)
        ts, state = port_step(DROPOUT, devices)
        initial = jax.device_get(first_replica(flax_state.params))
        first = None
        for i, batch in enumerate(packed_batches(DROPOUT, 3)):
            # The script folds `state.step` into its key: at step 0 and
            # given boostax's key for step i, it draws the port's masks.
            key = boostax_key(rng, i)[None]
            flax_state, flax_metrics = p_train_step(
                flax_state.replace(step=jnp.zeros((1,), jnp.int32)),
                shard(batch, 1),
                dropout_rng=key,
            )
            state, metrics = ts(state, batch)
            first = metrics if first is None else first
            for name in ("accuracy", "denominator"):
                np.testing.assert_array_equal(
                    metrics[name], flax_metrics[name][0]
                )
            np.testing.assert_array_equal(
                metrics["loss_sum"], flax_metrics["loss"][0]
            )
            np.testing.assert_array_equal(
                metrics["loss"],
                flax_metrics["loss"][0] / flax_metrics["denominator"][0],
            )
        _utils.assert_trees_equal(
            state.params, first_replica(flax_state.params)
        )
        moved = jax.tree.map(
            lambda a, b: float(np.max(np.abs(np.asarray(a) - b))),
            state.params,
            initial,
        )
        self.assertGreater(max(jax.tree.leaves(moved)), 1e-3)
        # The training model draws dropout: evaluation takes the eval
        # model (change 6), and the step says so.
        with self.assertRaisesRegex(ValueError, "model=eval_model"):
            ts.predict(state, (batch["inputs"],))
        # Dropout is on: the script's own key (split, folded with the
        # step) draws other masks, another loss.
        _, own_state, _ = script_step(DROPOUT, devices)
        own_key = jax.random.split(rng, 1)
        _, own_metrics = p_train_step(
            own_state,
            shard(packed_batches(DROPOUT, 1)[0], 1),
            dropout_rng=own_key,
        )
        self.assertNotEqual(
            float(own_metrics["loss"][0]), float(first["loss_sum"])
        )

    def test_o0_logs_the_scripts_numbers_and_samples_without_dropout(self):
        devices = jax.devices()[:1]
        expected = example.SummaryLog()
        example.train_and_evaluate(
            NO_DROPOUT, "", writer=expected, devices=devices
        )
        got = example.SummaryLog()
        ts, state = port.train_and_evaluate(
            NO_DROPOUT, "", writer=got, devices=devices
        )
        self.assertEqual(sorted(got.scalars), [0, 5])
        # Train and eval numbers, the eval ones from `ts.predict` with the
        # eval model, and the samples from the trained params.
        self.assertEqual(got.scalars, expected.scalars)
        self.assertEqual(got.texts, expected.texts)
        self.assertLess(
            got.scalars[5]["eval_loss"], got.scalars[0]["eval_loss"] - 0.3
        )
        self.assertIn("samples", got.texts[5])
        self.assertEqual(int(state.step), 6)

    def test_seq_len_warmup_trains_on_cut_batches(self):
        devices = jax.devices()[:1]
        config = dataclasses.replace(
            DROPOUT, boost_level="O1", boost_config=boostax.text_recipe(10)
        )
        ts, state = port_step(config, devices)
        p_train_step, flax_state, rng = script_step(DROPOUT, devices)
        data = packed_batches(DROPOUT, 2)
        lengths, seen = [], []
        for batch in data:
            state, metrics = ts(state, batch)
            length = int(metrics["sequence_length"])
            lengths.append(length)
            seen.append(metrics)
            self.assertEqual(int(metrics["tokens"]), 8 * length)
            # The loss counted the first `length` positions' tokens only.
            self.assertEqual(
                float(metrics["denominator"]),
                np.count_nonzero(batch["inputs"][:, :length]),
            )
        # 30% of 10 updates: 8, 16, 24 positions, then all 32.
        self.assertEqual(lengths, [8, 16])
        self.assertEqual(
            [ts.program_at(i)[1] for i in range(5)], [8, 16, 24, 32, 32]
        )
        # Step 0 is the script's step on the batch cut by hand: inputs,
        # positions and segments.
        _, flax_metrics = p_train_step(
            flax_state,
            shard(cut(data[0], 8), 1),
            dropout_rng=boostax_key(rng, 0)[None],
        )
        np.testing.assert_array_equal(
            seen[0]["loss_sum"], flax_metrics["loss"][0]
        )
        np.testing.assert_array_equal(
            seen[0]["accuracy"], flax_metrics["accuracy"][0]
        )

    def test_eight_devices_with_a_sharded_optimizer_state(self):
        config = dataclasses.replace(NO_DROPOUT, shard_optimizer_state=True)
        ts8, start8 = port_step(config, jax.devices())
        ts1, start1 = port_step(NO_DROPOUT, jax.devices()[:1])
        # ZeRO-1: each device holds 1/8 of AdamW's moments.
        opt8 = boostax.measure.state_bytes_per_device(start8)["opt_state"]
        opt1 = boostax.measure.state_bytes_per_device(start1)["opt_state"]
        self.assertLess(opt8, opt1 / 7)

        # Without padding every device counts the same tokens: eight
        # devices train as one.
        state8, state1 = start8, start1
        for seed in range(3):
            batch = unpadded_batch(config, seed)
            state8, metrics8 = ts8(state8, batch)
            state1, metrics1 = ts1(state1, batch)
            self.assertAlmostEqual(
                float(metrics8["loss"]), float(metrics1["loss"]), delta=1e-5
            )
        _utils.assert_trees_all_close(
            state8.params, state1.params, rtol=1e-4, atol=1e-5
        )

        # With uneven padding each device's loss is normalised by its own
        # tokens, and the step averages the devices' losses: the mean of
        # the rows' losses (one row a device), not the batch's.
        batch = packed_batches(config, 1)[0]
        _, metrics8 = ts8(start8, batch)
        _, metrics1 = ts1(start1, batch)
        _, eval_config, _ = example.create_model_configs(config, 32)
        logits = ts1.predict(
            start1,
            tuple(batch[k] for k in port.TRAIN_KEYS),
            model=models.TransformerLM(eval_config),
        )
        rows = [
            port.train_loss(logits[r : r + 1], batch["inputs"][r : r + 1])[0]
            for r in range(8)
        ]
        self.assertAlmostEqual(
            float(metrics8["loss"]), float(np.mean(rows)), delta=1e-5
        )
        self.assertAlmostEqual(
            float(metrics1["loss"]),
            float(port.train_loss(logits, batch["inputs"])[0]),
            delta=1e-5,
        )
        self.assertGreater(
            abs(float(metrics8["loss"]) - float(metrics1["loss"])), 1e-3
        )
        # The pmapped script normalises per device too: the port on eight
        # devices is its step, bit for bit (one device is not).
        p_train_step, flax_state, rng = script_step(
            dataclasses.replace(config, per_device_batch_size=1),
            jax.devices(),
        )
        state8, state1 = start8, start1
        for batch in packed_batches(config, 3):
            state8, _ = ts8(state8, batch)
            state1, _ = ts1(state1, batch)
            flax_state, _ = p_train_step(
                flax_state,
                shard(batch, 8),
                dropout_rng=jax.random.split(rng, 8),
            )
        _utils.assert_trees_equal(
            state8.params, first_replica(flax_state.params)
        )
        apart = jax.tree.map(
            lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))),
            state8.params,
            state1.params,
        )
        self.assertGreater(max(jax.tree.leaves(apart)), 1e-4)


if __name__ == "__main__":
    absltest.main()
