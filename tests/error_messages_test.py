# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Mistakes a new user makes get boostax's error, naming what to fix.

Each case used to fail inside NumPy, Flax or Optax (a broadcast error, a
pytree structure error, ``ScopeParamShapeError``, "needs PRNG for
'noise'", a ``MemoryError``) or with an ``AttributeError``. Now each raises
``TypeError``/``ValueError`` naming the argument, what it must be and what
was given. The step errors surface when the step is traced: the tests trace
(``ts.trace``) and never compile.
"""

import functools
import os
import tempfile

import jax
import numpy as np
import optax
from absl.testing import absltest
from flax import linen as nn

import boostax
from boostax.examples import models
from tests import _utils

SGD = optax.sgd(0.1)
CE = models.cross_entropy
X = np.zeros((4, 8), np.float32)  # MLP inputs
Y = np.zeros(4, np.int32)
IMAGES = np.zeros((4, 8, 8, 3), np.float32)  # ResNet inputs
LESS_BN = {"boost": {"mode": "manual", "less_bn": True}}


def _mlp_step(**kwargs):
    model = models.MLP(features=(8,))
    step = boostax.make_train_step(
        SGD, model=model, loss=CE, **_utils.with_step_options(kwargs)
    )
    return step, model.init(jax.random.PRNGKey(0), X)


def _resnet():
    return models.ResNet(stage_sizes=(1,), widths=(4,))


class Noisy(nn.Module):
    """Draws from an RNG stream named 'noise' in training."""

    @nn.compact
    def __call__(self, x):
        x = x + jax.random.normal(self.make_rng("noise"), x.shape)
        return nn.Dense(10)(x)


class DevicesTest(absltest.TestCase):
    def test_a_state_of_another_device_count_names_both(self):
        # Was JAX's "Received incompatible devices for jitted computation".
        def step(devices):
            mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("d",))
            return _mlp_step(data_parallel=boostax.DataParallel(mesh))

        eight, variables = step(8)
        state = eight.init(variables)
        four, _ = step(4)
        with self.assertRaisesRegex(
            ValueError,
            r"`state.step` is on 8 devices \(\[0, 1, 2, 3, 4, 5, 6, 7\]\), "
            r"and this step runs on the 4 devices of its mesh \(\[0, 1, 2, "
            r"3\]\).*Restore its checkpoint into this step's template",
        ):
            four(state, (X, Y))


class SampleInputsTest(absltest.TestCase):
    def test_wrong_rank_names_sample_inputs(self):
        # Was NumPy's "operands could not be broadcast together" from Flax.
        with self.assertRaisesRegex(
            ValueError,
            r"Tracing the model on `sample_inputs` failed: `sample_inputs` "
            r"must be one batch of the inputs .* got float32\[4, 64\]\. The "
            r"model raised",
        ):
            boostax.auto_boost(
                "O1",
                LESS_BN,
                optimizer=SGD,
                model=_resnet(),
                loss=CE,
                sample_inputs=np.zeros((4, 64), np.float32),
            )


class NoStateTest(absltest.TestCase):
    def test_none_is_refused_naming_state(self):
        # predict and variables raised AttributeError ('NoneType' object has
        # no attribute 'params').
        step, _ = _mlp_step()
        message = r"^`state` must be the boostax\.TrainState .* got NoneType"
        calls = {
            "predict": lambda: step.predict(None, X),
            "variables": lambda: step.variables(None),
            "at_depth": lambda: step.at_depth(None)(None, (X, Y)),
            "call": lambda: step(None, (X, Y)),
            "trace": lambda: step.trace(None, (X, Y)),
            "step_bytes": lambda: boostax.measure.step_bytes(
                step, None, (X, Y)
            ),
        }
        for name, call in calls.items():
            with self.subTest(name), self.assertRaisesRegex(TypeError, message):
                call()

    def test_none_after_a_step_whose_result_was_dropped(self):
        # The step remembers the state it returned by weak reference; once
        # that state is gone the reference gives None, which passed for the
        # step's own state (AttributeError: 'NoneType' has no 'params').
        step, variables = _mlp_step()
        step(step.init(variables), (X, Y))  # the new state is dropped
        with self.assertRaisesRegex(TypeError, "^`state` must be the"):
            step(None, (X, Y))


class DonatedStateTest(absltest.TestCase):
    def test_predict_and_variables_on_a_donated_state_say_so(self):
        # predict raised JAX's "RuntimeError: Array has been deleted with
        # shape=float32[8]"; variables returned deleted arrays, which failed
        # wherever they were read.
        step, variables = _mlp_step(donate_state=True)
        donated = step.init(variables)
        state, _ = step(donated, (X, Y))
        message = (
            r"^The state's arrays are deleted \(\.step, \.params.*: it was "
            r"donated to an earlier call of a step with `donate_state=True`"
            r".* Pass the state that call returned"
        )
        calls = {
            "predict": lambda: step.predict(donated, X),
            "variables": lambda: step.variables(donated),
        }
        for name, call in calls.items():
            with self.subTest(name):
                with self.assertRaisesRegex(ValueError, message):
                    call()
        self.assertEqual(step.predict(state, X).shape, (4, 10))
        self.assertFalse(
            any(x.is_deleted() for x in jax.tree.leaves(step.variables(state)))
        )


class BatchAndCountersTest(absltest.TestCase):
    def test_a_batch_without_a_batch_dimension_is_refused(self):
        # A scalar input failed in the model ("axis 1 is out of bounds"), an
        # empty one in Flax's initializer (ZeroDivisionError).
        step, variables = _mlp_step()
        state = step.init(variables)
        for inputs, seen in (
            (0, r"inputs is a scalar, got (int \(0\)|a traced int32\[\])"),
            (np.zeros((4, 0)), r"inputs has shape \(4, 0\), which holds no"),
        ):
            with (
                self.subTest(seen),
                self.assertRaisesRegex(
                    ValueError,
                    r"^The batch must be \(inputs, targets\) arrays whose "
                    r"first dimension is the batch size \(>= 1\): " + seen,
                ),
            ):
                step(state, (inputs, Y))

    def test_a_numpy_key_is_held_as_a_jax_array(self):
        step, variables = _mlp_step()
        key = np.asarray(jax.random.PRNGKey(3))
        state = step.init(variables, rng=key)
        self.assertIsInstance(state.rng, jax.Array)
        np.testing.assert_array_equal(state.rng, key)

    def test_a_state_with_a_bad_rng_or_step_is_refused(self):
        # Was JAX's "invalid PRNG key data" from inside the step.
        step, variables = _mlp_step()
        state = step.init(variables)
        with self.assertRaisesRegex(
            ValueError, r"^`state\.rng` must be a JAX PRNG key .* float32\[2\]"
        ):
            step(state.replace(rng=np.zeros(2, np.float32)), (X, Y))
        with self.assertRaisesRegex(
            ValueError, r"^`state\.step` must be an int32 scalar .* float32\[\]"
        ):
            step(state.replace(step=np.float32(3)), (X, Y))


class WeightDecayMaskTest(absltest.TestCase):
    def test_wrong_structure_names_the_mask(self):
        # Was a bare "pytree structure error: different numbers of pytree
        # children" from jax.tree.map inside Optax.
        model = models.MLP(features=(8,))
        step = boostax.auto_boost(
            optimizer=SGD,
            model=model,
            loss=CE,
            options=boostax.StepOptions(
                weight_decay=1e-4,
                weight_decay_mask={"Dense_0": {"kernel": True, "bias": False}},
            ),
        )
        variables = model.init(jax.random.PRNGKey(0), X)
        with self.assertRaisesRegex(
            ValueError,
            r"`weight_decay_mask` must have the params' structure .* it is "
            r"\{'Dense_0': \{'bias': \*, 'kernel': \*\}\} for params "
            r"\{'Dense_0': .*, 'Dense_1': .*\}",
        ):
            step.init(variables)  # Optax's masked init reads the mask


class ModelCallTest(absltest.TestCase):
    def test_swapped_batch_keys_name_batch_keys(self):
        # Was Flax's ScopeParamShapeError.
        step, variables = _mlp_step(batch_keys=("label", "image"))
        state = step.init(variables)
        with self.assertRaisesRegex(
            ValueError,
            r"The model's params do not fit the batch's inputs \(its 'label' "
            r"entry, `batch_keys`=\('label', 'image'\)\), int32\[4\]: the "
            r"model builds `state\.params\['Dense_0'\]\['kernel'\]` with "
            r"shape \(1, 8\), the state holds \(8, 8\)\. Check that "
            r"`batch_keys` is \(inputs key, targets key\) in that order",
        ):
            step.trace(state, {"image": X, "label": Y})

    def test_missing_rng_stream_names_rng_collections(self):
        # Was Flax's InvalidRngError: 'None needs PRNG for "noise"'.
        model = Noisy()
        step = boostax.make_train_step(SGD, model=model, loss=CE)
        keys = {"params": jax.random.PRNGKey(0), "noise": jax.random.key(1)}
        state = step.init(model.init(keys, X))
        with self.assertRaisesRegex(
            ValueError,
            r"draws from the RNG stream 'noise', which `rng_collections` "
            r"\(\('dropout',\)\) does not name: build the step with "
            r"`options=boostax.StepOptions\(rng_collections=\('dropout', "
            r"'noise'\)\)`",
        ):
            step.trace(state, (X, Y))

    def test_fn_head_state_in_a_step_without_it_names_the_head(self):
        # Was Flax's ScopeParamNotFoundError.
        model = _resnet()
        variables = model.init(jax.random.PRNGKey(0), IMAGES)

        def step(fn_flag):
            config = {**LESS_BN, "less_bn": {"fn_flag": fn_flag}}
            return boostax.auto_boost(
                "O1",
                config,
                optimizer=SGD,
                model=model,
                loss=CE,
                sample_inputs=IMAGES,
            )

        state = step(True).init(variables)
        with self.assertRaisesRegex(
            ValueError,
            r"`state\.params` does not fit the model: at "
            r"`state\.params\['Dense_0'\]` .* builds \{'bias': \*, 'kernel': "
            r"\*\}, the state holds \{'kernel': \*, 'multiplier': \*\}: the "
            r"state holds LessBN's FN head there \(a step built with "
            r"`less_bn.fn_flag` True\)",
        ):
            step(False).trace(state, (IMAGES, Y))


class TotalStepsTest(absltest.TestCase):
    def test_a_sequence_too_long_to_compute_is_refused(self):
        # o1_recipe(10**12) (then `recipe`) was accepted, then the freeze
        # sequence asked for 7.35 TiB (MemoryError).
        bound = r"\[1, 16777216\] \(the freeze sequence holds one int32 per "
        with self.assertRaisesRegex(ValueError, r"^`total_steps` .*" + bound):
            boostax.o1_recipe(10**12)
        with self.assertRaisesRegex(TypeError, "^`total_steps` must be an int"):
            boostax.o1_recipe("1000")
        with self.assertRaisesRegex(
            ValueError, r"^`grad_freeze\.total_steps` must be in " + bound
        ):
            boostax.BoostConfig.from_dict(
                {"grad_freeze": {"total_steps": 2**24 + 1}}, level="O1"
            )
        with self.assertRaisesRegex(ValueError, r"^`total_steps` .*" + bound):
            boostax.generate_freeze_index_sequence(4, 2, 0.5, 10**12)
        self.assertEqual(
            boostax.o1_recipe(2**24)["grad_freeze"]["total_steps"], 2**24
        )


class PCAFileShapeTest(absltest.TestCase):
    def test_a_file_one_column_short_names_the_expected_shape(self):
        # Was "must have orthonormal rows": the rows of an orthonormal P
        # with a column dropped are not orthonormal any more.
        model = models.MLP(features=(2,), num_classes=2)
        n = 8 * 2 + 2 + 2 * 2 + 2  # the MLP's parameters
        q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(n, 3)))
        path = os.path.join(tempfile.mkdtemp(), "pca.npy")
        boostax.save_pca_matrix(path, q.T[:, :-1].astype(np.float32))
        config = {
            "boost": {"mode": "manual", "dim_reduce": True},
            "dim_reduce": {"n_components": 3, "pca_mat_path": path},
        }
        boost = functools.partial(
            boostax.auto_boost,
            "O0",
            config,
            optimizer=SGD,
            model=model,
            loss=CE,
            sample_inputs=X,
        )
        with self.assertRaisesRegex(
            ValueError,
            rf"pca\.npy' has shape \(3, {n - 1}\), expected \(3, {n}\) "
            r"\(n_components, number of parameters\)",
        ):
            boost()
        with self.assertRaisesRegex(
            ValueError, rf"`pca_matrix` has shape \(3, {n - 1}\), expected"
        ):
            boost(options=boostax.StepOptions(pca_matrix=q.T[:, :-1]))


class StateBytesTest(absltest.TestCase):
    def test_none_or_variables_are_refused_naming_state(self):
        # Was AttributeError: 'NoneType' object has no attribute 'params'.
        message = r"^`state` must be a boostax\.TrainState: .* got "
        with self.assertRaisesRegex(TypeError, message + "NoneType"):
            boostax.measure.state_bytes_per_device(None)
        step, variables = _mlp_step()
        with self.assertRaisesRegex(
            TypeError, message + r"dict .* pass them to `init`\.$"
        ):
            boostax.measure.state_bytes_per_device(variables)
        shapes = jax.eval_shape(step.init, variables)
        params = sum(x.size * 4 for x in jax.tree.leaves(variables))
        self.assertEqual(
            boostax.measure.state_bytes_per_device(shapes)["params"], params
        )


class MultiStepsTest(absltest.TestCase):
    def test_multi_steps_is_refused_with_both_ways_out(self):
        # Was "must be an optax.GradientTransformation, got MultiSteps",
        # with no word of `gradient_transformation()`.
        multi = optax.MultiSteps(SGD, every_k_schedule=2)
        model = models.MLP(features=(8,))
        objective = boostax.make_objective(model=model, loss=CE)
        calls = {
            "auto_boost": lambda: boostax.auto_boost(
                "O0", optimizer=multi, model=model, loss=CE, sample_inputs=X
            ),
            "make_train_step": lambda: boostax.make_train_step(
                multi, model=model, loss=CE
            ),
            "TrainStep": lambda: boostax.TrainStep(objective, multi),
        }
        message = (
            r"^`optimizer` must be an optax\.GradientTransformation, got an "
            r"optax\.MultiSteps, .* `multi_steps\.gradient_transformation\(\)`"
            r".*\(the `grad_accumulation` config section, .* "
            r"`boostax\.gradient_accumulation\(inner, k\)`"
        )
        for name, call in calls.items():
            with self.subTest(name), self.assertRaisesRegex(TypeError, message):
                call()
        # Both ways out are accepted.
        boostax.make_train_step(
            multi.gradient_transformation(), model=model, loss=CE
        )
        config = boostax.BoostConfig.from_dict(
            {
                "boost": {"mode": "manual", "grad_accumulation": True},
                "grad_accumulation": {"grad_accumulation_step": 2},
            }
        )
        self.assertTrue(config.is_enabled("grad_accumulation"))


if __name__ == "__main__":
    absltest.main()
