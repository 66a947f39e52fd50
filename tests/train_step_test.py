# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.step.train_step` and
`boostax._src.step.objectives`."""

import dataclasses
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx

import boostax
from boostax._src.step import objectives as objectives_lib
from boostax.examples import baseline, data, models
from tests import _utils

SMALL_RESNET = dict(stage_sizes=(1, 1), widths=(16, 32))


def _batches(flat, n, batch_size=32):
    digits = _utils.digits(flat)
    it = data.batches(
        digits.x_train, digits.y_train, batch_size, seed=0, epoch=0
    )
    return [next(it) for _ in range(n)]


class MatchesHandWrittenStepTest(parameterized.TestCase):
    """O0 is the hand-written Optax step: same bits after 3 steps in f32."""

    @parameterized.named_parameters(
        ("mlp_sgd", "mlp", optax.sgd(0.1, momentum=0.9)),
        ("mlp_adam", "mlp", optax.adam(1e-3)),
        ("resnet_sgd", "resnet", optax.sgd(0.1, momentum=0.9)),
        ("resnet_adamw", "resnet", optax.adamw(1e-3, weight_decay=1e-4)),
    )
    def test_linen(self, kind, optimizer):
        if kind == "mlp":
            model, flat, kwargs = models.MLP(), True, {}
        else:
            model = models.ResNet(**SMALL_RESNET)
            flat, kwargs = False, {"train": True}
        batches = _batches(flat, 3)
        variables = model.init(
            jax.random.PRNGKey(1),
            batches[0][0],
            **({"train": False} if kwargs else {}),
        )
        plain_step = baseline.make_plain_step(
            model, optimizer, models.cross_entropy, **kwargs
        )
        plain = baseline.init_plain_state(variables, optimizer)
        ts = boostax.auto_boost(
            "O0", optimizer=optimizer, model=model, loss=models.cross_entropy
        )
        state = ts.init(variables)
        for batch in batches:
            plain, plain_loss = plain_step(plain, batch)
            state, metrics = ts(state, batch)
            np.testing.assert_array_equal(metrics["loss"], plain_loss)
        _utils.assert_trees_equal(state.params, plain.params)
        _utils.assert_trees_equal(state.model_state, plain.model_state)
        _utils.assert_trees_equal(state.opt_state, plain.opt_state)
        if kind == "resnet":  # the BatchNorm statistics did move
            self.assertFalse(
                np.array_equal(
                    jax.tree.leaves(state.model_state)[0],
                    jax.tree.leaves(variables["batch_stats"])[0],
                )
            )
        self.assertEqual(int(state.step), 3)
        self.assertEqual(ts.trace_count, 1)
        # O0 launches as many kernels as the hand-written step, and as many
        # copies: none of the base key it returns as given (the step
        # counter is Flax's; boostax's saturates, which XLA may fuse).
        hand_written = plain_step.lower(plain, batches[0]).compile()
        (program,) = ts.compile_all(state, batches[0]).values()
        kernels = boostax.measure.kernel_counts(program.as_text())
        expected = boostax.measure.kernel_counts(hand_written.as_text())
        self.assertEqual(sum(kernels.values()), sum(expected.values()))
        self.assertEqual(kernels.get("copy"), expected.get("copy"))

    def test_nnx_resnet(self):
        batches = _batches(False, 3)
        optimizer = optax.sgd(0.1, momentum=0.9)
        model = models.NNXResNet(**SMALL_RESNET, rngs=nnx.Rngs(0))
        ts = boostax.auto_boost(
            "O0", optimizer=optimizer, model=model, loss=models.cross_entropy
        )
        state = ts.init(model)

        # The hand-written NNX step, as in the Flax NNX examples.
        reference = nnx.clone(model)
        reference.train()
        nnx_optimizer = nnx.Optimizer(reference, optimizer, wrt=nnx.Param)

        @nnx.jit
        def nnx_step(model, nnx_optimizer, x, y):
            loss_fn = lambda m: models.cross_entropy(m(x), y)
            loss, grads = nnx.value_and_grad(loss_fn)(model)
            nnx_optimizer.update(model, grads)
            return loss

        for x, y in batches:
            loss = nnx_step(reference, nnx_optimizer, x, y)
            state, metrics = ts(state, (x, y))
            np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-6)
        _utils.assert_trees_all_close(
            state.params,
            nnx.state(reference, nnx.Param),
            rtol=1e-5,
            atol=1e-6,
        )
        _utils.assert_trees_all_close(
            state.model_state,
            nnx.state(reference, nnx.BatchStat),
            rtol=1e-5,
            atol=1e-6,
        )
        self.assertEqual(ts.trace_count, 1)
        # The module given to auto_boost is left as it was.
        _utils.assert_trees_equal(
            nnx.state(model, nnx.Param), ts.objective.split(None)[0]
        )
        trained = ts.variables(state)
        self.assertIsInstance(trained, models.NNXResNet)
        _utils.assert_trees_equal(nnx.state(trained, nnx.Param), state.params)

    def test_plain_function(self):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(16, 3)).astype(np.float32)
        y = rng.normal(size=(16,)).astype(np.float32)

        def loss_fn(params, batch):
            inputs, targets = batch
            return jnp.mean((inputs @ params["w"] + params["b"] - targets) ** 2)

        optimizer = optax.adam(0.05)
        params = {"w": jnp.zeros(3), "b": jnp.zeros(())}

        @jax.jit
        def plain_step(params, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        ts = boostax.make_train_step(optimizer, loss_fn=loss_fn)
        state = ts.init(params)
        opt_state = optimizer.init(params)
        for _ in range(3):
            params, opt_state, loss = plain_step(params, opt_state, (x, y))
            state, metrics = ts(state, (x, y))
            np.testing.assert_array_equal(metrics["loss"], loss)
        _utils.assert_trees_equal(state.params, params)
        _utils.assert_trees_equal(state.opt_state, opt_state)
        self.assertIsNone(state.model_state)


class TrainStepTest(parameterized.TestCase):
    def test_traced_once(self):
        model = models.ResNet(**SMALL_RESNET)
        batches = _batches(False, 5)
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), batches[0][0]))
        for batch in batches:
            state, _ = ts(state, batch)
        self.assertEqual(ts.trace_count, 1)
        self.assertEqual(list(ts.compile_seconds), [None])  # one executable

    def test_loss_decreases_on_digits(self):
        digits = _utils.digits(flat=True)
        model = models.MLP()
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.adam(3e-3),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), digits.x_train[:1]))
        losses = []
        for epoch in range(3):
            for batch in data.batches(
                digits.x_train, digits.y_train, 64, seed=0, epoch=epoch
            ):
                state, metrics = ts(state, batch)
                losses.append(float(metrics["loss"]))
        self.assertLess(np.mean(losses[-10:]), 0.5 * np.mean(losses[:10]))
        accuracy = baseline.accuracy(
            lambda x: ts.predict(state, x), digits.x_test, digits.y_test
        )
        self.assertGreater(accuracy, 0.9)
        self.assertEqual(ts.trace_count, 1)

    def test_aux_metrics(self):
        def loss(logits, labels):
            value = models.cross_entropy(logits, labels)
            accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
            return value, {"accuracy": accuracy}

        model = models.MLP(features=(8,))
        ((x, y),) = _batches(True, 1)
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=model,
            loss=loss,
            options=boostax.StepOptions(has_aux=True),
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x))
        _, metrics = ts(state, (x, y))
        self.assertEqual(set(metrics), {"loss", "accuracy"})
        self.assertBetween(float(metrics["accuracy"]), 0.0, 1.0)

    def test_dropout_gets_a_fresh_key_each_step(self):
        class DropoutNet(nn.Module):
            @nn.compact
            def __call__(self, x, train: bool = True):
                x = nn.Dropout(0.5, deterministic=not train)(x)
                return nn.Dense(10)(x)

        model = DropoutNet()
        x, y = _batches(True, 1)[0]
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.0),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
        state1, m1 = ts(state, (x, y))
        _, m2 = ts(state1, (x, y))
        _, m1_again = ts(state, (x, y))
        self.assertNotEqual(float(m1["loss"]), float(m2["loss"]))
        self.assertEqual(float(m1["loss"]), float(m1_again["loss"]))
        # Evaluation is deterministic.
        np.testing.assert_array_equal(
            ts.predict(state, x), ts.predict(state, x)
        )

    def test_resume_from_a_saved_state_equals_uninterrupted(self):
        model = models.ResNet(**SMALL_RESNET)
        batches = _batches(False, 4)
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.adam(1e-3),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), batches[0][0]))
        for batch in batches:
            state, _ = ts(state, batch)
        resumed = ts.init(model.init(jax.random.PRNGKey(0), batches[0][0]))
        for batch in batches[:2]:
            resumed, _ = ts(resumed, batch)
        saved = jax.device_get(resumed)  # what a checkpoint holds
        resumed = jax.tree.map(jnp.asarray, saved)
        for batch in batches[2:]:
            resumed, _ = ts(resumed, batch)
        _utils.assert_trees_equal(resumed, state)

    def test_state_is_a_pytree_that_survives_jit(self):
        model = models.MLP(features=(8,))
        x, _ = _batches(True, 1)[0]
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.adam(1e-3),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x))
        _utils.assert_trees_equal(jax.jit(lambda s: s)(state), state)
        self.assertIsInstance(state.algorithms, boostax.AlgorithmStates)
        self.assertEqual(state.step.dtype, jnp.int32)

    def test_line_search_optimizer_gets_value_fn(self):
        # optax.lbfgs needs `value`, `grad` and `value_fn` extra arguments.
        target = jnp.array([1.0, -2.0, 3.0])

        def loss_fn(params, batch):
            del batch
            return jnp.sum((params - target) ** 2 * jnp.array([1.0, 10.0, 100]))

        ts = boostax.make_train_step(optax.lbfgs(), loss_fn=loss_fn)
        state = ts.init(jnp.zeros(3))
        for _ in range(10):
            state, metrics = ts(state, None)
        np.testing.assert_allclose(state.params, target, rtol=1e-4)

    def test_donated_state(self):
        model = models.MLP(features=(8,))
        x, y = _batches(True, 1)[0]
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
            options=boostax.StepOptions(donate_state=True),
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x))
        for _ in range(2):
            state, _ = ts(state, (x, y))
        self.assertEqual(int(state.step), 2)

    def test_the_base_key_is_not_a_program_output(self):
        # An output that is an input is a copy kernel and a new buffer per
        # call (donated, an aliased output still dispatched): the key (and
        # the state's fingerprint) is passed apart and put back on the
        # host, with or without donation.
        model = models.MLP(features=(8,))
        x, y = _batches(True, 1)[0]
        for donate in (False, True):
            ts = boostax.make_train_step(
                optax.sgd(0.1),
                model=model,
                loss=models.cross_entropy,
                options=boostax.StepOptions(donate_state=donate),
            )
            state = ts.init(model.init(jax.random.PRNGKey(0), x))
            rng = np.asarray(state.rng)
            fingerprint = np.asarray(state.fingerprint)
            (program,) = ts.compile_all(state, (x, y)).values()
            outputs = len(jax.tree.leaves(state)) + 1  # and the loss
            self.assertLen(
                jax.tree.leaves(program.compiled.out_info),
                outputs - 2,
            )
            state, _ = ts(state, (x, y))  # the call puts it back
            state, _ = program(state, (x, y))  # and so does the program
            nested = jax.jit(ts.step)  # traceable
            state, _ = nested(state, (x, y))
            np.testing.assert_array_equal(state.rng, rng)
            np.testing.assert_array_equal(state.fingerprint, fingerprint)
            self.assertEqual(int(state.step), 3)

    def test_no_host_callbacks_in_the_step(self):
        # Nothing ties the step to the CPU: no Python callbacks in the HLO.
        model = models.ResNet(**SMALL_RESNET)
        x, y = _batches(False, 1)[0]
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x))
        text = ts.lower(state, (x, y)).as_text()
        self.assertNotIn("callback", text)
        self.assertNotIn("cpu", text.lower())


class PerCallWorkTest(absltest.TestCase):
    """A call repeats no check an earlier call of the same kind made."""

    def _step_and_state(self, **kwargs):
        model = models.MLP(features=(8,))
        x, y = _batches(True, 1)[0]
        ts = boostax.make_train_step(
            optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
            **_utils.with_step_options(kwargs),
        )
        variables = model.init(jax.random.PRNGKey(0), x)
        return ts, variables, (x, y)

    def test_batch_checked_once_per_signature(self):
        ts, variables, (x, y) = self._step_and_state()
        state = ts.init(variables)
        with mock.patch.object(
            objectives_lib,
            "check_batch_sizes",
            wraps=objectives_lib.check_batch_sizes,
        ) as check:
            for _ in range(3):
                state, _ = ts(state, (x, y))
            self.assertEqual(check.call_count, 1)
            # Other shapes (a smaller last batch) are checked once too.
            for _ in range(2):
                state, _ = ts(state, (x[:8], y[:8]))
            state, _ = ts(state, (x, y))
            self.assertEqual(check.call_count, 2)
        # A batch of new shapes is still refused, before it runs.
        with self.assertRaisesRegex(ValueError, r"inputs: 32, targets: 16\."):
            ts(state, (x, y[:16]))
        self.assertEqual(int(state.step), 6)

    def test_state_checked_once(self):
        ts, variables, batch = self._step_and_state()
        state = ts.init(variables)
        with mock.patch.object(
            ts.builder, "check_state", wraps=ts.builder.check_state
        ) as check:
            for _ in range(3):
                state, _ = ts(state, batch)
            self.assertEqual(check.call_count, 1)
            ts(ts.init(variables), batch)  # a state it did not return
            self.assertEqual(check.call_count, 2)

    def test_returned_state_is_not_flattened_again(self):
        # The program takes the state's leaves flat; the state a call
        # returned comes back as the leaves it kept.
        for donate in (True, False):
            ts, variables, batch = self._step_and_state(donate_state=donate)
            state = ts.init(variables)
            state, _ = ts(state, batch)  # compiles; flattens the first state
            (program,) = ts.executables.compiled().values()
            executables = ts.executables
            with (
                mock.patch.object(
                    program, "in_tree", wraps=program.in_tree
                ) as tree,
                mock.patch.object(
                    executables, "_run_jitted", wraps=executables._run_jitted
                ) as jitted,
            ):
                for _ in range(3):
                    state, _ = ts(state, batch)
            self.assertEqual(jitted.call_count, 0)  # the compiled program ran
            # The base key and fingerprint, which the host puts back, are
            # passed apart (never donated): the very arrays of the state.
            self.assertEqual(tree.flatten_up_to.call_count, 0)
            moving, kept = ts.executables._last[1]
            leaves = jax.tree.leaves(state)
            for part, positions in (
                (moving, program.moving_positions),
                (kept, program.kept_positions),
            ):
                self.assertTrue(
                    all(
                        a is leaves[i]
                        for a, i in zip(part, positions, strict=True)
                    )
                )
            self.assertIs(kept[0], state.rng)
            self.assertIs(kept[1], state.fingerprint)

    def test_any_state_gives_what_the_returned_one_gives(self):
        # A state the step did not just return (an older one, one rebuilt
        # by `replace` or from its leaves) runs as the kept leaves do.
        ts, variables, batch = self._step_and_state()
        first = ts.init(variables)
        second, _ = ts(first, batch)
        third, _ = ts(second, batch)
        rebuilt = jax.tree.unflatten(
            jax.tree.structure(second), jax.tree.leaves(second)
        )
        for other in (rebuilt, second.replace(step=second.step)):
            again, _ = ts(other, batch)
            _utils.assert_trees_equal(again, third)
        # The built state is the `TrainState` ``unflatten`` builds.
        self.assertEqual(jax.tree.structure(third), jax.tree.structure(first))
        self.assertEqual(repr(third.algorithms), repr(first.algorithms))
        self.assertEqual(dataclasses.asdict(third).keys(), vars(first).keys())

    def test_donated_state_refused_after_a_bad_batch_kept(self):
        ts, variables, (x, y) = self._step_and_state(donate_state=True)
        state = first = ts.init(variables)
        state, _ = ts(state, (x, y))
        # Refused before it ran: the donated state is still valid.
        with self.assertRaisesRegex(ValueError, "leading \\(batch\\) size"):
            ts(state, (x, y[:16]))
        state, _ = ts(state, (x, y))
        self.assertEqual(int(state.step), 2)
        with self.assertRaisesRegex(
            ValueError, r"deleted \(\.step, \.params.*donate_state=True"
        ):
            ts(first, (x, y))


class ErrorTest(parameterized.TestCase):
    def _mlp_step(self, **kwargs):
        return boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=models.MLP(features=(8,)),
            loss=models.cross_entropy,
            **kwargs,
        )

    def test_optimizer_not_a_transformation(self):
        with self.assertRaisesRegex(
            TypeError, "`optimizer` must be an optax.GradientTransformation"
        ):
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd,
                model=models.MLP(),
                loss=models.cross_entropy,
            )

    def test_model_and_loss_fn(self):
        with self.assertRaisesRegex(ValueError, "either `model=`.*got both"):
            boostax.make_train_step(
                optax.sgd(0.1),
                model=models.MLP(),
                loss=models.cross_entropy,
                loss_fn=lambda p, b: 0.0,
            )
        with self.assertRaisesRegex(ValueError, "got neither"):
            boostax.make_train_step(optax.sgd(0.1))

    def test_model_of_unknown_type(self):
        with self.assertRaisesRegex(
            TypeError, "`model` must be a Flax Linen or NNX module, got str"
        ):
            boostax.make_train_step(
                optax.sgd(0.1), model="resnet", loss=models.cross_entropy
            )

    def test_model_without_loss(self):
        with self.assertRaisesRegex(TypeError, "`loss` must be a callable"):
            boostax.make_train_step(optax.sgd(0.1), model=models.MLP())

    def test_batch_not_a_pair(self):
        ts = self._mlp_step()
        x, y = _batches(True, 1)[0]
        state = ts.init(ts.objective.module.init(jax.random.PRNGKey(0), x))
        with self.assertRaisesRegex(
            TypeError, r"\(inputs, targets\) pairs, got tuple of length 3"
        ):
            ts(state, (x, y, y))

    def test_targets_of_another_batch_size(self):
        ts = self._mlp_step()
        x, y = _batches(True, 1)[0]
        state = ts.init(ts.objective.module.init(jax.random.PRNGKey(0), x))
        with self.assertRaisesRegex(
            ValueError,
            r"leading \(batch\) size: inputs: 32, targets: 16\.",
        ):
            ts(state, (x, y[:16]))
        with self.assertRaisesRegex(
            ValueError, r"inputs: 32, targets\['label'\]: 32, targets\['w'\]: 4"
        ):
            ts(state, (x, {"label": y, "w": np.ones(4)}))
        self.assertEqual(ts.trace_count, 0)  # refused before tracing

    def test_linen_variables_without_params(self):
        with self.assertRaisesRegex(TypeError, "with a 'params' collection"):
            self._mlp_step().init({"batch_stats": {}})

    def test_predict_without_predict_fn(self):
        ts = boostax.make_train_step(
            optax.sgd(0.1), loss_fn=lambda p, b: jnp.sum(p**2)
        )
        state = ts.init(jnp.ones(2))
        with self.assertRaisesRegex(ValueError, "pass `predict_fn=`"):
            ts.predict(state, jnp.ones(2))


if __name__ == "__main__":
    absltest.main()


def _quadratic_loss(w, batch):
    return jnp.mean((batch[0] @ w - batch[1]) ** 2)


class StepPartsTest(absltest.TestCase):
    """The step's two public parts: a pure builder and its executables."""

    def test_init_returns_a_state_and_changes_nothing_else(self):
        optimizer = optax.sgd(0.1)
        ts = boostax.make_train_step(optimizer, loss_fn=_quadratic_loss)
        first = ts.init(jnp.zeros(3))
        second = ts.init(jnp.zeros(3))
        self.assertIs(ts.optimizer, optimizer)
        self.assertEqual(ts.trace_count, 0)
        self.assertEqual(ts.compile_seconds, {})
        jax.tree.map(np.testing.assert_array_equal, first, second)
        # A state the step did not return is checked on the first call.
        batch = (jnp.eye(3), jnp.arange(3.0))
        state, _ = ts(second, batch)
        self.assertEqual(int(state.step), 1)

    def test_builder_step_function_is_the_jitted_step(self):
        ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=_quadratic_loss)
        state = ts.init(jnp.zeros(3))
        batch = (jnp.eye(3), jnp.arange(3.0))
        pure = ts.builder.step_function(None)  # not jitted: runs eagerly
        expected, _ = pure(state, batch)
        got, _ = ts(state, batch)
        np.testing.assert_allclose(got.params, expected.params, rtol=1e-6)

    def test_executables_compile_each_key_once(self):
        calls = []

        def function(key):
            calls.append(key)
            return lambda x, y: (x * (key + 1), y)

        executables = boostax.step.Executables(function)
        x, y = jnp.ones(2), jnp.zeros(())
        np.testing.assert_array_equal(executables(1, x, y)[0], 2 * x)
        np.testing.assert_array_equal(executables(1, x, y)[0], 2 * x)
        np.testing.assert_array_equal(executables(2, x, y)[0], 3 * x)
        self.assertEqual(calls, [1, 2])
        self.assertEqual(sorted(executables.compiled()), [1, 2])
        self.assertEqual(sorted(executables.compile_seconds), [1, 2])

    def test_at_depth_without_freezing_refuses_a_depth(self):
        ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=_quadratic_loss)
        with self.assertRaisesRegex(ValueError, "`depth` must be None"):
            ts.at_depth(0)

    def test_inputs_for_inspection_are_constructor_arguments(self):
        # What `cost_report` and `from_flax_train_state` read is given when
        # the step is built, and nothing sets it afterwards.
        objective = boostax.make_objective(loss_fn=_quadratic_loss)
        recipe = boostax.step.PlainRecipe(
            dict(optimizer=optax.sgd(0.1), loss_fn=_quadratic_loss)
        )
        report = boostax.LessBNReport(
            removed=(), kept=(), fn_head=None, removed_parameters=0
        )
        ts = boostax.TrainStep(
            objective,
            optax.sgd(0.1),
            plain_recipe=recipe,
            less_bn_report=report,
            sample_inputs=np.ones((2, 3)),
        )
        self.assertIs(ts.plain_recipe, recipe)
        self.assertIs(ts.less_bn_report, report)
        self.assertEqual(
            ts.sample_inputs, jax.ShapeDtypeStruct((2, 3), jnp.float32)
        )
        for name in ("plain_recipe", "less_bn_report", "sample_inputs"):
            with self.assertRaises(AttributeError):
                setattr(ts, name, None)
        plain = boostax.TrainStep(objective, optax.sgd(0.1))
        self.assertIsNone(plain.plain_recipe)
        self.assertIsNone(plain.sample_inputs)

    def test_inputs_for_inspection_are_checked(self):
        objective = boostax.make_objective(loss_fn=_quadratic_loss)
        for name, value in (
            ("plain_recipe", {"optimizer": optax.sgd(0.1)}),
            ("less_bn_report", "report"),
            ("sample_inputs", [[1.0, 2.0]]),
        ):
            with (
                self.subTest(name),
                self.assertRaisesRegex(TypeError, f"`{name}` must be"),
            ):
                boostax.TrainStep(objective, optax.sgd(0.1), **{name: value})

    def test_objective_options_are_gathered_once(self):
        # auto_boost passes its model/loss options on as one object: the
        # objective of the boosted step and the plain step's recipe (float32,
        # so without `cast_batch`, which a float32 step refuses).
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            loss_fn=_quadratic_loss,
            precision="bfloat16",
            options=boostax.StepOptions(cast_batch=(True, False)),
        )
        self.assertEqual(ts.objective.cast_batch, (True, False))
        recipe = ts.plain_recipe
        self.assertIsNone(recipe.kwargs["options"].cast_batch)
        self.assertIs(recipe.kwargs["loss_fn"], _quadratic_loss)
        plain = boostax.make_train_step(**recipe.kwargs)
        self.assertIsNone(plain.precision)
