# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Every subset of the switches either trains or is refused with a reason."""

import itertools
import warnings

import jax
import numpy as np
import optax
from absl.testing import absltest, parameterized

import boostax
from boostax import mindspore as boost
from boostax.examples import models
from tests import _utils

SWITCHES = boostax.ALGORITHMS
# The only pairs that contradict (see auto_boost.INCOMPATIBLE).
REFUSED = (("dim_reduce", "grad_freeze"), ("dim_reduce", "adasum"))


def _subsets():
    for size in range(len(SWITCHES) + 1):
        for subset in itertools.combinations(SWITCHES, size):
            yield ("_".join(subset) or "none", frozenset(subset))


def _config(subset):
    # Only the sections of the algorithms that are on: a setting of one that
    # is off warns (it would change nothing).
    sections = {
        "grad_freeze": {"grad_freeze": {"param_groups": 2, "total_steps": 4}},
        "grad_accumulation": {
            "grad_accumulation": {"grad_accumulation_step": 2}
        },
        "dim_reduce": {"dim_reduce": {"n_components": 2}},
        "adasum": {"common": {"device_number": 1}},
    }
    config = {"boost": {"mode": "manual", **{s: s in subset for s in SWITCHES}}}
    for name in subset:
        config.update(sections.get(name, {}))
    return config


def _pca_rows(n, k=2):
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(n, k)))
    return q.T


class CombinationsTest(parameterized.TestCase):
    @parameterized.named_parameters(*_subsets())
    def test_trains_or_is_refused(self, subset):
        model = models.MLP(features=(8, 8))
        digits = _utils.digits(flat=True)
        x, y = digits.x_train[:16], digits.y_train[:16]
        variables = model.init(jax.random.PRNGKey(0), x[:1])
        kwargs = dict(
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=x[:1],
        )
        if "adasum" in subset:
            kwargs["mesh"] = jax.make_mesh(
                (2,), ("data",), devices=jax.devices()[:2]
            )
        trained = variables["params"]
        if "less_bn" in subset:  # the FN head replaces the last Dense
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "LessBN", UserWarning)
                reduced = boostax.less_bn(model, x[:1], fn_flag=True)
            trained = reduced.init(jax.random.PRNGKey(0), x[:1])["params"]
        if "loss_scale_group" in subset:
            paths = [
                "/".join(k.key for k in path)
                for path, _ in jax.tree_util.tree_leaves_with_path(trained)
            ]
            kwargs["loss_scale"] = boost.GroupLossScaleManager(2.0**8, [paths])
        if "dim_reduce" in subset:
            kwargs["options"] = boostax.StepOptions(
                pca_matrix=_pca_rows(boostax.flatten_params(trained)[0].size)
            )
        refused = [pair for pair in REFUSED if set(pair) <= subset]
        if refused:
            with self.assertRaisesRegex(
                ValueError, f"`{refused[0][0]}` and `{refused[0][1]}` cannot"
            ):
                boostax.auto_boost("O0", _config(subset), **kwargs)
            return
        with warnings.catch_warnings():
            # LessBN finds no BatchNorm structure in an MLP and says so.
            warnings.filterwarnings("ignore", "LessBN", UserWarning)
            ts = boostax.auto_boost("O0", _config(subset), **kwargs)
        state = ts.init(variables)
        before = state.params
        # Accumulation updates on the second micro-step, which trains the
        # same freeze depth as the first: one compiled step either way.
        for _ in range(2 if "grad_accumulation" in subset else 1):
            state, metrics = ts(state, (x, y))
            self.assertTrue(np.isfinite(metrics["loss"]))
        self.assertEqual(ts.trace_count, 1)
        changed = jax.tree.map(
            lambda a, b: not np.array_equal(a, b), state.params, before
        )
        self.assertTrue(any(jax.tree.leaves(changed)))
        self.assertEqual("overflow" in metrics, "loss_scale_group" in subset)
        self.assertEqual("frozen_groups" in metrics, "grad_freeze" in subset)
        self.assertEqual(ts.data_parallel is not None, "adasum" in subset)


if __name__ == "__main__":
    absltest.main()
