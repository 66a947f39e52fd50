# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A whole `TrainState` checkpointed with Orbax and resumed continues the
uninterrupted run exactly."""

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl.testing import absltest, parameterized

import boostax
from tests import _utils
from tests import data_parallel_test as problem


def loss_fn(params, batch):
    x, y = batch
    for name in sorted(params)[:-1]:
        x = jnp.tanh(x @ params[name])
    return jnp.mean((x @ params[sorted(params)[-1]] - y) ** 2)


def _params():
    rng = np.random.default_rng(0)
    sizes = [4, 8, 8, 8, 8, 8, 1]
    return {
        f"layer{i}": jnp.asarray(
            rng.normal(size=(sizes[i], sizes[i + 1])) / 2, jnp.float32
        )
        for i in range(6)
    }


CONFIG = {
    "boost": {"mode": "manual", "less_bn": False},  # O2: freezing + AdaSum
    "common": {"device_number": 2},
    "grad_freeze": {"param_groups": 2, "total_steps": 6},
}


def _train_step(precision=None):
    return boostax.auto_boost(
        "O2",
        CONFIG,
        optimizer=optax.adam(1e-2),
        loss_fn=loss_fn,
        loss_scale=boostax.DynamicLossScale(
            loss_scale_value=2.0**12, scale_window=2
        ),
        mesh=jax.make_mesh((8,), ("data",)),
        precision=precision,
    )


class CheckpointTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("float32", None),
        ("float16", "O2"),  # MindSpore's amp_level="O2" beside boost O2
    )
    def test_o2_with_loss_scaling_resumes_exactly(self, precision):
        batches = [problem._batch(seed) for seed in range(6)]
        ts = _train_step(precision)
        state = ts.init(_params())
        for batch in batches:
            state, _ = ts(state, batch)
        uninterrupted = state

        first = _train_step(precision)
        state = first.init(_params())
        for batch in batches[:3]:
            state, _ = first(state, batch)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "state")
            with ocp.StandardCheckpointer() as checkpointer:
                checkpointer.save(path, state)
            # A new process would rebuild the step and restore into the
            # shapes and shardings of a fresh state.
            second = _train_step(precision)
            target = jax.tree.map(
                ocp.utils.to_shape_dtype_struct,
                second.init(_params()),
            )
            with ocp.StandardCheckpointer() as checkpointer:
                state = checkpointer.restore(path, target)
        for batch in batches[3:]:
            state, metrics = second(state, batch)
        self.assertIn("frozen_groups", metrics)
        self.assertIn("loss_scale", metrics)
        self.assertEqual(int(state.step), 6)
        _utils.assert_trees_equal(state, uninterrupted)
        # Adam's moments are per device (AdaSum of the updates).
        self.assertEqual(
            state.opt_state.inner_state[0].mu["layer5"].shape, (8, 8, 1)
        )


if __name__ == "__main__":
    absltest.main()
