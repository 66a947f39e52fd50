# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weights a user brings are kept: never re-initialised or transformed.

Through every entry point (`TrainStep.init`, `from_flax_train_state`, an
Orbax restore) and at every level: LessBN folds a trained BatchNorm it
removes into the layer before it (the model's evaluation outputs stay the
original's), keeps a trained BatchNorm that ``zero_init_residual`` would
zero, and refuses to put its FN head in place of a trained dense head; a
state's structure depends on the model only, never on the weights brought
in; a state of another model is refused before the step is bound to it;
and ``donate_state`` leaves the caller's arrays valid.
"""

import functools
import os
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl.testing import absltest
from flax import nnx
from flax.training import train_state
from hypothesis import given, settings
from hypothesis import strategies as st

import boostax
from boostax.examples import models
from tests import _models, _utils

X = np.random.default_rng(0).normal(size=(8, 8, 8, 1)).astype(np.float32)
Y = np.arange(8, dtype=np.int32) % 10
MODEL = models.ResNet(stage_sizes=(1, 1), widths=(8, 16))
FRESH = MODEL.init(jax.random.PRNGKey(0), X, train=False)
NO_FN_HEAD = {"less_bn": {"fn_flag": False}}
SMALL_FREEZE = {"grad_freeze": {"param_groups": 2, "total_steps": 4}}


class TrainState(train_state.TrainState):
    batch_stats: Any = None


def trained(variables, seed):
    """`variables` with random ("trained-looking") values in every leaf:
    BatchNorm variances in [0.5, 2], everything else normal."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        if jax.tree_util.keystr(path).endswith("['var']"):
            value = rng.uniform(0.5, 2.0, leaf.shape)
        else:
            value = rng.normal(size=leaf.shape) * 0.5
        return jnp.asarray(value, leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, variables)


def flax_state(variables, model=MODEL):
    return TrainState.create(
        apply_fn=model.apply,
        params=variables["params"],
        tx=optax.sgd(0.1),
        batch_stats=variables["batch_stats"],
    )


def original_outputs(variables, model=MODEL):
    return model.apply(variables, X, train=False)


def paths(tree):
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): leaf for p, leaf in flat}


class FoldTest(absltest.TestCase):
    def test_removed_batch_norms_fold_into_the_conv_before(self):
        variables = trained(FRESH, 1)
        reduced = boostax.less_bn(MODEL, X)
        converted = reduced.convert_variables(variables)
        # No removed BatchNorm has variables left but its shift, which the
        # bias-less conv before it cannot take: a constant at its path.
        report = boostax.less_bn_report(MODEL, X)
        for removed in report.removed:
            block, name = removed.path.split("/")
            self.assertNotIn(name, converted["params"][block])
            self.assertEqual(
                sorted(converted["batch_stats"][block][name]), ["fold_bias"]
            )
        np.testing.assert_allclose(
            reduced.apply(converted, X, train=False),
            original_outputs(variables),
            rtol=1e-5,
            atol=1e-5,
        )
        # Converting twice changes nothing.
        _utils.assert_trees_equal(
            reduced.convert_variables(converted), converted
        )

    def test_a_batch_norm_without_a_conv_before_keeps_its_affine(self):
        model = _models.DenseNetish()
        fresh = model.init(jax.random.PRNGKey(0), X, train=False)
        variables = trained(fresh, 2)
        reduced = boostax.less_bn(model, X)
        converted = reduced.convert_variables(variables)
        kinds = {
            tuple(sorted(leaves))
            for r in boostax.less_bn_report(model, X).removed
            for leaves in [
                functools.reduce(
                    dict.get, r.path.split("/"), converted["batch_stats"]
                )
            ]
        }
        self.assertIn(("fold_bias", "fold_scale"), kinds)
        np.testing.assert_allclose(
            reduced.apply(converted, X, train=False),
            original_outputs(variables, model),
            rtol=1e-5,
            atol=1e-5,
        )

    def test_fresh_batch_norms_keep_the_identity(self):
        # The structure of a trained model's, the function of a dropped
        # BatchNorm: nothing trainable added.
        reduced = boostax.less_bn(MODEL, X)
        converted = reduced.convert_variables(FRESH)
        self.assertFalse(
            any("fold" in path for path in paths(converted["params"]))
        )
        folds = {
            path: leaf
            for path, leaf in paths(converted).items()
            if "fold" in path
        }
        self.assertLen(folds, len(boostax.less_bn_report(MODEL, X).removed))
        for leaf in folds.values():
            np.testing.assert_array_equal(leaf, 0.0)
        self.assertEqual(
            jax.tree.structure(converted),
            jax.tree.structure(reduced.convert_variables(trained(FRESH, 1))),
        )
        _utils.assert_trees_equal(
            converted, reduced.init(jax.random.PRNGKey(0), X, train=False)
        )

    def test_nnx_folds_into_a_biased_layer_or_refuses(self):
        model = _models.NNXBottleneckNet(rngs=nnx.Rngs(0))
        # Trained-looking statistics: the convs have no bias to take the
        # shift, so the fold is refused, with the reason.
        for _, module in nnx.iter_modules(model):
            if isinstance(module, nnx.BatchNorm):
                module.mean[...] = module.mean[...] + 0.5
        with self.assertRaisesRegex(ValueError, "has no bias to take"):
            boostax.less_bn(model, X)


