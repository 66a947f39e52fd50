# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`StepOptions`: one home for a step's settings, checked once; the old
keyword spellings still read, with a warning naming the new home."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized

import boostax


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] - y) ** 2)


BATCH = (
    np.arange(12, dtype=np.float32).reshape(4, 3) / 12,
    np.ones(4, np.float32),
)
PARAMS = {"w": np.zeros(3, np.float32)}


def _train(ts, steps=3):
    state = ts.init(jax.tree.map(jnp.array, PARAMS))
    for _ in range(steps):
        state, _ = ts(state, BATCH)
    return state.params


class SignatureTest(absltest.TestCase):
    def test_auto_boost_takes_at_most_twelve_arguments(self):
        # Issue 46: one entry point, each setting with one home.
        parameters = inspect.signature(boostax.auto_boost).parameters
        named = [
            p
            for p in parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        self.assertLessEqual(len(named), 12, [p.name for p in named])

    def test_no_field_is_also_an_argument(self):
        fields = set(boostax.StepOptions.__dataclass_fields__)
        for function in (boostax.auto_boost, boostax.make_train_step):
            parameters = set(inspect.signature(function).parameters)
            self.assertEmpty(fields & parameters, function.__name__)


class StepOptionsTest(parameterized.TestCase):
    def test_defaults_and_replace(self):
        options = boostax.StepOptions()
        self.assertFalse(options.donate_state)
        self.assertEqual(options.max_consecutive_skips, 100)
        self.assertEqual(options.changed(), ())
        changed = options.replace(donate_state=True, weight_decay=1e-4)
        self.assertEqual(changed.changed(), ("donate_state", "weight_decay"))
        self.assertFalse(options.donate_state)  # frozen: a new object

    def test_of_takes_a_dict_or_none(self):
        self.assertTrue(
            boostax.StepOptions.of({"donate_state": True}).donate_state
        )
        self.assertEqual(boostax.StepOptions.of(None).changed(), ())
        options = boostax.StepOptions(skip_nonfinite=True)
        self.assertIs(boostax.StepOptions.of(options), options)

    def test_of_refuses_unknown_keys_naming_the_known(self):
        with self.assertRaisesRegex(TypeError, "no key 'donate'.*donate_state"):
            boostax.StepOptions.of({"donate": True})
        with self.assertRaisesRegex(TypeError, "`options` must be"):
            boostax.StepOptions.of(["donate_state"])

    @parameterized.parameters(
        ("donate_state", "yes", TypeError, "`donate_state` must be a bool"),
        ("has_aux", 1, TypeError, "`has_aux` must be a bool"),
        ("max_consecutive_skips", 0, ValueError, "`max_consecutive_skips`"),
        ("freeze_warmup_steps", -1, ValueError, "`freeze_warmup_steps`"),
        ("weight_decay", -1.0, ValueError, "`weight_decay`"),
        ("background_compile", "0", TypeError, "`background_compile`"),
    )
    def test_checked_once_when_made(self, name, value, error, message):
        with self.assertRaisesRegex(error, message):
            boostax.StepOptions(**{name: value})

    def test_a_mask_needs_a_decay(self):
        with self.assertRaisesRegex(ValueError, "`weight_decay` is 0"):
            boostax.StepOptions(weight_decay_mask=lambda p: p)

    def test_positional_fields_are_refused(self):
        with self.assertRaises(TypeError):
            boostax.StepOptions(True)  # type: ignore[misc]


class EntryPointsTest(parameterized.TestCase):
    def test_options_reach_the_step(self):
        for options in (
            boostax.StepOptions(skip_nonfinite=True, donate_state=True),
            {"skip_nonfinite": True, "donate_state": True},
        ):
            ts = boostax.auto_boost(
                optimizer=optax.sgd(0.1), loss_fn=loss_fn, options=options
            )
            self.assertTrue(ts.donate_state)
            self.assertTrue(ts.builder.skip_nonfinite)

    @parameterized.parameters("auto_boost", "make_train_step")
    def test_old_spellings_warn_and_train_the_same(self, function):
        build = getattr(boostax, function)
        first = () if function == "auto_boost" else (optax.sgd(0.1),)
        kwargs = {"optimizer": optax.sgd(0.1)} if not first else {}
        new = build(
            *first,
            **kwargs,
            loss_fn=loss_fn,
            options=boostax.StepOptions(skip_nonfinite=True),
        )
        with self.assertWarnsRegex(
            DeprecationWarning,
            rf"`{function}\(\.\.\., skip_nonfinite=\.\.\.\)` moved to "
            rf"`{function}\(\.\.\., options=boostax\.StepOptions\(",
        ) as caught:
            old = build(*first, **kwargs, loss_fn=loss_fn, skip_nonfinite=True)
        # Attributed to the caller's line, not to boostax's internals.
        self.assertEqual(caught.filename, __file__)
        self.assertTrue(old.builder.skip_nonfinite)
        np.testing.assert_array_equal(_train(new)["w"], _train(old)["w"])

    def test_a_setting_given_both_ways_is_refused(self):
        with self.assertRaisesRegex(
            ValueError, "`donate_state` is given twice"
        ):
            boostax.auto_boost(
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
                options={"donate_state": True},
                donate_state=True,
            )

    @parameterized.parameters("auto_boost", "make_train_step")
    def test_an_unknown_argument_names_the_settings(self, function):
        build = getattr(boostax, function)
        with self.assertRaisesRegex(
            TypeError, "unexpected keyword argument 'donate'.*donate_state"
        ):
            build(
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
                donate=True,
            )

    def test_train_step_takes_how_it_runs(self):
        objective = boostax.make_objective(loss_fn=loss_fn)
        ts = boostax.TrainStep(
            objective, optax.sgd(0.1), options={"skip_nonfinite": True}
        )
        self.assertTrue(ts.skip_nonfinite)
        with self.assertWarnsRegex(
            DeprecationWarning, r"`TrainStep\(\.\.\., donate_state=\.\.\.\)`"
        ):
            old = boostax.TrainStep(
                objective, optax.sgd(0.1), donate_state=True
            )
        self.assertTrue(old.donate_state)

    @parameterized.parameters(
        ("batch_keys", ("x", "y"), "says how the model is called"),
        ("has_aux", True, "says how the model is called"),
        ("weight_decay", 1e-4, "is `auto_boost`'s"),
    )
    def test_train_step_refuses_what_it_would_ignore(self, name, value, why):
        with self.assertRaisesRegex(ValueError, f"`options.{name}` {why}"):
            boostax.TrainStep(
                boostax.make_objective(loss_fn=loss_fn),
                optax.sgd(0.1),
                options={name: value},
            )

    @parameterized.parameters(
        ("freeze_warmup_steps", 0),
        ("background_compile", False),
        ("weight_decay", 1e-4),
        ("pca_matrix", np.zeros((2, 3), np.float32)),
    )
    def test_make_train_step_refuses_what_it_would_ignore(self, name, value):
        with self.assertRaisesRegex(ValueError, f"`options.{name}` is"):
            boostax.make_train_step(
                optax.sgd(0.1), loss_fn=loss_fn, options={name: value}
            )


if __name__ == "__main__":
    absltest.main()
