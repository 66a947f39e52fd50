# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""ZeRO-1 at each level over 20 steps: `auto_boost(level, ...,
shard_optimizer_state=True)` against the same call replicated.

A ResNet with BatchNorm (so LessBN has something to fold at O1 and O2),
gradient accumulation (2 micro-steps), MindSpore's gradient freezing and a
dynamic loss scale that grows during the run, on 8 simulated devices (O2:
two nodes of 4, AdaSum across them). The params must stay equal to the
replicated step's within float32 tolerance for all 20 steps.
"""

import functools

import jax
import numpy as np
import optax
from absl.testing import absltest, parameterized

import boostax
from boostax.examples import models
from tests import _utils

STEPS = 20
# 4 examples a device in each of the 2 micro-steps. With 1 (a batch of
# 16), each device's BatchNorm normalised one example's feature maps: the
# gradient became so sensitive to the weights that float32 rounding in the
# two steps' different reduction orders grew from 7e-7 to 5e-4 in one
# update, depending on the machine's rounding; with 4 they agree to 3e-7
# over the 20 steps at O1.
BATCH = 64
SHAPE = (8, 8, 1)


def _model():
    # Widths divisible by 8: most kernels are split over the 8 devices.
    return models.ResNet(stage_sizes=(1, 1), widths=(8, 16))


def _config(level):
    config = {
        "boost": {"mode": "manual", "grad_accumulation": True},
        "grad_accumulation": {"grad_accumulation_step": 2},
    }
    if level != "O0":
        config["grad_freeze"] = {"param_groups": 2, "total_steps": STEPS}
        # LessBN's gradient centralization (on at O1 and O2) averages each
        # kernel over its fan-in axes: the sharded step splits the kernels
        # along their output axis instead (a 3x3x8x16 kernel along its 16
        # output channels, not its 8 input ones).
        config["less_bn"] = {"gc_flag": True}
    if level == "O2":
        config["common"] = {"device_number": 4}  # two nodes of 4
    return config


def _run(level, shard):
    """The step, its last state, the params after each of the `STEPS`
    steps and whether each updated."""
    x = np.zeros((1, *SHAPE), np.float32)
    ts = boostax.auto_boost(
        level,
        {
            **_config(level),
            "data_parallel": {"shard_optimizer_state": shard},
        },
        optimizer=optax.adam(1e-2),
        model=_model(),
        loss=models.cross_entropy,
        sample_inputs=x,
        loss_scale=boostax.DynamicLossScale(2.0**8, scale_window=4),
        mesh=jax.make_mesh((8,), ("data",)),
    )
    state = ts.init(_model().init(jax.random.PRNGKey(0), x, train=False))
    digits = _utils.digits()
    params, updated = [], []
    for i in range(STEPS):
        batch = (
            digits.x_train[BATCH * i : BATCH * (i + 1)],
            digits.y_train[BATCH * i : BATCH * (i + 1)],
        )
        state, metrics = ts(state, batch)
        params.append(jax.device_get(state.params))
        updated.append(bool(metrics["updated"]))
    return ts, state, params, updated


class ShardedLevelsTest(parameterized.TestCase):
    @parameterized.parameters("O0", "O1", "O2")
    def test_twenty_steps_equal_the_replicated_step(self, level):
        ts, state, params, _ = _run(level, shard=False)
        ts_sh, state_sh, params_sh, updated = _run(level, shard=True)
        self.assertTrue(ts_sh.data_parallel.shard_optimizer_state)
        self.assertEqual(
            ts_sh.config.enabled_algorithms, ts.config.enabled_algorithms
        )
        if level != "O0":
            self.assertIn("less_bn", ts.config.enabled_algorithms)
            self.assertIn("grad_freeze", ts.config.enabled_algorithms)
        if level == "O2":
            self.assertEqual(ts_sh.data_parallel.reduction, "adasum")
        if level != "O0":
            self.assertTrue(ts_sh.config.less_bn.gc_flag)
            # The centralized 3x3x16x16 kernel is split along its output
            # channels, the uncentralized 3x3x8x16 (fan-in 72) along its
            # first axis 8 (O1) or 4 (O2) divides, as without
            # centralization.
            split = ts_sh.builder.current_plan.split["BasicBlock_1"]
            self.assertEqual(split["Conv_1"]["kernel"], 3)
            self.assertEqual(split["Conv_0"]["kernel"], 2)
        for step in range(STEPS):
            jax.tree.map(
                functools.partial(
                    np.testing.assert_allclose,
                    rtol=1e-4,
                    atol=1e-5,
                    err_msg=f"step {step}",
                ),
                params_sh[step],
                params[step],
            )
        if level != "O0":
            # The first group is frozen at the updates of depth 1 only.
            depth = ts_sh.freezing.sequence[: STEPS // 2]
            self.assertIn(1, depth)
            for update, d in enumerate(depth):
                i = 2 * update + 1  # the micro-step that updates
                before = params_sh[i - 1]["Conv_0"]["kernel"]
                self.assertEqual(
                    np.array_equal(params_sh[i]["Conv_0"]["kernel"], before),
                    d == 1,
                )
        # The scale grew (no overflow for 4 updates) the same way.
        scale = jax.device_get(state.algorithms.loss_scale.loss_scale)
        self.assertGreater(float(scale), 2.0**8)
        np.testing.assert_array_equal(
            jax.device_get(state_sh.algorithms.loss_scale.loss_scale), scale
        )
        # An update every second micro-step, none skipped.
        self.assertEqual(updated, [False, True] * (STEPS // 2))
        # The state each device holds is smaller.
        self.assertLess(
            boostax.measure.state_bytes_per_device(state_sh)["opt_state"],
            0.5 * boostax.measure.state_bytes_per_device(state)["opt_state"],
        )


class ShardedParamsWithFreezingTest(parameterized.TestCase):
    """`shard_params=True` with gradient freezing (docs/scaling.md): its
    first step failed in the freezing warm-up's program, which reads the
    freeze depth from the state (``TracerIntegerConversionError`` in
    `Freezing.trains_everything`)."""

    @parameterized.named_parameters(
        # Two warm-up steps, then the depths' own programs.
        ("float32", None, 2),
        ("bfloat16", "bfloat16", None),  # the warm-up program throughout
    )
    def test_equals_the_replicated_step(self, precision, warmup):
        x = np.zeros((1, *SHAPE), np.float32)
        model = models.ResNet(stage_sizes=(1,), widths=(8,))
        digits = _utils.digits()
        params, depths = [], []
        for shard in (False, True):
            ts = boostax.auto_boost(
                "O1",
                {
                    "grad_freeze": {"param_groups": 2, "total_steps": 8},
                    "data_parallel": {
                        "shard_optimizer_state": shard,
                        "shard_params": shard or None,
                    },
                },
                optimizer=optax.adam(1e-2),
                model=model,
                loss=models.cross_entropy,
                sample_inputs=x,
                mesh=jax.make_mesh((8,), ("data",)),
                precision=precision,
                options=boostax.StepOptions(freeze_warmup_steps=warmup),
            )
            self.assertEqual(ts.builder.stores_sharded_params, shard)
            state = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
            run, depth = [], []
            for i in range(4):
                batch = slice(BATCH * i, BATCH * (i + 1))
                state, metrics = ts(
                    state, (digits.x_train[batch], digits.y_train[batch])
                )
                run.append(jax.device_get(ts.variables(state)["params"]))
                depth.append(int(metrics["frozen_groups"]))
            params.append(run)
            depths.append(depth)
        self.assertEqual(depths[0], depths[1])
        self.assertIn(1, depths[1])  # a step that froze the first group
        for step, (replicated, ours) in enumerate(zip(*params, strict=True)):
            close = functools.partial(
                np.testing.assert_allclose,
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"step {step}",
            )
            jax.tree.map(close, ours, replicated)


if __name__ == "__main__":
    absltest.main()
