# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Fuzz of the public entry points with wrong types, shapes and values.

`auto_boost`, `make_train_step`, `TrainStep.__call__`, `recipe`,
`precision_policy` and `from_flax_train_state` get one argument replaced by
a random wrong value (``None``, a bool, a string, NaN, a huge int, a nested
list, an array of another shape or dtype, an arbitrary object). A call
either succeeds (some draws are valid) or raises boostax's ``TypeError``,
``ValueError`` or ``KeyError``: raised by boostax's own code, with a message
naming the argument, never a NumPy, Flax, Optax or Python internal error
passed through.

Bounded time: few examples each, one tiny MLP, one step compiled once; the
draws that fail do so before compiling.
"""

import math
import os
import traceback
import warnings

import jax
import numpy as np
import optax
from absl.testing import absltest
from flax.training import train_state as flax_train_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import boostax
from boostax.examples import models

BOOSTAX_DIR = os.path.dirname(os.path.abspath(boostax.__file__))
# A longer, random search: BOOSTAX_FUZZ_EXAMPLES=500 (the suite runs the
# same 40 draws of each test every time).
EXAMPLES = os.environ.get("BOOSTAX_FUZZ_EXAMPLES")
FUZZ = settings(
    max_examples=int(EXAMPLES or 40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=EXAMPLES is None,
    database=None,
)
SGD = optax.sgd(0.1)
CE = models.cross_entropy
MODEL = models.MLP(features=(4,), num_classes=3)
X = np.zeros((4, 6), np.float32)
Y = np.zeros(4, np.int32)
VARIABLES = MODEL.init(jax.random.PRNGKey(0), X)


class Opaque:
    """An object of no type boostax knows."""

    def __repr__(self):
        return "Opaque()"


def _arrays():
    shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4)
    dtypes = st.sampled_from([np.float32, np.int32, np.bool_, np.float16])
    return st.builds(lambda s, d: np.zeros(s, d), shapes, dtypes)


# Wrong values of every kind (some are valid for some arguments).
WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**13), 10**13),
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e30]),
    st.text(max_size=8),
    st.sampled_from(["O3", "float16", "manual", "dropout", ""]),
    st.lists(st.integers(-2, 2), max_size=3),
    st.dictionaries(st.sampled_from(["a", "params", "boost"]), st.none()),
    st.builds(Opaque),
    _arrays(),
)


def _raised_in_boostax(error: BaseException) -> bool:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return os.path.abspath(frame.filename).startswith(BOOSTAX_DIR)


class FuzzTest(absltest.TestCase):
    def assert_boostax_error(self, call, argument: str, value):
        """`call()` succeeds or raises boostax's error naming `argument`."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return call()
            # FileNotFoundError: a config path naming no file.
            except (TypeError, ValueError, KeyError, FileNotFoundError) as e:
                message = str(e)
                where = f"{argument}={value!r}: {type(e).__name__}: {message}"
                self.assertTrue(
                    _raised_in_boostax(e), f"not boostax's: {where}"
                )
                # A config dict's error names its section or key instead.
                names = [argument, *(value if isinstance(value, dict) else ())]
                self.assertTrue(
                    any(str(name) in message for name in names),
                    f"argument unnamed: {where}",
                )
            except NotImplementedError as e:  # boostax's, for "O1" amp only
                self.assertIn("not built in boostax", str(e))

    @FUZZ
    @given(
        argument=st.sampled_from(
            [
                "level",
                "config",
                "optimizer",
                "loss",
                "has_aux",
                "sample_inputs",
                "seed",
                "loss_scale",
                "precision",
                "mesh",
                "donate_state",
                "skip_nonfinite",
                "max_consecutive_skips",
                "weight_decay",
                "weight_decay_mask",
                "batch_keys",
                "rng_collections",
                "train_kwargs",
            ]
        ),
        value=WRONG,
    )
    def test_auto_boost(self, argument, value):
        kwargs = dict(optimizer=SGD, model=MODEL, loss=CE, sample_inputs=X)
        if argument in boostax.StepOptions.__dataclass_fields__:
            options = {argument: value}
            if argument == "weight_decay_mask":
                options["weight_decay"] = 1e-4
            kwargs["options"] = options
        else:
            kwargs[argument] = value
        level = kwargs.pop("level", "O0")
        self.assert_boostax_error(
            lambda: boostax.auto_boost(level, **kwargs), argument, value
        )

    @FUZZ
    @given(value=st.one_of(WRONG, _arrays()))
    def test_auto_boost_traces_sample_inputs(self, value):
        # O1 traces the model on them (LessBN, the freezing groups).
        self.assert_boostax_error(
            lambda: boostax.auto_boost(
                "O1", optimizer=SGD, model=MODEL, loss=CE, sample_inputs=value
            ),
            "sample_inputs",
            value,
        )

    @FUZZ
    @given(
        argument=st.sampled_from(
            [
                "optimizer",
                "model",
                "loss",
                "loss_fn",
                "has_aux",
                "predict_fn",
                "data_parallel",
                "loss_scale",
                "precision",
                "batch_keys",
                "rng_collections",
                "eval_kwargs",
                "raise_on_skips",
            ]
        ),
        value=WRONG,
    )
    def test_make_train_step(self, argument, value):
        kwargs = dict(model=MODEL, loss=CE)
        if argument in ("loss_fn", "predict_fn"):
            kwargs = {"loss_fn": lambda p, b: 0.0}
        kwargs[argument] = value
        optimizer = kwargs.pop("optimizer", SGD)
        self.assert_boostax_error(
            lambda: boostax.make_train_step(optimizer, **kwargs),
            argument,
            value,
        )

    @FUZZ
    @given(
        argument=st.sampled_from(["state", "batch", "inputs", "targets"]),
        value=st.one_of(WRONG, _arrays()),
    )
    def test_train_step_call(self, argument, value):
        step, state = _STEP
        batch = (X, Y)
        if argument == "state":
            state = value
        elif argument == "batch":
            batch = value
        elif argument == "inputs":
            batch = (value, Y)
        else:
            # Targets of another batch size, or no batch dimension (a wrong
            # trailing shape is the loss function's to refuse, as are no
            # targets at all: None is a valid target tree).
            if np.shape(value)[:1] == (4,) or not jax.tree.leaves(value):
                value = np.zeros(3, np.int32)
            batch = (X, value)
        named = "batch" if argument in ("inputs", "targets") else argument
        self.assert_boostax_error(lambda: step(state, batch), named, value)

    @FUZZ
    @given(
        leaf=st.sampled_from(["params", "opt_state", "step", "rng"]),
        value=_arrays(),
    )
    def test_train_step_call_with_a_wrong_leaf(self, leaf, value):
        step, state = _STEP
        if leaf == "params":
            # Float leaves: the state check of dtypes is the precision
            # policy's (a float16 state in a float32 step).
            value = value.astype(np.float32)
            broken = jax.tree.map(lambda _: value, state.params)
            state = state.replace(params=broken)
        elif leaf == "opt_state":
            state = state.replace(opt_state=(value,))
        else:
            state = state.replace(**{leaf: value})
        self.assert_boostax_error(lambda: step(state, (X, Y)), "state", value)

    @FUZZ
    @given(value=WRONG)
    def test_recipe(self, value):
        for recipe in (boostax.recipe, boostax.o1_recipe):
            self.assert_boostax_error(
                lambda recipe=recipe: recipe(value), "total_steps", value
            )

    @FUZZ
    @given(
        argument=st.sampled_from(
            ["level", "loss_scale", "name", "cast_params"]
        ),
        value=WRONG,
        level=st.sampled_from(["O0", "O2", "O3"]),
    )
    def test_precision_policy(self, argument, value, level):
        # `dtype` (a NumPy dtype error for a bad name) is left to the
        # precision policy's own tests.
        kwargs = {argument: value}
        level = kwargs.pop("level", level)
        self.assert_boostax_error(
            lambda: boostax.precision_policy(level, **kwargs), argument, value
        )

    @FUZZ
    @given(
        argument=st.sampled_from(
            ["train_step", "flax_state", "like", "init_optimizer", "rng"]
        ),
        value=WRONG,
    )
    def test_from_flax_train_state(self, argument, value):
        step, _ = _STEP
        kwargs = dict(train_step=step, flax_state=_FLAX_STATE)
        kwargs[argument] = value
        self.assert_boostax_error(
            lambda: boostax.from_flax_train_state(**kwargs), argument, value
        )


def _step_and_state():
    step = boostax.make_train_step(SGD, model=MODEL, loss=CE)
    state = step.init(VARIABLES)
    step(state, (X, Y))  # compiled once for every test
    return step, state


_STEP = _step_and_state()
_FLAX_STATE = flax_train_state.TrainState.create(
    apply_fn=MODEL.apply, params=VARIABLES["params"], tx=SGD
)

if __name__ == "__main__":
    absltest.main()