class InitialisationChoicesTest(absltest.TestCase):
    def _step(self, config, **kwargs):
        return boostax.auto_boost(
            "O1",
            config,
            optimizer=optax.sgd(0.1),
            model=MODEL,
            loss=models.cross_entropy,
            sample_inputs=X,
            **kwargs,
        )

    def test_zero_init_residual_leaves_trained_scales(self):
        variables = trained(FRESH, 3)
        ts = self._step(
            {"less_bn": {"fn_flag": False, "zero_init_residual": True}}
        )
        state = boostax.from_flax_train_state(
            ts, flax_state(variables), init_optimizer=True
        )
        scale = state.params["BasicBlock_0"]["BatchNorm_1"]["scale"]
        self.assertTrue(np.all(np.asarray(scale) != 0))
        np.testing.assert_array_equal(
            scale, variables["params"]["BasicBlock_0"]["BatchNorm_1"]["scale"]
        )
        # A fresh model still starts its residual branches at zero.
        fresh = ts.init(FRESH)
        np.testing.assert_array_equal(
            fresh.params["BasicBlock_0"]["BatchNorm_1"]["scale"], 0.0
        )

    def test_a_trained_dense_head_is_not_replaced(self):
        ts = self._step(None)  # O1's FN head
        for bring in (
            lambda v: ts.init(v),
            lambda v: boostax.from_flax_train_state(
                ts, flax_state(v), init_optimizer=True
            ),
        ):
            with self.assertRaisesRegex(ValueError, "'fn_flag': False"):
                bring(trained(FRESH, 4))
        # A fresh model gets the head, and the step is not bound to the
        # variables refused.
        state = ts.init(FRESH)
        self.assertIn("multiplier", state.params["Dense_0"])
        ts(state, (X, Y))

    def test_loss_scale_groups_of_a_trained_model(self):
        # Groups named on the original model cover a trained model's params:
        # its folds are model state, not parameters.
        paths = [
            "/".join(k.key for k in path)
            for path, _ in jax.tree_util.tree_leaves_with_path(FRESH["params"])
        ]
        ts = self._step(
            {
                "boost": {"mode": "manual", "loss_scale_group": True},
                **NO_FN_HEAD,
            },
            loss_scale=boostax.GroupLossScale(
                2.0**8, [paths[: len(paths) // 2], paths[len(paths) // 2 :]]
            ),
        )
        state = ts.init(trained(FRESH, 7))
        self.assertNotIn("BatchNorm_0", state.params["BasicBlock_1"])
        self.assertIn(
            "fold_bias",
            state.model_state["batch_stats"]["BasicBlock_1"]["BatchNorm_0"],
        )
        ts.loss_scale.labels(state.params)  # raises on a leaf not covered
        _, metrics = ts(state, (X, Y))
        self.assertTrue(np.isfinite(metrics["loss"]))


class StructureTest(absltest.TestCase):
    """A state's structure depends on the model and the step's settings,
    never on the values of the weights brought in."""

    def test_a_fresh_step_takes_trained_weights(self):
        ts = level_step("O1")
        fresh = ts.init(FRESH)  # the step's model, from fresh variables
        variables = trained(FRESH, 8)
        # A trained Flax state into the step a fresh init bound.
        state = boostax.from_flax_train_state(
            ts, flax_state(variables), init_optimizer=True
        )
        self.assertEqual(jax.tree.structure(state), jax.tree.structure(fresh))
        np.testing.assert_allclose(
            ts.predict(state, X), original_outputs(variables), atol=1e-5
        )
        state, _ = ts(state, (X, Y))
        # A run started from trained weights restores into a target built
        # from fresh variables.
        with tempfile.TemporaryDirectory() as directory:
            _utils.assert_trees_equal(restored(ts, state, directory), state)

    def test_the_kept_maps_are_constants_on_every_device(self):
        # O2 averages the model state over 8 devices; a fold's constants
        # are never averaged (rounding would move them) nor trained.
        ts = level_step("O2")
        state = ts.init(trained(FRESH, 9))
        folds = {
            path: leaf
            for path, leaf in paths(state.model_state).items()
            if "fold" in path
        }
        self.assertLen(folds, 3)
        new, _ = ts(state, (X, Y))
        for path, leaf in paths(new.model_state).items():
            if path in folds:
                np.testing.assert_array_equal(leaf, folds[path], err_msg=path)


class AnotherModelTest(absltest.TestCase):
    def test_refused_and_the_step_stays_its_models(self):
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=MODEL,
            loss=models.cross_entropy,
            sample_inputs=X,
        )
        wider = models.ResNet(stage_sizes=(1, 1), widths=(8, 32))
        other = wider.init(jax.random.PRNGKey(0), X, train=False)
        with self.assertRaisesRegex(
            ValueError,
            r"another model .*params/BasicBlock_1/BatchNorm_0/bias: shape "
            r"\(32,\), the model's is \(16,\)",
        ):
            boostax.from_flax_train_state(
                ts, flax_state(other, wider), init_optimizer=True
            )
        mlp = models.MLP(features=(16,))
        mlp_variables = mlp.init(jax.random.PRNGKey(0), X.reshape(8, -1))
        with self.assertRaisesRegex(ValueError, "MLP.apply.*ResNet"):
            boostax.from_flax_train_state(
                ts,
                train_state.TrainState.create(
                    apply_fn=mlp.apply,
                    params=mlp_variables["params"],
                    tx=optax.sgd(0.1),
                ),
            )
        state, _ = ts(ts.init(FRESH), (X, Y))  # its own state still trains
        self.assertEqual(int(state.step), 1)

    def test_without_sample_inputs_the_first_init_is_the_reference(self):
        ts = boostax.make_train_step(
            optax.sgd(0.1), model=MODEL, loss=models.cross_entropy
        )
        ts.init(FRESH)
        other = models.ResNet(stage_sizes=(1,), widths=(8,))
        variables = other.init(jax.random.PRNGKey(0), X, train=False)
        with self.assertRaisesRegex(ValueError, "another model: its params"):
            boostax.from_flax_train_state(
                ts, flax_state(variables, other), init_optimizer=True
            )


class DonateStateTest(absltest.TestCase):
    def test_the_callers_arrays_stay_valid(self):
        ts = boostax.make_train_step(
            optax.sgd(0.1),
            model=MODEL,
            loss=models.cross_entropy,
            options=boostax.StepOptions(donate_state=True),
        )
        variables = trained(FRESH, 5)
        rng = jax.random.PRNGKey(3)
        state, _ = ts(ts.init(variables, rng=rng), (X, Y))
        flax_copy = boostax.to_flax_train_state(ts, state, cls=TrainState)
        brought = flax_state(trained(FRESH, 6))
        from_flax = boostax.from_flax_train_state(ts, brought)
        state, _ = ts(state, (X, Y))
        ts(from_flax, (X, Y))
        for tree in (variables, rng, flax_copy, brought):
            for leaf in jax.tree.leaves(tree):
                if isinstance(leaf, jax.Array):
                    self.assertFalse(leaf.is_deleted())
        np.testing.assert_array_equal(flax_copy.step, 1)


# -- every entry point, every level: a random checkpoint keeps its leaves --

LEVELS = {
    "O0": dict(level="O0", config=None),
    "O1": dict(level="O1", config={**NO_FN_HEAD, **SMALL_FREEZE}),
    "O2": dict(
        level="O2",
        config={
            **NO_FN_HEAD,
            **SMALL_FREEZE,
            "common": {"device_number": 2},
        },
        mesh=True,
    ),
}


@functools.cache
def level_step(level):
    options = dict(LEVELS[level])
    mesh = jax.make_mesh((8,), ("data",)) if options.pop("mesh", 0) else None
    return boostax.auto_boost(
        options["level"],
        options["config"],
        optimizer=optax.sgd(0.1),
        model=MODEL,
        loss=models.cross_entropy,
        sample_inputs=X,
        mesh=mesh,
    )


def restored(ts, state, directory):
    """`state` saved with Orbax and restored into the documented target: the
    shapes and dtypes of a state `init` builds, here from fresh variables
    (any variables of the model build the same structure)."""
    path = os.path.join(directory, "state")
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, ts.init(FRESH))
        return checkpointer.restore(path, target)


