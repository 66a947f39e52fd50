# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The transformer workload: stdlib bytes, the model, O0 against plain."""

import dataclasses
import functools
import os
import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from flax import nnx

import boostax
from boostax.examples import language_model as lm
from boostax.examples import models, text
from tests import _utils


@functools.cache
def _corpus():
    return text.load_stdlib()


@functools.cache
def _workload():
    return lm.Workload.quick(_corpus())


class TextTest(absltest.TestCase):
    def test_split_by_file_is_fixed_and_disjoint(self):
        corpus, again = _corpus(), text.load_stdlib()
        np.testing.assert_array_equal(corpus.train, again.train)
        np.testing.assert_array_equal(corpus.validation, again.validation)
        source = corpus.source
        self.assertEqual(source, again.source)
        self.assertEmpty(set(source.train_files) & set(source.validation_files))
        names = [os.path.basename(p) for p in text.stdlib_files()]
        self.assertEqual(source.files, len(names))
        self.assertEqual(source.validation_files, tuple(names[::10]))
        self.assertEqual(
            len(source.train_files) + len(source.validation_files),
            len(names),
        )
        self.assertEqual(corpus.train.dtype, np.uint8)
        self.assertEqual(source.train_bytes, corpus.train.size)
        self.assertLessEqual(
            source.train_bytes,
            len(source.train_files) * (text.MAX_FILE_BYTES + 1),
        )

    def test_split_of_a_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(4):
                with open(os.path.join(tmp, f"m{i}.py"), "wb") as f:
                    f.write(bytes([65 + i]) * 10)
            with open(os.path.join(tmp, "skipped.txt"), "w") as f:
                f.write("not python")
            corpus = text.load_stdlib(
                directory=tmp, validation_every=2, max_file_bytes=3
            )
        self.assertEqual(corpus.source.validation_files, ("m0.py", "m2.py"))
        self.assertEqual(bytes(corpus.validation), b"AAA\nCCC\n")
        self.assertEqual(bytes(corpus.train), b"BBB\nDDD\n")

    def test_whole_files_and_tiled_windows(self):
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(4):
                with open(os.path.join(tmp, f"m{i}.py"), "wb") as f:
                    f.write(bytes(range(10 * i, 10 * i + 10)))
            corpus = text.load_stdlib(
                directory=tmp, validation_every=2, max_file_bytes=None
            )
            with self.assertRaisesRegex(ValueError, "None or at least 1"):
                text.load_stdlib(directory=tmp, max_file_bytes=0)
        self.assertIsNone(corpus.source.max_file_bytes)
        self.assertEqual(corpus.source.validation_bytes, 22)  # whole + "\n"
        # Every byte after the first is predicted exactly once.
        x, y = text.tiled_windows(corpus.validation, 5)
        self.assertEqual(x.shape, (4, 5))
        np.testing.assert_array_equal(x.ravel(), corpus.validation[:20])
        np.testing.assert_array_equal(y.ravel(), corpus.validation[1:21])
        with self.assertRaisesRegex(ValueError, r"\[1, 21\], got 22"):
            text.tiled_windows(corpus.validation, 22)

    def test_windows_are_next_byte_pairs_and_seeded(self):
        corpus = _corpus()
        x, y = text.windows(corpus.train, 5, 16, np.random.default_rng(0))
        self.assertEqual(x.shape, (5, 16))
        self.assertEqual(x.dtype, np.int32)
        np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
        a = list(text.batches(corpus.train, 4, 8, seed=3, steps=3))
        b = list(text.batches(corpus.train, 4, 8, seed=3, steps=3))
        c = list(text.batches(corpus.train, 4, 8, seed=4, steps=3))
        _utils.assert_trees_equal(a, b)
        self.assertFalse(np.array_equal(a[0][0], c[0][0]))


