# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The worked port of docs/porting_flax.md: `boostax.examples.flax_port`.

Runs the ported Flax ImageNet-style script at O0, O1, O1 with gradient
accumulation and a dynamic loss scale (in float16), and O2 on 8 devices,
for a few steps each; checks that the Flax evaluation step works on the
converted state, pmapped as the Flax example runs it too, and that O0 is
the Flax example's own pmapped train step (L2 penalty in the loss, gradient
``pmean``, the same schedule), on one device and on eight.
"""

import functools
import shutil
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import jax_utils
from flax.training import checkpoints, common_utils

import boostax
from boostax.examples import flax_port
from tests import _utils

STEPS = 3
BATCH = 16
# A short warm-up (2 updates at 84 steps per epoch) so that the compared
# steps move the params.
SCHEDULE = dict(learning_rate=0.1, warmup_epochs=0.025, num_epochs=1.0)
WEIGHT_DECAY = 1e-2  # large enough for the L2 term to show
FREEZE = {"param_groups": 2, "total_steps": 4}


def flax_train_step(state, batch, weight_decay):
    """The Flax example's train step: L2 term in the loss, grads pmean'd."""

    def loss_fn(params):
        logits, new_model_state = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            batch["image"],
            mutable=["batch_stats"],
        )
        loss = flax_port.cross_entropy_loss(logits, batch["label"])
        weight_l2 = sum(
            jnp.sum(x**2) for x in jax.tree.leaves(params) if x.ndim > 1
        )
        return loss + weight_decay * 0.5 * weight_l2, new_model_state

    grads, new_model_state = jax.grad(loss_fn, has_aux=True)(state.params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    return state.apply_gradients(
        grads=grads, batch_stats=new_model_state["batch_stats"]
    )


@functools.cache
def initial_variables():
    """The params and batch_stats `train_and_evaluate` starts from."""
    return flax_port.initialized(
        jax.random.PRNGKey(0), flax_port.IMAGE_SIZE, flax_port.create_model()
    )


def run_flax_example(devices):
    """STEPS steps of the unported script, pmapped over `devices`."""
    model = flax_port.create_model()
    steps_per_epoch = 1347 // BATCH  # the digits' train split
    learning_rate_fn = flax_port.create_learning_rate_fn(
        SCHEDULE["learning_rate"],
        steps_per_epoch,
        warmup_epochs=SCHEDULE["warmup_epochs"],
        num_epochs=SCHEDULE["num_epochs"],
    )
    params, batch_stats = initial_variables()
    state = flax_port.TrainState.create(
        apply_fn=model.apply,
        params=params,
        tx=optax.sgd(learning_rate_fn, momentum=0.9, nesterov=True),
        batch_stats=batch_stats,
        dynamic_scale=None,
    )
    state = jax_utils.replicate(state, devices)
    p_train_step = jax.pmap(
        functools.partial(flax_train_step, weight_decay=WEIGHT_DECAY),
        axis_name="batch",
        devices=devices,
    )
    digits = _utils.digits()
    train_iter = flax_port.create_input_iter(
        digits.x_train, digits.y_train, BATCH
    )
    for _, batch in zip(range(STEPS), train_iter, strict=False):
        batch = jax.tree.map(
            lambda x: x.reshape((len(devices), -1) + x.shape[1:]), batch
        )
        state = p_train_step(state, batch)
    # The first replica (jax_utils.unreplicate keeps the device axis of a
    # one-device replica on a host with more devices).
    return jax.tree.map(lambda x: x[0], state)


def train(level, config=None, **kwargs):
    kwargs = {"steps": STEPS, "batch_size": BATCH, **SCHEDULE, **kwargs}
    result = flax_port.train_and_evaluate(level, config, **kwargs)
    np.testing.assert_array_equal(np.isfinite(result.metrics["loss"]), True)
    assert 0.0 <= result.accuracy <= 1.0
    assert int(result.state.step) == kwargs["steps"]
    return result


def to_flax(result):
    return boostax.to_flax_train_state(
        result.train_step,
        result.state,
        cls=flax_port.TrainState,
        dynamic_scale=None,
    )


class FlaxPortTest(absltest.TestCase):
    def assert_eval_step_works(self, result):
        # The Flax evaluation step ran on the converted state (its apply_fn
        # is the trained, after LessBN reduced, model: the original model
        # would not find the reduced model's variables) and agrees with
        # the boostax step's own evaluation.
        digits = _utils.digits()
        logits = result.train_step.predict(result.state, digits.x_test)
        self.assertAlmostEqual(
            float(np.mean(np.argmax(logits, -1) == digits.y_test)),
            result.accuracy,
            places=6,
        )
        return to_flax(result)

    def assert_matches_flax(self, result, expected):
        got = to_flax(result)
        self.assertEqual(int(got.step), int(expected.step))
        _utils.assert_trees_all_close(
            (got.params, got.batch_stats),
            (expected.params, expected.batch_stats),
            rtol=2e-5,
            atol=2e-6,
        )
        # The steps moved the params (without the L2 term, or with the
        # schedule counted otherwise, they would not match).
        moved = jax.tree.map(
            lambda a, b: float(jnp.max(jnp.abs(a - b))),
            got.params,
            initial_variables()[0],
        )
        self.assertGreater(max(jax.tree.leaves(moved)), 1e-3)

    def test_o0_is_the_flax_train_step(self):
        result = train("O0", weight_decay=WEIGHT_DECAY)
        self.assert_matches_flax(result, run_flax_example(jax.devices()[:1]))
        self.assert_eval_step_works(result)

    def test_o0_on_a_mesh_is_the_pmapped_flax_train_step(self):
        # pmap over 8 devices with the gradient pmean and synchronised BN
        # is a mesh of 8 devices: the model's 'batch' axis is mapped to it.
        result = train(
            "O0",
            weight_decay=WEIGHT_DECAY,
            mesh=jax.make_mesh((8,), ("data",)),
        )
        self.assert_matches_flax(result, run_flax_example(jax.devices()[:8]))

    def test_o1(self):
        result = train("O1", {"grad_freeze": FREEZE})
        self.assertNotEmpty(result.train_step.less_bn_report.removed)
        self.assertIn("frozen_groups", result.metrics)
        flax_state = self.assert_eval_step_works(result)
        # And back: the boostax state, bit for bit.
        back = boostax.from_flax_train_state(
            result.train_step, flax_state, like=result.state
        )
        _utils.assert_trees_equal(back, result.state)

    def test_o1_accumulation_and_dynamic_loss_scale_in_float16(self):
        # The example's half precision: a float16 model and a dynamic scale,
        # started too high: the first micro-steps overflow (and their
        # updates are dropped) and the scale backs off until they do not.
        result = train(
            "O1",
            {"grad_freeze": FREEZE},
            steps=8,
            accumulation=2,
            loss_scale=boostax.DynamicLossScale(2.0**24),
            half_precision=True,
        )
        metrics = result.metrics
        self.assertLess(float(metrics["loss_scale"]), 2.0**24)
        self.assertFalse(bool(metrics["overflow"]))
        self.assertTrue(bool(metrics["updated"]))  # micro-step 2 of 2
        self.assert_eval_step_works(result)

    def test_o2_on_eight_devices(self):
        mesh = jax.make_mesh((8,), ("data",))
        result = train(
            "O2",
            {"common": {"device_number": 4}, "grad_freeze": FREEZE},
            mesh=mesh,
        )
        ts = result.train_step
        self.assertEqual(ts.data_parallel.axes, ("node", "local"))
        self.assertIn("adasum_cosine", result.metrics)
        # Scalar train metrics: the logging stacks them (no get_metrics).
        logged = common_utils.stack_forest(
            jax.device_get([result.metrics, result.metrics])
        )
        self.assertEqual(logged["loss"].shape, (2,))
        flax_state = self.assert_eval_step_works(result)

        # The Flax example keeps its pmapped evaluation step: it runs on
        # the replicated converted state and per-device eval batches.
        digits = _utils.digits()
        n = len(digits.x_test) // 8 * 8
        batch = {"image": digits.x_test[:n], "label": digits.y_test[:n]}
        p_eval_step = jax.pmap(flax_port.eval_step, axis_name="batch")
        per_device = p_eval_step(
            jax_utils.replicate(flax_state),
            jax.tree.map(lambda x: x.reshape((8, -1) + x.shape[1:]), batch),
        )
        logits = ts.predict(result.state, digits.x_test)[:n]
        np.testing.assert_allclose(
            np.mean(per_device["accuracy"]),
            np.mean(np.argmax(logits, -1) == batch["label"]),
            rtol=1e-6,
        )

        # The example's checkpoint code saves and restores the boostax state.
        workdir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, workdir)
        checkpoints.save_checkpoint_multiprocess(
            workdir, result.state, int(result.state.step), keep=3
        )
        # Into the state `ts.init` builds (from the original model's
        # variables, converted by LessBN).
        params, batch_stats = initial_variables()
        fresh = ts.init({"params": params, "batch_stats": batch_stats})
        restored = checkpoints.restore_checkpoint(workdir, fresh)
        _utils.assert_trees_equal(restored, result.state)


if __name__ == "__main__":
    absltest.main()