def entry_points(ts, variables, directory):
    """The state of `variables` through `init`, `from_flax_train_state` and
    an Orbax restore of a saved state."""
    by_init = ts.init(variables)
    by_flax = boostax.from_flax_train_state(
        ts, flax_state(variables), init_optimizer=True
    )
    return {
        "init": by_init,
        "flax": by_flax,
        "orbax": restored(ts, by_init, directory),
    }


class EveryEntryPointTest(absltest.TestCase):
    @settings(max_examples=4, deadline=None, derandomize=True)
    @given(seed=st.integers(0, 2**16), level=st.sampled_from(sorted(LEVELS)))
    def test_a_random_checkpoint_keeps_every_leaf(self, seed, level):
        ts = level_step(level)
        variables = trained(FRESH, seed)
        report = ts.less_bn_report
        changed = set()
        if report is not None:
            # The removed BatchNorms and the layers they fold into.
            for fold in ts.model.folds:
                changed.add(fold.path)
                if fold.into is not None:
                    changed.add(fold.into)
        expected = original_outputs(variables)
        with tempfile.TemporaryDirectory() as directory:
            states = entry_points(ts, variables, directory)
        for name, state in states.items():
            held = paths(ts.variables(state))
            for path, leaf in paths(variables).items():
                if any(
                    path.startswith("".join(f"['{k}']" for k in (c, *module)))
                    for module in changed
                    for c in ("params", "batch_stats")
                ):
                    continue  # folded: the function is checked below
                np.testing.assert_array_equal(
                    held[path], leaf, err_msg=f"{level} {name} {path}"
                )
            np.testing.assert_allclose(
                ts.predict(state, X),
                expected,
                rtol=1e-5,
                atol=1e-5,
                err_msg=f"{level} {name}",
            )
        _utils.assert_trees_equal(states["orbax"], states["init"])


if __name__ == "__main__":
    absltest.main()
