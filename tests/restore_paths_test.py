# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Every way of restoring a checkpoint restores a state exactly or raises.

Project issue 43: Flax's ``restore_checkpoint(dir, target=template)``, given
the template of a step at another level, restored part of an O0 checkpoint
into an O1 template (the leaves both have), kept the template's values of
the others and dropped the trained BatchNorms LessBN removes, without an
error; training went on. Flax restores through Orbax's transformation mode
whatever the template holds (``transforms={}`` without a ``None`` in it), so
every boostax state carries the fingerprint of its structure
(``state.fingerprint``), which Flax's restore and the train step check.

The property test draws a restore path: the level a checkpoint was saved at
(O0 without a loss scale, O1 with LessBN, freezing and a dynamic loss scale,
O0 data-parallel on 2 devices), the phase of its 2-step gradient
accumulation (mid-cycle, or right after an update), the level of the
template restored into (from fresh weights of seed 0 or 1) and the restore
(Flax's ``restore_checkpoint`` of a Flax or an Orbax checkpoint, Orbax's
``StandardRestore`` of the shapes or ``PyTreeRestore`` of the arrays).
Each path either raises, or restores every leaf bit for bit (dtypes and
shardings included) and the next step then equals the uninterrupted run's
(between O0 and its data-parallel twin, which share a structure: the
step of the saved state placed on the template's devices). Raising
happens exactly where the saved and the template structures differ. The
three train steps are built, and their programs compiled, once for every
draw.
"""

import os
import shutil
import tempfile
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl.testing import absltest
from flax import linen as nn
from flax import serialization
from flax.training import checkpoints as flax_checkpoints
from flax.training import train_state as flax_train_state
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import boostax
from boostax._src.step import train_state as train_state_lib
from tests import _utils

# BOOSTAX_FUZZ_EXAMPLES=200 for a longer, random search (the suite runs the
# same draws every time).
EXAMPLES = os.environ.get("BOOSTAX_FUZZ_EXAMPLES")
PATHS = settings(
    max_examples=int(EXAMPLES or 30),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=EXAMPLES is None,
    database=None,
)
BATCH, SHAPE, K = 8, (6, 6, 1), 2  # K: accumulation micro-steps
LEVELS = ("O0", "O1", "O0 data-parallel")
RESTORES = ("flax", "flax of orbax", "orbax standard", "orbax pytree")


class TinyResNet(nn.Module):
    """A stem and one basic block: LessBN (O1) removes the block's first
    BatchNorm and its parameters, so O0's and O1's params differ."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        def norm(name):
            return nn.BatchNorm(use_running_average=not train, name=name)

        x = nn.relu(norm("stem_bn")(nn.Conv(4, (3, 3), name="stem")(x)))
        y = nn.relu(norm("bn_a")(nn.Conv(4, (3, 3), name="conv_a")(x)))
        y = norm("bn_b")(nn.Conv(4, (3, 3), name="conv_b")(y))
        x = nn.relu(x + y)
        return nn.Dense(3, name="head")(jnp.mean(x, axis=(1, 2)))


class OldTrainState(flax.struct.PyTreeNode):
    """A boostax TrainState as it was before its fingerprint."""

    FIELDS = ("step", "params", "opt_state", "model_state", "rng", "algorithms")
    step: Any
    params: Any
    opt_state: Any
    model_state: Any
    rng: Any
    algorithms: Any


class FlaxState(flax_train_state.TrainState):
    """The Flax ImageNet example's state: a field for the BatchNorms."""

    batch_stats: Any = None


def batch(i):
    rng = np.random.default_rng(i)
    x = rng.normal(size=(BATCH, *SHAPE)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(rng.integers(0, 3, size=BATCH))


def variables(seed):
    return TinyResNet().init(jax.random.PRNGKey(seed), batch(0)[0], train=False)


def loss(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


def build(level):
    config: dict[str, Any] = {
        "boost": {"mode": "manual", "grad_accumulation": True},
        "grad_accumulation": {"grad_accumulation_step": K},
    }
    kwargs: dict[str, Any] = {}
    if level == "O1":
        # The FN head off: a trained dense head is kept (and converted
        # weights can be brought in, `test_converting...`).
        config["less_bn"] = {"fn_flag": False}
        config["grad_freeze"] = {"param_groups": 2, "total_steps": 8}
        kwargs["loss_scale"] = boostax.DynamicLossScale(2.0**8)
    if level == "O0 data-parallel":
        kwargs["mesh"] = jax.make_mesh(
            (2,), ("data",), devices=jax.devices()[:2]
        )
    return boostax.auto_boost(
        level.split()[0],
        config,
        optimizer=optax.sgd(0.05, momentum=0.9),
        model=TinyResNet(),
        loss=loss,
        sample_inputs=batch(0)[0],
        **kwargs,
    )


def same_structure(a, b):
    """The oracle: same tree, and every leaf of the same shape and dtype."""
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.shape(x) == np.shape(y) and x.dtype == y.dtype
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def assert_exact(test, restored, saved, template):
    """Every leaf bit for bit, with its dtype and the template's sharding."""
    _utils.assert_trees_equal(restored, saved)
    for got, want, like in zip(
        jax.tree.leaves(restored),
        jax.tree.leaves(saved),
        jax.tree.leaves(template),
        strict=True,
    ):
        test.assertEqual(got.dtype, want.dtype)
        test.assertTrue(got.sharding.is_equivalent_to(like.sharding, got.ndim))


class RestorePathsTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp()
        cls.steps = {level: build(level) for level in LEVELS}
        # The uninterrupted run of each level: states[level][i] after i
        # steps; saved after 1 (mid-cycle) and 2 (an update) steps.
        cls.states, cls.metrics = {}, {}
        for level, ts in cls.steps.items():
            state = ts.init(variables(0))
            states, metrics = [state], [None]
            for i in range(3):
                state, m = ts(state, batch(i))
                states.append(state)
                metrics.append(m)
            cls.states[level], cls.metrics[level] = states, metrics
            for phase in (1, 2):
                with ocp.StandardCheckpointer() as checkpointer:
                    checkpointer.save(
                        cls.path(level, phase, "orbax"), states[phase]
                    )
                flax_checkpoints.save_checkpoint(
                    cls.path(level, phase, "flax"), states[phase], step=phase
                )

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    @classmethod
    def path(cls, level, phase, kind):
        name = f"{level.replace(' ', '_')}-{phase}-{kind}"
        return os.path.join(cls.dir, name)

    def restore(self, how, level, phase, template):
        if how == "flax":
            return flax_checkpoints.restore_checkpoint(
                self.path(level, phase, "flax"), target=template
            )
        path = self.path(level, phase, "orbax")
        if how == "flax of orbax":
            return flax_checkpoints.restore_checkpoint(path, target=template)
        if how == "orbax standard":
            shapes = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
            with ocp.StandardCheckpointer() as checkpointer:
                return checkpointer.restore(path, shapes)
        args = ocp.args.PyTreeRestore(
            item=template,
            restore_args=ocp.checkpoint_utils.construct_restore_args(template),
        )
        with ocp.PyTreeCheckpointer() as checkpointer:
            return checkpointer.restore(path, args=args)

    @PATHS
    @given(
        saved=st.sampled_from(LEVELS),
        phase=st.sampled_from([1, 2]),
        into=st.sampled_from(LEVELS),
        seed=st.sampled_from([0, 1]),
        how=st.sampled_from(RESTORES),
    )
    # Every restore refusing another level, whatever the draws; issue 43's
    # path first.
    @example(saved="O0", phase=2, into="O1", seed=0, how="flax")
    @example(saved="O1", phase=1, into="O0", seed=1, how="flax of orbax")
    @example(saved="O0", phase=1, into="O1", seed=1, how="orbax standard")
    @example(
        saved="O1", phase=2, into="O0 data-parallel", seed=0, how="orbax pytree"
    )
    def test_a_restore_is_exact_or_raises(self, saved, phase, into, seed, how):
        ts = self.steps[into]
        template = ts.init(variables(seed))
        state = self.states[saved][phase]
        fits = same_structure(state, template)
        try:
            restored = self.restore(how, saved, phase, template)
        except (ValueError, TypeError) as e:
            self.assertFalse(fits, f"a restore into its own structure: {e}")
            if how.startswith("flax"):
                # boostax's refusal (the fingerprint), not a chance error.
                self.assertIn("does not fit the template", str(e))
                self.assertIn("from_flax_train_state", str(e))
            return
        self.assertTrue(fits, f"{how} restored {saved} into {into}")
        assert_exact(self, restored, state, template)
        new, metrics = ts(restored, batch(phase))
        if saved == into:  # the uninterrupted run goes on
            want = self.states[saved][phase + 1]
            want_metrics = self.metrics[saved][phase + 1]
        else:  # the same state on the template's devices (O0 <-> mesh)
            placed = jax.tree.map(
                lambda x, like: jax.device_put(x, like.sharding),
                state,
                template,
            )
            want, want_metrics = ts(placed, batch(phase))
        _utils.assert_trees_equal(new, want)
        np.testing.assert_array_equal(metrics["loss"], want_metrics["loss"])

    def test_the_issue_43_restore_raises_naming_the_way_that_works(self):
        # The ported script's own restore: an O0 checkpoint into the
        # template of the O1 step, through Flax's restore_checkpoint.
        template = self.steps["O1"].init(variables(0))
        with self.assertRaises(ValueError) as raised:
            flax_checkpoints.restore_checkpoint(
                self.path("O0", 2, "flax"), target=template
            )
        message = str(raised.exception)
        for slot in ("`params`", "`opt_state`", "`model_state`"):
            self.assertIn(slot, message)
        self.assertIn("`algorithms.loss_scale`", message)  # None at O0
        self.assertIn("`algorithms.freeze`", message)
        self.assertNotIn("`rng`", message)  # the same in both
        self.assertIn("to_flax_train_state", message)
        self.assertIn("init_optimizer=True", message)

    def test_converting_a_restored_o0_state_to_o1(self):
        # The way that works: restore at the level it was saved at, then
        # convert; LessBN folds the trained BatchNorm it removes.
        o0, o1 = self.steps["O0"], self.steps["O1"]
        restored = flax_checkpoints.restore_checkpoint(
            self.path("O0", 2, "flax"), target=o0.init(variables(1))
        )
        assert_exact(self, restored, self.states["O0"][2], restored)
        flax_state = boostax.to_flax_train_state(o0, restored, FlaxState)
        state = boostax.from_flax_train_state(
            o1, flax_state, init_optimizer=True
        )
        self.assertEqual(int(state.step), 2)
        self.assertNotIn("bn_a", state.params)  # removed, and folded:
        x = batch(7)[0]
        np.testing.assert_allclose(
            o1.predict(state, x), o0.predict(restored, x), rtol=1e-5, atol=1e-5
        )
        # A fresh optimizer state (SGD's momentum and the accumulator at
        # zero, whatever the weights), not O0's momentum.
        _utils.assert_trees_equal(
            state.opt_state, o1.init(variables(0)).opt_state
        )
        self.assertFalse(
            all(
                np.all(np.asarray(x) == 0)
                for x in jax.tree.leaves(restored.opt_state)
            )
        )
        new, metrics = o1(state, batch(2))
        self.assertTrue(np.isfinite(metrics["loss"]))
        self.assertEqual(int(new.step), 3)

    def test_a_state_of_another_level_is_refused_by_the_step(self):
        for given_level, step_level in (("O0", "O1"), ("O1", "O0")):
            with self.assertRaisesRegex(ValueError, r"`state\.params`"):
                self.steps[step_level](self.states[given_level][2], batch(2))

    def test_a_mixed_state_is_refused_by_the_step(self):
        # Orbax's own transformation mode, asked for: it restores what
        # matches and keeps the template's other values, without an error.
        ts = self.steps["O1"]
        template = ts.init(variables(0))
        args = ocp.args.PyTreeRestore(
            item=template,
            transforms={},
            restore_args=ocp.checkpoint_utils.construct_restore_args(template),
        )
        with ocp.PyTreeCheckpointer() as checkpointer:
            mixed = checkpointer.restore(self.path("O0", 2, "orbax"), args=args)
        self.assertTrue(same_structure(mixed, template))  # silently
        with self.assertRaises(ValueError) as raised:
            ts(mixed, batch(2))
        message = str(raised.exception)
        self.assertIn("mixes the leaves of two states", message)
        self.assertIn("`params`", message)
        self.assertIn("from_flax_train_state", message)

    def test_a_state_cast_by_the_restore_is_refused_by_the_step(self):
        # Orbax casts a checkpoint's leaves to the template's dtypes: here
        # a state whose params are bfloat16 (its own fingerprint), into
        # the float32 template of its paths.
        ts = self.steps["O0"]
        state = self.states["O0"][2]
        half = train_state_lib.with_fingerprint(
            state.replace(
                params=jax.tree.map(
                    lambda x: x.astype(jnp.bfloat16), state.params
                )
            )
        )
        path = os.path.join(self.dir, "bfloat16")
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(path, half)
        shapes = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        with ocp.StandardCheckpointer() as checkpointer:
            cast = checkpointer.restore(path, shapes)
        self.assertEqual(cast.params["head"]["kernel"].dtype, jnp.float32)
        with self.assertRaisesRegex(ValueError, r"mixes.* of `params`\. "):
            ts(cast, batch(2))

    def test_a_state_without_its_fingerprint_is_refused(self):
        ts = self.steps["O0"]
        state = self.states["O0"][2]
        lost = state.replace(fingerprint=None)
        with self.assertRaisesRegex(ValueError, "fingerprint"):
            ts(lost, batch(2))
        # Another state's fingerprint on these leaves.
        forged = state.replace(fingerprint=self.states["O1"][2].fingerprint)
        with self.assertRaisesRegex(ValueError, "mixes the leaves"):
            ts(forged, batch(2))

    def test_the_fingerprint_is_of_the_structure_only(self):
        o0 = self.steps["O0"].init(variables(0))
        fingerprint = train_state_lib.structure_fingerprint
        # Not of the weights, the values, the shardings or the shapes (a
        # restore checks those; Orbax's strict=False changes a per-device
        # axis on purpose, docs/scaling.md).
        wider = o0.replace(
            params=jax.tree.map(lambda x: jnp.zeros((2, *x.shape)), o0.params)
        )
        for same in (
            self.steps["O0"].init(variables(1)),
            self.states["O0"][2],
            jax.tree.map(ocp.utils.to_shape_dtype_struct, o0),
            self.steps["O0 data-parallel"].init(variables(0)),
            wider,
        ):
            np.testing.assert_array_equal(fingerprint(same), fingerprint(o0))
        np.testing.assert_array_equal(o0.fingerprint, fingerprint(o0))
        self.assertEqual(o0.fingerprint.dtype, jnp.uint32)
        # One entry per slot: O0 and O1 differ where their structures do.
        o1 = self.steps["O1"].init(variables(0))
        differ = {
            name
            for name, a, b in zip(
                train_state_lib.FINGERPRINT_SLOTS,
                fingerprint(o0),
                fingerprint(o1),
                strict=True,
            )
            if a != b
        }
        self.assertEqual(
            differ,
            {
                "params",
                "opt_state",
                "model_state",
                "algorithms.loss_scale",
                "algorithms.freeze",
            },
        )
        # A dtype alone changes it.
        cast = o0.replace(
            params=jax.tree.map(lambda x: x.astype(jnp.bfloat16), o0.params)
        )
        self.assertNotEqual(fingerprint(cast)[1], fingerprint(o0)[1])

    def test_flax_refuses_a_leaf_of_another_shape(self):
        # Orbax's transformation mode returns the checkpoint's arrays as
        # they are: TrainState's Flax deserialisation compares the shapes.
        template = self.steps["O0"].init(variables(0))
        wider = template.replace(
            params=jax.tree.map(
                lambda x: jnp.zeros((2, *x.shape)), template.params
            )
        )
        with self.assertRaisesRegex(ValueError, r"`state\.params\["):
            flax_checkpoints.restore_checkpoint(
                self.path("O0", 1, "flax"), target=wider
            )

    def test_a_checkpoint_without_a_fingerprint_is_refused(self):
        # Saved before states had one (another class of the same fields
        # but the fingerprint), or from a state no `init` built (None).
        state = self.states["O0"][2]
        old = OldTrainState(
            **{name: getattr(state, name) for name in OldTrainState.FIELDS}
        )
        lost = state.replace(fingerprint=None)
        for saved, name in ((old, "old"), (lost, "none")):
            flax_path = os.path.join(self.dir, f"{name}-flax")
            flax_checkpoints.save_checkpoint(flax_path, saved, step=2)
            orbax_path = os.path.join(self.dir, f"{name}-orbax")
            with ocp.StandardCheckpointer() as checkpointer:
                checkpointer.save(orbax_path, saved)
            for level in ("O0", "O1"):  # its own level's template, too
                template = self.steps[level].init(variables(0))
                for path in (flax_path, orbax_path):
                    with self.subTest(name, level=level, path=path):
                        with self.assertRaisesRegex(
                            ValueError, "has no `fingerprint`"
                        ):
                            flax_checkpoints.restore_checkpoint(
                                path, target=template
                            )
        # Orbax restores the None as None (the old class: raises, its
        # structure is another), and the step refuses it.
        shapes = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        with ocp.StandardCheckpointer() as checkpointer:
            restored = checkpointer.restore(
                os.path.join(self.dir, "none-orbax"), shapes
            )
        self.assertIsNone(restored.fingerprint)
        with self.assertRaisesRegex(ValueError, "fingerprint` is None"):
            self.steps["O0"](restored, batch(2))

    def test_a_state_given_its_own_leaves_back_passes(self):
        # from_state_dict(state, to_state_dict(state)): nothing restored,
        # nothing mixed (the check for a fingerprint kept from the
        # template is not fooled by it).
        state = self.states["O1"][1]
        back = serialization.from_state_dict(
            state, serialization.to_state_dict(state)
        )
        _utils.assert_trees_equal(back, state)

    def test_flax_bytes_round_trip_exactly_or_raise(self):
        # Flax's msgpack serialisation ends in the same check.
        state = self.states["O1"][1]
        template = self.steps["O1"].init(variables(1))
        back = serialization.from_bytes(template, serialization.to_bytes(state))
        _utils.assert_trees_equal(back, state)
        o0 = self.steps["O0"].init(variables(0))
        with self.assertRaises(ValueError):
            serialization.from_bytes(o0, serialization.to_bytes(state))


if __name__ == "__main__":
    absltest.main()