class BudgetWorkloadTest(absltest.TestCase):
    def test_stretched_schedule_lives_in_the_state(self):
        workload = dataclasses.replace(
            _workload(), warmup_steps=None, warmup_fraction=0.05
        )
        params = {"w": np.zeros(2, np.float32)}
        short = workload.optimizer(100).init(params)
        long = workload.optimizer(400).init(params)
        self.assertEqual(float(short.hyperparams["horizon"]), 100.0)
        self.assertEqual(float(long.hyperparams["warmup"]), 20.0)
        self.assertIn("warm-up (5%)", workload.description)
        with self.assertRaisesRegex(ValueError, "exactly one"):
            dataclasses.replace(workload, warmup_steps=25)
        with self.assertRaisesRegex(ValueError, r"\[0, 1\), got 1.5"):
            dataclasses.replace(workload, warmup_fraction=1.5)

    def test_muon_orthogonalises_the_matrices_on_the_same_schedule(self):
        workload = dataclasses.replace(
            _workload(), warmup_steps=None, warmup_fraction=0.05
        )
        params = {"w": np.ones((4, 3), np.float32), "b": np.ones(3, np.float32)}
        gradient = np.array(
            [[10, 0, 0], [0, 1, 0], [0, 0, 0.2], [1, 1, 1]], np.float32
        )
        muon = workload.optimizer(400, muon=True)
        state = muon.init(params)
        self.assertEqual(float(state.hyperparams["horizon"]), 400.0)
        self.assertEqual(float(state.hyperparams["warmup"]), 20.0)
        updates, _ = jax.jit(muon.update)(
            {"w": gradient, "b": np.ones(3, np.float32)}, state, params
        )
        # Newton-Schulz: the matrix's update has about equal singular
        # values, where its gradient's span a factor of 15.
        singular = np.linalg.svd(np.asarray(updates["w"]), compute_uv=False)
        self.assertGreater(np.linalg.cond(gradient), 15.0)
        self.assertLess(singular[0] / singular[-1], 1.7)  # AdamW: 2.0
        with self.assertRaisesRegex(ValueError, "warmup_fraction"):
            _workload().optimizer(muon=True)

    def test_validation_losses_per_window_in_chunks(self):
        workload = dataclasses.replace(_workload(), validation_windows=None)
        x, y = workload.validation
        self.assertGreater(len(x), lm.EVAL_BATCH)  # padded last chunk
        plain = lm.plain_step(workload.model(0), workload.optimizer())
        state = plain.init(workload.model(0))
        losses = lm.validation_losses(plain.predict, state, workload)
        self.assertEqual(losses.shape, (len(x),))
        some = slice(len(x) - 3, len(x))
        expected = [
            float(
                models.cross_entropy(
                    plain.predict(state, x[i : i + 1]), y[i : i + 1]
                )
            )
            for i in range(some.start, some.stop)
        ]
        np.testing.assert_allclose(losses[some], expected, rtol=1e-5)
        self.assertAlmostEqual(
            lm.validation_loss(plain.predict, state, workload),
            float(losses.mean()),
            places=6,
        )


