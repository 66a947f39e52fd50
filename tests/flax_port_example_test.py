# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""docs/porting_flax.md, change by change: `boostax.examples.flax_port`.

`boostax.examples.flax_imagenet` is the Flax ImageNet example as Flax writes
it (pmap, ``compute_metrics`` ``pmean``'d, ``sync_batch_stats``, the first
replica's checkpoint); `flax_port` is it after the guide's changes. Both
run their own ``train_and_evaluate`` (train, evaluate at each epoch's end,
checkpoint) on one device and on eight, at O0, O1 (also with gradient
accumulation) and O2: at O0 the port logs the example's
numbers, train and eval, and ends with its params; at every level the eval
numbers it logs are those of the model it trained, computed by the
example's own pmapped evaluation, which reads the converted state as the
example passes its state (replicated) and as the example's later versions
do (``in_axes=(None, 0)``); the port's checkpoints restore bit for bit.
"""

import dataclasses
import functools
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

import boostax
from boostax.examples import flax_imagenet as example
from boostax.examples import flax_port
from tests import _utils

# 256 train examples in batches of 64: 4 steps an epoch, 8 steps in all,
# evaluated after steps 4 and 8 on the 448 test examples (7 batches).
CONFIG = example.Config(
    learning_rate=0.4, num_train_examples=256, num_epochs=2, log_every_steps=2
)
FREEZE = {"param_groups": 2, "total_steps": 8}


def boost_config(level, devices):
    if level == "O0":
        return None
    if level == "O1":
        return {"grad_freeze": FREEZE}
    if level == "O1 accumulation":  # 2 micro-steps an update (change 5)
        return {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 2},
            "grad_freeze": {"param_groups": 2, "total_steps": 4},
        }
    # O2: two nodes of four devices on eight; on one device, one node.
    return {
        "common": {"device_number": max(devices // 2, 1)},
        "grad_freeze": FREEZE,
    }


@functools.cache
def run_example(devices):
    writer = example.ScalarLog()
    state = example.train_and_evaluate(
        CONFIG,
        tempfile.mkdtemp(),
        writer=writer,
        devices=jax.devices()[:devices],
    )
    return writer.scalars, jax.tree.map(lambda x: x[0], state)


@functools.cache
def run_port(level, devices, steps=-1, workdir=None):
    config = dataclasses.replace(
        CONFIG,
        boost_level=level.split()[0],
        boost_config=boost_config(level, devices),
        num_train_steps=steps,
    )
    writer = example.ScalarLog()
    ts, state = flax_port.train_and_evaluate(
        config,
        workdir or tempfile.mkdtemp(),
        writer=writer,
        devices=jax.devices()[:devices],
    )
    return writer.scalars, ts, state


def original_model():
    return example.create_model(model_cls=example.ResNet4, half_precision=False)


def eval_batches():
    digits = _utils.digits()
    n = len(digits.x_test) // CONFIG.batch_size * CONFIG.batch_size
    return digits.x_test[:n], digits.y_test[:n]


class FlaxPortTest(parameterized.TestCase):
    @parameterized.parameters(1, 8)
    def test_o0_logs_the_examples_numbers(self, devices):
        expected, flax_state = run_example(devices)
        got, ts, state = run_port("O0", devices)
        self.assertEqual(sorted(got), [2, 4, 6, 8])
        for step in expected:
            for name, value in expected[step].items():
                self.assertAlmostEqual(
                    got[step][name], value, delta=2e-5 * (1 + abs(value))
                )
        converted = boostax.to_flax_train_state(
            ts, state, cls=example.TrainState, dynamic_scale=None
        )
        _utils.assert_trees_all_close(
            (converted.params, converted.batch_stats),
            (flax_state.params, flax_state.batch_stats),
            rtol=2e-5,
            atol=2e-6,
        )
        # The steps moved the params (the comparison is not of the init).
        moved = jax.tree.map(
            lambda a, b: float(jnp.max(jnp.abs(a - b))),
            converted.params,
            example.initialized(
                jax.random.key(0), example.IMAGE_SIZE, original_model()
            )[0],
        )
        self.assertGreater(max(jax.tree.leaves(moved)), 1e-3)

    @parameterized.product(
        level=("O0", "O1", "O1 accumulation", "O2"), devices=(1, 8)
    )
    def test_eval_numbers_are_those_of_the_trained_model(self, level, devices):
        if level == "O2" and devices == 1:
            with self.assertWarnsRegex(UserWarning, "single node"):
                scalars, ts, state = run_port.__wrapped__(level, devices)
        else:
            scalars, ts, state = run_port(level, devices)
        if level != "O0":
            self.assertNotEmpty(ts.less_bn_report.removed)
            self.assertIn("train_frozen_groups", scalars[8])
        if level == "O1 accumulation":
            # Every second micro-step ran the optimizer (logged every 2).
            self.assertEqual(scalars[8]["train_updated"], 0.5)
        if level == "O2" and devices == 8:
            self.assertEqual(ts.data_parallel.axes, ("node", "local"))
            self.assertIn("train_adasum_cosine", scalars[8])
        # The trained model's numbers on the test set, from the step's own
        # prediction: what the example's evaluation must report.
        images, labels = eval_batches()
        logits = ts.predict(state, images)
        loss = float(example.cross_entropy_loss(logits, labels))
        accuracy = float(np.mean(np.argmax(logits, -1) == labels))
        self.assertAlmostEqual(scalars[8]["eval_loss"], loss, delta=1e-5)
        self.assertAlmostEqual(
            scalars[8]["eval_accuracy"], accuracy, delta=1e-6
        )
        self.assertEqual(int(state.step), 8)

        # The example's later versions pass the state unreplicated to
        # `pmap(eval_step, in_axes=(None, 0))`: the converted state as it is.
        p_eval_step = jax.pmap(
            example.eval_step,
            axis_name="batch",
            in_axes=(None, 0),
            devices=jax.devices()[:devices],
        )
        flax_state = boostax.to_flax_train_state(
            ts, state, cls=example.TrainState, dynamic_scale=None
        )
        batches = iter(
            example.prepare_tf_data(
                {"image": x, "label": y}, jax.devices()[:devices]
            )
            for x, y in zip(
                np.split(images, 7), np.split(labels, 7), strict=True
            )
        )
        summary = example.evaluate(p_eval_step, flax_state, batches, 7)
        self.assertAlmostEqual(float(summary["loss"]), loss, delta=1e-5)
        self.assertAlmostEqual(float(summary["accuracy"]), accuracy, delta=1e-6)
        # And back: the boostax state, bit for bit (shardings included).
        back = boostax.from_flax_train_state(ts, flax_state, like=state)
        _utils.assert_trees_equal(back, state)
        for a, b in zip(
            jax.tree.leaves(back), jax.tree.leaves(state), strict=True
        ):
            self.assertTrue(a.sharding.is_equivalent_to(b.sharding, a.ndim))

    @parameterized.parameters(("O1", 1), ("O2", 8))
    def test_checkpoints_restore_and_resume(self, level, devices):
        workdir = tempfile.mkdtemp()
        _, ts, half = run_port.__wrapped__(level, devices, 4, workdir)
        # The port's restore_checkpoint (the example's) into a fresh state.
        params, batch_stats = example.initialized(
            jax.random.key(0), example.IMAGE_SIZE, original_model()
        )
        fresh = ts.init({"params": params, "batch_stats": batch_stats})
        restored = flax_port.restore_checkpoint(fresh, workdir)
        _utils.assert_trees_equal(restored, half)
        # Run again in the same workdir: it resumes at step 4.
        scalars, _, state = run_port.__wrapped__(level, devices, 8, workdir)
        self.assertEqual(int(state.step), 8)
        self.assertEqual(sorted(scalars), [6, 8])  # steps 5 to 8 only
        self.assertTrue(np.isfinite(scalars[8]["eval_loss"]))


class TrainedCheckpointTest(absltest.TestCase):
    def test_o1_resume_of_a_trained_flax_checkpoint_keeps_its_accuracy(self):
        # The example's own checkpoint of a trained model, brought into O1.
        workdir = tempfile.mkdtemp()
        config = example.Config(learning_rate=1.0, num_epochs=3)
        writer = example.ScalarLog()
        devices = jax.devices()[:1]
        example.train_and_evaluate(
            config, workdir, writer=writer, devices=devices
        )
        trained = writer.scalars[max(writer.scalars)]["eval_accuracy"]
        self.assertGreater(trained, 0.8)

        model = original_model()
        template = example.create_train_state(
            jax.random.key(0), config, model, example.IMAGE_SIZE, lambda s: 0.1
        )
        flax_state = example.restore_checkpoint(template, workdir)

        def o1_step(boost_config):
            o1 = dataclasses.replace(
                config, boost_level="O1", boost_config=boost_config
            )
            ts, _ = flax_port.create_train_state(
                jax.random.key(0),
                o1,
                model,
                example.IMAGE_SIZE,
                lambda s: 0.1,
                jax.make_mesh((1,), ("batch",), devices=devices),
            )
            return ts

        # O1's FN head would replace the trained dense head: refused.
        with self.assertRaisesRegex(ValueError, "fn_flag"):
            boostax.from_flax_train_state(
                o1_step({"grad_freeze": FREEZE}),
                flax_state,
                init_optimizer=True,
            )
        # Without it, the removed BatchNorms are folded: the same model.
        ts = o1_step({"grad_freeze": FREEZE, "less_bn": {"fn_flag": False}})
        state = boostax.from_flax_train_state(
            ts, flax_state, init_optimizer=True
        )
        images, labels = eval_batches()
        logits = ts.predict(state, images)
        accuracy = float(np.mean(np.argmax(logits, -1) == labels))
        self.assertAlmostEqual(accuracy, trained, delta=0.02)


if __name__ == "__main__":
    absltest.main()
