# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""docs/porting_flax.md, change by change: `boostax.examples.flax_port`.

`boostax.examples.flax_imagenet` is the Flax ImageNet example as Flax writes
it (pmap, ``compute_metrics`` ``pmean``'d, ``sync_batch_stats``, the first
replica's checkpoint; models.py's ResNet blocks, their last BatchNorm at
``scale_init=zeros_init()``); `flax_port` is it after the guide's changes.
Both run their own ``train_and_evaluate`` (train, evaluate at each epoch's
end, checkpoint) on one device and on eight, at O0, O1 (also with gradient
accumulation, its config a ``ConfigDict``-like object) and O2, and with the
optimizer state sharded over eight devices (ZeRO-1, at O0 and O1): at O0
the port logs the example's numbers, train and eval, and ends with its
params, and one step from the same state agrees to 1e-6; at every level
the eval numbers it logs are those of the model it trained, computed by the
example's own pmapped evaluation, which reads the converted state as the
example passes its state (replicated) and as the example's later versions
do (``in_axes=(None, 0)``); ZeRO-1 holds an eighth of the optimizer state
on each device and logs the replicated run's numbers; the port's
checkpoints restore bit for bit (sharded ones too); and a trained O0
checkpoint goes on at O1 by the conversion route, keeping its accuracy.
"""

import dataclasses
import functools
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
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


class ConfigDictLike:
    """What boostax reads of an ml_collections ``ConfigDict`` (a config of
    the example's kind; ml_collections is not a dependency): ``to_dict()``."""

    def __init__(self, sections):
        self._sections = sections

    def to_dict(self):
        return {k: dict(v) for k, v in self._sections.items()}


def boost_config(level, devices):
    """The boost config of a test level: "O0", "O1", "O2", optionally with
    " accumulation" (2 micro-steps an update, change 5) or " ZeRO-1" (the
    optimizer state sharded over the devices)."""
    name, _, variant = level.partition(" ")
    sections: dict = {}
    if name != "O0":
        sections["grad_freeze"] = FREEZE
    if name == "O2":  # two nodes of four devices on eight; on one, one node
        sections["common"] = {"device_number": max(devices // 2, 1)}
    if variant == "ZeRO-1":
        sections["data_parallel"] = {"shard_optimizer_state": True}
    if variant == "accumulation":
        sections["boost"] = {"mode": "manual", "grad_accumulation": True}
        sections["grad_accumulation"] = {"grad_accumulation_step": 2}
        sections["grad_freeze"] = {"param_groups": 2, "total_steps": 4}
        return ConfigDictLike(sections)  # taken as it is (change 8)
    return sections or None


@functools.cache
def run_example(devices, steps=-1):
    writer = example.ScalarLog()
    state = example.train_and_evaluate(
        dataclasses.replace(CONFIG, num_train_steps=steps),
        tempfile.mkdtemp(),
        writer=writer,
        devices=jax.devices()[:devices],
    )
    return writer.scalars, jax.tree.map(lambda x: x[0], state)


@functools.cache
def run_port(level, devices, steps=-1, workdir=None, model="ResNet4"):
    config = dataclasses.replace(
        CONFIG,
        boost_level=level.split()[0],
        boost_config=boost_config(level, devices),
        num_train_steps=steps,
        model=model,
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

    @parameterized.parameters(1, 8)
    def test_one_step_from_the_same_state_agrees(self, devices):
        # The guide's "float tolerance" is per step: one step of the port
        # from the example's initial state gives the example's params to
        # 1e-6 (on eight devices the gradient mean is summed in another
        # order). Over a run the differences grow (the guide measures it).
        _, flax_state = run_example(devices, 1)
        _, ts, state = run_port("O0", devices, 1)
        self.assertEqual(int(state.step), 1)
        converted = boostax.to_flax_train_state(
            ts, state, cls=example.TrainState, dynamic_scale=None
        )
        _utils.assert_trees_all_close(
            (converted.params, converted.batch_stats),
            (flax_state.params, flax_state.batch_stats),
            rtol=1e-6,
            atol=1e-6,
        )

    @parameterized.parameters(
        *[
            (level, devices)
            for level in ("O0", "O1", "O1 accumulation", "O2")
            for devices in (1, 8)
        ],
        ("O0 ZeRO-1", 8),
        ("O1 ZeRO-1", 8),
        ("O1", 1, "BottleneckResNet4"),
    )
    def test_eval_numbers_are_those_of_the_trained_model(
        self, level, devices, model="ResNet4"
    ):
        if level == "O2" and devices == 1:
            with self.assertWarnsRegex(UserWarning, "single node"):
                scalars, ts, state = run_port.__wrapped__(level, devices)
        else:
            scalars, ts, state = run_port(level, devices, model=model)
        if not level.startswith("O0"):
            self.assertNotEmpty(ts.less_bn_report.removed)
            self.assertIn("train_frozen_groups", scalars[8])
            # The variables are fresh (the blocks' last BatchNorm scales at
            # their zeros_init, read as fresh): LessBN's FN head replaces
            # the dense head, no fn_flag needed.
            self.assertEqual(ts.less_bn_report.fn_head, "Dense_0")
        if level.endswith("ZeRO-1"):
            self.assert_zero1(level, scalars, state)
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

    def assert_zero1(self, level, scalars, state):
        # Each device holds an eighth of the optimizer state: every leaf
        # with an axis of a multiple of 8 is split (a 10-class bias, the
        # FN multiplier and the step counts stay whole), and the run is
        # the replicated run, number for number.
        replicated_scalars, _, replicated = run_port(level.split()[0], 8)
        whole = sum(
            leaf.nbytes
            for leaf in jax.tree.leaves(replicated.opt_state)
            if not any(size % 8 == 0 for size in leaf.shape)
        )
        replicated_bytes = boostax.measure.state_bytes_per_device(replicated)
        self.assertLess(whole, replicated_bytes["opt_state"] / 100)
        self.assertEqual(
            boostax.measure.state_bytes_per_device(state)["opt_state"],
            (replicated_bytes["opt_state"] - whole) // 8 + whole,
        )
        split = [
            leaf
            for leaf in jax.tree.leaves(state.opt_state)
            if not leaf.sharding.is_fully_replicated
        ]
        self.assertNotEmpty(split)
        for step, logged in replicated_scalars.items():
            for name, value in logged.items():
                self.assertAlmostEqual(
                    scalars[step][name], value, delta=1e-5 * (1 + abs(value))
                )

    @parameterized.parameters(("O1", 1), ("O2", 8), ("O0 ZeRO-1", 8))
    def test_checkpoints_restore_and_resume(self, level, devices):
        workdir = tempfile.mkdtemp()
        _, ts, half = run_port.__wrapped__(level, devices, 4, workdir)
        # The port's restore_checkpoint (the example's) into a fresh state:
        # every leaf as saved, shapes and placement included (with ZeRO-1
        # the optimizer state is stored split; the example's first-replica
        # line would have saved the first row of each of its leaves).
        params, batch_stats = example.initialized(
            jax.random.key(0), example.IMAGE_SIZE, original_model()
        )
        fresh = ts.init({"params": params, "batch_stats": batch_stats})
        restored = flax_port.restore_checkpoint(fresh, workdir)
        _utils.assert_trees_equal(restored, half)
        for a, b in zip(
            jax.tree.leaves(restored), jax.tree.leaves(half), strict=True
        ):
            self.assertTrue(a.sharding.is_equivalent_to(b.sharding, a.ndim))
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


class BetweenLevelsTest(absltest.TestCase):
    def test_an_o0_checkpoint_goes_on_at_o1(self):
        # The guide's "Moving a checkpoint between levels": the port trained
        # at O0 for 4 of its 5 epochs, its checkpoint refused by an O1
        # template, then restored at O0, converted, its optimizer count set
        # to the updates made, saved, and trained on by the port's own loop
        # at O1 for the last epoch.
        devices = jax.devices()[:1]
        mesh = jax.make_mesh((1,), ("batch",), devices=devices)
        config = example.Config(learning_rate=1.0, num_epochs=5)
        workdir = tempfile.mkdtemp()
        writer = example.ScalarLog()
        _, trained_state = flax_port.train_and_evaluate(
            dataclasses.replace(config, num_train_steps=84),
            workdir,
            writer=writer,
            devices=devices,
        )
        self.assertEqual(int(trained_state.step), 84)
        trained = writer.scalars[84]["eval_accuracy"]
        self.assertGreater(trained, 0.8)

        def step(level, boost_config):
            return flax_port.create_train_state(
                jax.random.key(0),
                dataclasses.replace(
                    config, boost_level=level, boost_config=boost_config
                ),
                original_model(),
                example.IMAGE_SIZE,
                lambda count: 0.1,
                mesh,
            )

        freeze = {"grad_freeze": {"param_groups": 2, "total_steps": 105}}
        o1_ts, o1_template = step("O1", freeze)
        with self.assertRaisesRegex(
            ValueError, r"does not fit the template(.|\n)*to_flax_train_state"
        ):
            flax_port.restore_checkpoint(o1_template, workdir)

        saved_ts, o0_template = step("O0", None)
        saved = flax_port.restore_checkpoint(o0_template, workdir)
        _utils.assert_trees_equal(saved, trained_state)
        flax_state = boostax.to_flax_train_state(
            saved_ts, saved, cls=example.TrainState, dynamic_scale=None
        )
        # O1's FN head would replace the trained dense head: refused.
        with self.assertRaisesRegex(ValueError, "fn_flag"):
            boostax.from_flax_train_state(
                o1_ts, flax_state, init_optimizer=True
            )
        keep_head = {**freeze, "less_bn": {"fn_flag": False}}
        new_ts, _ = step("O1", keep_head)
        state = boostax.from_flax_train_state(
            new_ts, flax_state, init_optimizer=True
        )
        self.assertEqual(int(state.step), 84)
        self.assertNotEmpty(new_ts.less_bn_report.removed)
        self.assertIsNone(new_ts.less_bn_report.fn_head)
        # The removed BatchNorms are folded: the same function.
        images, _ = eval_batches()
        np.testing.assert_allclose(
            new_ts.predict(state, images),
            saved_ts.predict(saved, images),
            rtol=1e-4,
            atol=1e-4,
        )
        # The fresh optimizer state counts from 0: set its count (the
        # schedule's) to the 84 updates made, so the schedule goes on.
        count = optax.tree_utils.tree_get(state.opt_state, "count")
        self.assertEqual(int(count), 0)
        state = state.replace(
            opt_state=optax.tree_utils.tree_set(
                state.opt_state, count=count + int(flax_state.step)
            )
        )

        # Saved, the converted state is an O1 checkpoint: the port resumes
        # it at step 84 and trains the last epoch at O1.
        resumed = tempfile.mkdtemp()
        flax_port.save_checkpoint(state, resumed)
        writer = example.ScalarLog()
        _, final = flax_port.train_and_evaluate(
            dataclasses.replace(
                config, boost_level="O1", boost_config=keep_head
            ),
            resumed,
            writer=writer,
            devices=devices,
        )
        self.assertEqual(int(final.step), 105)
        self.assertEqual(sorted(writer.scalars), [105])  # one evaluation
        self.assertGreater(writer.scalars[105]["eval_accuracy"], trained - 0.02)
        self.assertEqual(
            int(optax.tree_utils.tree_get(final.opt_state, "count")), 105
        )


if __name__ == "__main__":
    absltest.main()