class TransformerTest(absltest.TestCase):
    def test_shapes_and_causality(self):
        model = models.NNXTransformer(
            context=16, d_model=16, num_heads=2, num_blocks=2, rngs=nnx.Rngs(0)
        )
        x = jnp.asarray(
            np.random.default_rng(0).integers(0, 256, (2, 16)), jnp.int32
        )
        logits = model(x)
        self.assertEqual(logits.shape, (2, 16, 256))
        # A later byte changes no earlier position's logits.
        changed = model(x.at[:, 10].set((x[:, 10] + 1) % 256))
        np.testing.assert_allclose(logits[:, :10], changed[:, :10], atol=1e-6)
        self.assertFalse(np.allclose(logits[:, 10:], changed[:, 10:]))
        with self.assertRaisesRegex(ValueError, "exceed the context"):
            model(jnp.zeros((1, 17), jnp.int32))
        # The layers take Flax's compute dtype.
        half = models.NNXTransformer(
            context=16,
            d_model=16,
            num_heads=2,
            num_blocks=1,
            dtype=jnp.bfloat16,
            rngs=nnx.Rngs(0),
        )
        self.assertEqual(half(x).dtype, jnp.bfloat16)
        self.assertEqual(
            nnx.state(half, nnx.Param)["head"]["kernel"][...].dtype,
            jnp.float32,
        )

    def assert_o0_trains_plain_optax(
        self, steps: int, level: str = "O0", **options
    ):
        """Trains `boostax.auto_boost(level, **options)` and the hand-written
        NNX + Optax step for `steps` from seed 0, asserts the same params
        and validation curve bit for bit, and returns boostax's run."""
        workload = _workload()
        plain = lm.plain_step(workload.model(0), workload.optimizer())
        ts = boostax.auto_boost(
            level,
            optimizer=workload.optimizer(),
            model=workload.model(0),
            loss=models.cross_entropy,
            **options,
        )
        ours = lm.train(
            ts, ts.init(workload.model(0)), workload, seed=0, steps=steps
        )
        theirs = lm.train(
            plain.step,
            plain.init(workload.model(0)),
            workload,
            seed=0,
            predict=plain.predict,
            steps=steps,
        )
        _utils.assert_trees_equal(ours.state.params, theirs.state.params)
        self.assertEqual(ours.curve, theirs.curve)
        return ours

    def test_o0_is_plain_optax_bit_for_bit(self):
        ours = self.assert_o0_trains_plain_optax(steps=10)
        self.assertLess(ours.final_loss, np.log(256))
        self.assertEqual(lm.steps_to(ours.curve, ours.final_loss), 10)
        self.assertIsNone(lm.steps_to(ours.curve, 0.0))

    def test_a_float32_dynamic_loss_scale_is_plain_optax_bit_for_bit(self):
        # Scaling the loss by a power of two and the gradients back is
        # exact in float32 while nothing overflows: the benchmarks'
        # "dynamic loss scale" arm trains plain Optax's curve.
        self.assert_o0_trains_plain_optax(
            steps=6, loss_scale=boostax.DynamicLossScale()
        )

    def test_o1_trains_plain_optax_bit_for_bit(self):
        # No BatchNorm here: in mode "auto" O1 switches on neither LessBN
        # (its centralization cost 0.01 nats on the transformer budgets)
        # nor freezing (0.09), and says so.
        with self.assertWarnsRegex(
            UserWarning,
            "Level 'O1' on this model: LessBN found no BatchNorm.*trains "
            "as at level 'O0'.*boostax.text_recipe",
        ):
            self.assert_o0_trains_plain_optax(
                steps=4, level="O1", sample_inputs=_workload().sample_inputs
            )

    def test_a_plain_step_needs_its_predict(self):
        def step(state, batch):
            return state, {}

        with self.assertRaisesRegex(TypeError, "`predict` is required"):
            lm.train(step, None, _workload(), seed=0, steps=1)

    def test_less_bn_says_it_found_no_batch_norm(self):
        workload = _workload()
        model, x = workload.model(0), workload.sample_inputs
        report = boostax.less_bn_report(model, x)
        self.assertFalse(report.found_batch_norm)
        self.assertEqual(
            str(report),
            "LessBN found no BatchNorm in the model (it removes BatchNorms "
            "only; LayerNorm, GroupNorm and RMSNorm stay), none removed.",
        )
        with self.assertWarnsRegex(
            UserWarning, "found no BatchNorm in the model.*returned unchanged"
        ):
            self.assertIs(boostax.less_bn(model, x), model)
        # O1's default (fn_flag None) puts no FN head on the per-position
        # logits and says why beside the missing BatchNorm; fn_flag=True is
        # refused (tests/fn_head_placement_test.py has the rule).
        auto = str(boostax.less_bn_report(model, x, fn_flag=None))
        self.assertIn("found no BatchNorm", auto)
        self.assertIn(
            "FN head not placed: the output (1, 32, 256) of the last dense "
            "layer 'head' is per position",
            auto,
        )
        with self.assertRaisesRegex(ValueError, "`fn_flag=True` asks for"):
            boostax.less_bn(model, x, fn_flag=True)

    def test_text_recipe_is_sequence_length_warm_up_alone(self):
        # The recipe is Composer's warm-up and nothing else (the benchmarks'
        # "seq warm-up" arm, bit for bit): no LessBN, whose centralization
        # cost loss on the transformer budgets, and no freezing.
        workload = _workload()
        config = boostax.text_recipe(total_steps=40)
        self.assertEqual(
            boostax.boost_config("O1", config).enabled_algorithms, ()
        )
        warmup = {"seq_len_warmup": {"enabled": True, "total_steps": 40}}
        states = {}
        for name, level, cfg in (
            ("O0", "O0", None),
            ("seq warm-up", "O0", warmup),
            ("text recipe", "O1", config),
        ):
            ts = boostax.auto_boost(
                level,
                cfg,
                optimizer=workload.optimizer(),
                model=workload.model(0),
                loss=models.cross_entropy,
                sample_inputs=workload.sample_inputs,
            )
            self.assertIsNone(ts.freezing)
            state = ts.init(workload.model(0))
            for batch in workload.batches(0, steps=3):  # step 0: lr 0
                state, _ = ts(state, batch)  # 8 of 32 positions
            states[name] = state
        self.assertEqual(ts.seq_len_warmup, boostax.seq_len_warmup(40))
        recipe, warm = states["text recipe"], states["seq warm-up"]
        _utils.assert_trees_equal(recipe.params, warm.params)
        _utils.assert_trees_equal(recipe.opt_state, warm.opt_state)
        # ... and the warm-up acted: truncated batches, other updates.
        self.assertFalse(
            np.array_equal(
                recipe.params["head"]["kernel"],
                states["O0"].params["head"]["kernel"],
            )
        )

    def test_less_bn_alone_is_centralization_by_layer_here(self):
        # On a model without BatchNorm, and with no FN head on per-position
        # logits, LessBN's only effect is its gradient centralization: the
        # same train step, bit for bit, as the optimizer wrapped in
        # `with_gradient_centralization` over each layer's fan-in (the
        # benchmarks' "LessBN (O1)" and "centralization" arms).
        workload = _workload()
        model, x = workload.model(0), workload.sample_inputs
        less_bn_only = {
            "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False}
        }
        centralized = boostax.with_gradient_centralization(
            workload.optimizer(),
            axes=boostax.gradient_centralization_axes(model, x),
        )
        states = {}
        for name, level, config, optimizer in (
            ("LessBN", "O1", less_bn_only, workload.optimizer()),
            ("centralization", "O0", None, centralized),
        ):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # no BatchNorm, said once
                ts = boostax.auto_boost(
                    level,
                    config,
                    optimizer=optimizer,
                    model=workload.model(0),
                    loss=models.cross_entropy,
                    sample_inputs=x,
                )
            state = ts.init(workload.model(0))
            for batch in workload.batches(0, steps=4):
                state, _ = ts(state, batch)
            states[name] = state
        _utils.assert_trees_equal(
            states["LessBN"].params, states["centralization"].params
        )
        _utils.assert_trees_equal(
            states["LessBN"].opt_state, states["centralization"].opt_state
        )

    def test_freezing_groups_follow_call_order(self):
        workload = _workload()
        groups = boostax.split_parameters_groups(
            workload.model(0), 3, sample_inputs=workload.sample_inputs
        )
        # Group 0 is everything; later groups are suffixes ending in the
        # head (call order, not sorted names: "head" sorts before "ln").
        self.assertEqual(groups[0][0], ("tokens", "embedding"))
        for group in groups[1:]:
            self.assertEqual(group[-1], ("head", "bias"))
            self.assertEqual(group, groups[0][-len(group) :])
        self.assertGreater(len(groups[1]), len(groups[2]))


if __name__ == "__main__":
    absltest.main()
