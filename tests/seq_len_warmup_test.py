# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Sequence-length warm-up: Composer's schedule, truncation, the step."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn

import boostax
from boostax._src.step import program_schedule
from tests import _utils

VOCAB = 16
FULL = 16
# Lengths 8, 12, 16: three updates each at 8 and 12, then 16.
WARMUP = dict(duration=0.6, min_seq_length=8, step_size=4)


def composer_length(update, total, duration, min_len, max_len, step):
    """Composer's ``SeqLengthWarmup.apply``, in float64 NumPy."""
    warmup_steps = int(np.float64(total) * np.float64(duration))
    update_steps = (max_len - min_len) // step
    every = warmup_steps // update_steps
    length = step * (update // every) + min_len
    return int(np.clip(length, min_len, max_len))


def documented_length(update, total, duration, min_len, full, step):
    """The docs' schedule: ``n = ceil((full - min) / step)`` increments of
    ``e = W // n`` updates each, the last clipped to the full length."""
    warmup = int(total * duration)
    every = warmup // math.ceil((full - min_len) / step)
    return min(full, min_len + step * (update // every))


class Tiny(nn.Module):
    """Embedding, a hidden layer and a head: per-position logits."""

    @nn.compact
    def __call__(self, tokens):
        h = nn.Embed(VOCAB, 8)(tokens)
        h = nn.relu(nn.Dense(8)(h))
        h = nn.relu(nn.Dense(8)(h))
        return nn.Dense(VOCAB)(h)


def cross_entropy(logits, targets):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, targets
    ).mean()


def batches(n, batch_size=4):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        tokens = rng.integers(0, VOCAB, (batch_size, FULL)).astype(np.int32)
        out.append((tokens, np.roll(tokens, -1, axis=1)))
    return out


def variables():
    return Tiny().init(jax.random.PRNGKey(0), jnp.zeros((1, FULL), jnp.int32))


def cut(batch, length):
    return tuple(x[:, :length] for x in batch)


def by_hand(step, lengths, data):
    """`step` (no warm-up) on batches truncated by hand to `lengths`."""
    state = step.init(variables())
    for length, batch in zip(lengths, data, strict=True):
        state, _ = step(state, cut(batch, length))
    return state


class ScheduleTest(parameterized.TestCase):
    @parameterized.parameters(
        (100, 0.3, 8, 64, 8),
        (1000, 0.3, 8, 1024, 8),
        (57, 0.5, 5, 41, 3),  # `step_size` divides (full - min) ...
        (10, 1.0, 8, 16, 4),
        (3001, 0.3, 8, 1024, 8),  # ... and W % n != 0: full before W
    )
    def test_lengths_are_composers(self, total, duration, low, full, step):
        # Where `step_size` divides the range, Composer's schedule exactly.
        warmup = boostax.seq_len_warmup(
            total, duration=duration, min_seq_length=low, step_size=step
        )
        lengths = warmup.bind(full)
        for update in range(total + 5):
            self.assertEqual(
                lengths.at(update),
                composer_length(update, total, duration, low, full, step),
                update,
            )

    @parameterized.parameters(
        # (total, duration, min, full, step, first update at full length)
        (20, 0.5, 8, 20, 8, 10),  # Composer's: 20, all of the run
        (100, 0.3, 8, 64, 8, 28),  # 7 lengths of 4 updates; W = 30
        (57, 0.5, 5, 40, 3, 24),  # 12 increments, the last of 2
        (10, 0.6, 8, 16, 4, 6),
        (40, 0.3, 8, 32, 7, 12),  # 24 = 3 * 7 + 3: W = 12 exactly
        (30, 0.3, 8, 10, 8, 9),  # one clipped increment (Composer: / 0)
    )
    def test_full_length_arrives_by_duration(
        self, total, duration, low, full, step, first_full
    ):
        warmup = boostax.seq_len_warmup(
            total, duration=duration, min_seq_length=low, step_size=step
        )
        steps = np.arange(2 * total)  # train steps, two per update
        got = warmup.bind(full, 2).at_positions(steps)
        expected = [
            documented_length(u, total, duration, low, full, step)
            for u in steps // 2
        ]
        np.testing.assert_array_equal(got, expected)
        # The first step at the full length, pinned: by `duration`, within
        # n updates of it, and so on every later step.
        increments = math.ceil((full - low) / step)
        last_warmup = int(total * duration)
        first = int(np.argmax(got == full))
        self.assertEqual(first, 2 * first_full)
        self.assertTrue(np.all(got[first:] == full))
        self.assertLessEqual(first_full, last_warmup)
        self.assertGreater(first_full, last_warmup - increments)
        self.assertEqual(len(warmup.lengths(full)), first_full)
        self.assertEqual(warmup.bind(full, 2).end, 2 * first_full)

    def test_composers_schedule_overruns_where_the_step_leaves_a_rest(self):
        # The case: (full - min) % step_size != 0; Composer's code
        # keeps the warm-up going to 2 W (all of this run), boostax's ends
        # at W = 10.
        composer = [composer_length(u, 20, 0.5, 8, 20, 8) for u in range(20)]
        self.assertEqual(composer, [8] * 10 + [16] * 10)
        lengths = boostax.seq_len_warmup(20, duration=0.5).bind(20)
        self.assertEqual(
            [lengths.at(u) for u in range(20)], [8] * 5 + [16] * 5 + [20] * 10
        )

    def test_counted_in_updates_with_accumulation(self):
        lengths = boostax.seq_len_warmup(10, **WARMUP).bind(FULL, 3)
        positions = np.arange(40)
        expected = [
            composer_length(p // 3, 10, 0.6, 8, FULL, 4) for p in positions
        ]
        self.assertEqual([lengths.at(p) for p in positions], expected)
        np.testing.assert_array_equal(lengths.at_positions(positions), expected)


def lm1b_batch(rng, batch_size=3, length=16):
    """A dict batch as the issue's port of Flax's lm1b had: tokens and
    targets, an image-feature array of another length first in
    ``jax.tree`` order, a per-example label."""
    ints, floats = np.int32, np.float32
    return {
        "features": rng.normal(size=(batch_size, 5, 2)).astype(floats),
        "inputs": rng.integers(0, 9, (batch_size, length)).astype(ints),
        "label": rng.integers(0, 9, (batch_size,)).astype(ints),
        "targets": rng.integers(0, 9, (batch_size, length)).astype(ints),
    }


class TruncateTest(parameterized.TestCase):
    def test_under_jit_equals_by_hand(self):
        rng = np.random.default_rng(1)
        batch = {
            "tokens": rng.integers(0, 9, (3, 16)).astype(np.int32),
            "label": rng.integers(0, 9, (3,)).astype(np.int32),
            "embedded": rng.normal(size=(3, 16, 4)).astype(np.float32),
        }
        out = jax.jit(lambda b: boostax.truncate_sequence(b, 8))(batch)
        expected = dict(
            batch,
            tokens=batch["tokens"][:, :8],
            embedded=batch["embedded"][:, :8],
        )
        _utils.assert_trees_equal(out, expected)

    @parameterized.parameters(("inputs", "targets"), ["targets", "inputs"])
    def test_keys_cut_the_named_entries_only(self, *keys):
        batch = lm1b_batch(np.random.default_rng(2))
        out = jax.jit(lambda b: boostax.truncate_sequence(b, 4, keys=keys))(
            batch
        )
        expected = dict(batch)
        expected.update(inputs=batch["inputs"][:, :4])
        expected.update(targets=batch["targets"][:, :4])
        _utils.assert_trees_equal(out, expected)
        warmup = boostax.seq_len_warmup(10, **WARMUP, keys=list(keys))
        self.assertEqual(warmup.keys, keys)
        self.assertEqual(warmup.sequence_length(batch), FULL)
        cut = jax.jit(warmup.bind(FULL).truncate(12))(batch)
        self.assertEqual(cut["inputs"].shape, (3, 12))
        self.assertEqual(cut["features"].shape, (3, 5, 2))

    def test_keys_of_a_tuple_batch_and_nested_entries(self):
        tokens = np.arange(2 * 8).reshape(2, 8)
        features = np.ones((2, 3, 4))
        out = boostax.truncate_sequence((features, tokens), 2, keys=1)
        _utils.assert_trees_equal(out, (features, tokens[:, :2]))
        nested = {"text": {"ids": tokens, "mask": tokens > 3}, "x": features}
        out = boostax.truncate_sequence(nested, 2, keys="text")
        expected = {"text": {"ids": tokens[:, :2], "mask": tokens[:, :2] > 3}}
        _utils.assert_trees_equal(out, dict(expected, x=features))

    def test_the_first_leaf_does_not_decide(self):
        # The issue: the features come first in jax.tree order, and their
        # length (5) was taken for the batch's; the tokens were never cut.
        batch = lm1b_batch(np.random.default_rng(3))
        for call in (
            lambda: boostax.truncate_sequence(batch, 4),
            lambda: boostax.seq_len_warmup(10, **WARMUP).sequence_length(batch),
        ):
            with self.assertRaisesRegex(
                ValueError,
                r"cannot tell the batch's sequence length: with no `keys`.*"
                r"disagree on its size: batch\['features'\] 5, "
                r"batch\['inputs'\] 16, batch\['targets'\] 16.*"
                r"name the entries that hold sequences with `keys`",
            ):
                call()
        # The step's `batch_keys` narrow the leaves looked at.
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        full = warmup.sequence_length(batch, batch_keys=("inputs", "targets"))
        self.assertEqual(full, FULL)
        lengths = warmup.bind_batch(batch, batch_keys=("inputs", "targets"))
        cut = lengths.truncate(8)(batch)
        self.assertEqual(cut["targets"].shape, (3, 8))
        self.assertEqual(cut["features"].shape, (3, 5, 2))

    def test_seq_axis(self):
        x = np.arange(2 * 3 * 8).reshape(2, 3, 8)
        (out,) = boostax.truncate_sequence((x,), 4, seq_axis=2)
        np.testing.assert_array_equal(out, x[:, :, :4])

    def test_bad_inputs(self):
        batch = lm1b_batch(np.random.default_rng(4))
        with self.assertRaisesRegex(ValueError, "needs batch leaves with a"):
            boostax.truncate_sequence((np.zeros(4), np.zeros(4)), 2)
        with self.assertRaisesRegex(ValueError, r"`length` must be an int in"):
            boostax.truncate_sequence((np.zeros((2, 4)),), 5)
        with self.assertRaisesRegex(ValueError, "have 4 positions .* to 8"):
            boostax.truncate_sequence((np.zeros((2, 4)),), 2, full_length=8)
        with self.assertRaisesRegex(
            ValueError,
            r"`keys`=\('inputs', 'label'\) names the entries .* but "
            r"batch\['label'\] \(3,\) has rank 1 or less",
        ):
            boostax.truncate_sequence(batch, 2, keys=("inputs", "label"))
        with self.assertRaisesRegex(
            ValueError, "names the entry 'tokens', which the batch does not"
        ):
            boostax.truncate_sequence(batch, 2, keys="tokens")
        with self.assertRaisesRegex(ValueError, "by index, 0 to 1"):
            boostax.truncate_sequence((np.zeros((2, 4)),) * 2, 2, keys="a")
        with self.assertRaisesRegex(TypeError, "names entries of a dict"):
            boostax.truncate_sequence(np.zeros((2, 4)), 2, keys=0)

    @parameterized.parameters(
        (b"inputs", TypeError, "`keys` must be None, a key or a sequence"),
        ({"inputs"}, TypeError, "`keys` must be None, a key or a sequence"),
        ([1.5], TypeError, r"by dict key \(str\) or tuple index"),
        ([True], TypeError, r"by dict key \(str\) or tuple index"),
        ((), ValueError, "at least one batch entry, each once, got \\(\\)"),
        (("a", "a"), ValueError, "each once, got \\('a', 'a'\\)"),
    )
    def test_bad_keys(self, keys, error, message):
        with self.assertRaisesRegex(error, message):
            boostax.seq_len_warmup(10, keys=keys)


class StepTest(absltest.TestCase):
    def make(self, optimizer=None, **kwargs):
        return boostax.make_train_step(
            optimizer or optax.adam(1e-2),
            model=Tiny(),
            loss=cross_entropy,
            **kwargs,
        )

    def test_trains_on_truncated_batches(self):
        data = batches(8)
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        step = self.make(seq_len_warmup=warmup)
        state = step.init(variables())
        seen = []
        for batch in data:
            state, metrics = step(state, batch)
            seen.append((metrics["sequence_length"], metrics["tokens"]))
        lengths = [step.program_at(i)[1] for i in range(8)]
        self.assertEqual(lengths, [8, 8, 8, 12, 12, 12, 16, 16])
        # The metrics say what each step trained on.
        rows = len(data[0][0])
        self.assertEqual(
            [(int(n), int(t)) for n, t in seen],
            [(n, rows * n) for n in lengths],
        )
        self.assertEqual(step.trace_count, 3)  # each length compiled once
        self.assertEqual(
            step.program_shares(),
            {(None, 8): 0.3, (None, 12): 0.3, (None, 16): 0.4},
        )
        _utils.assert_trees_equal(
            state.params, by_hand(self.make(), lengths, data).params
        )

    def test_accumulation_keeps_the_length_within_an_update(self):
        data = batches(12)
        tx = boostax.gradient_accumulation(optax.adam(1e-2), 2)
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        step = self.make(tx, seq_len_warmup=warmup)
        state = step.init(variables())
        for batch in data:
            state, _ = step(state, batch)
        lengths = [step.program_at(i)[1] for i in range(12)]
        self.assertEqual(lengths, [8] * 6 + [12] * 6)
        for u in range(20):
            self.assertEqual(step.program_at(2 * u), step.program_at(2 * u + 1))
        plain = self.make(boostax.gradient_accumulation(optax.adam(1e-2), 2))
        _utils.assert_trees_equal(
            state.params, by_hand(plain, lengths, data).params
        )

    def test_precision_and_loss_scale(self):
        data = batches(7)
        options = dict(
            precision="bfloat16", loss_scale=boostax.DynamicLossScale(2.0**8)
        )
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        step = self.make(seq_len_warmup=warmup, **options)
        state = step.init(variables())
        for batch in data:
            state, metrics = step(state, batch)
        self.assertIn("loss_scale", metrics)
        lengths = [step.program_at(i)[1] for i in range(7)]
        expected = by_hand(self.make(**options), lengths, data)
        _utils.assert_trees_equal(state.params, expected.params)
        _utils.assert_trees_equal(
            state.algorithms.loss_scale, expected.algorithms.loss_scale
        )

    def test_resume_is_bitwise(self):
        data = batches(12)

        def step():
            tx = boostax.gradient_accumulation(optax.adam(1e-2), 2)
            warmup = boostax.seq_len_warmup(10, **WARMUP)
            return self.make(tx, seq_len_warmup=warmup)

        whole = step()
        state = whole.init(variables())
        for batch in data:
            state, _ = whole(state, batch)
        first = step()
        part = first.init(variables())
        for batch in data[:5]:  # mid-update, mid-warm-up
            part, _ = first(part, batch)
        saved = jax.device_get(part)
        resumed = step()
        part = jax.tree.map(jnp.asarray, saved)
        for batch in data[5:]:
            part, _ = resumed(part, batch)
        _utils.assert_trees_equal(part.params, state.params)
        _utils.assert_trees_equal(part.opt_state, state.opt_state)
        self.assertEqual(resumed.program_at(5), (None, 8))

    def test_mesh(self):
        data = batches(7, batch_size=8)
        mesh = jax.make_mesh((8,), ("data",))
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        step = self.make(
            seq_len_warmup=warmup,
            data_parallel=boostax.DataParallel(mesh),
        )
        state = step.init(variables())
        for batch in data:
            state, metrics = step(state, batch)
        lengths = [step.program_at(i)[1] for i in range(7)]
        self.assertEqual(lengths, [8, 8, 8, 12, 12, 12, 16])
        # The global batch's tokens, not one device's.
        self.assertEqual(int(metrics["tokens"]), 8 * 16)
        _utils.assert_trees_all_close(
            jax.device_get(state.params),
            by_hand(self.make(), lengths, data).params,
            rtol=1e-5,
            atol=1e-6,
        )

    def test_cost_report_weighs_the_lengths(self):
        data = batches(1)
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        step = self.make(seq_len_warmup=warmup)
        state = step.init(variables())
        plain = self.make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = boostax.measure.cost_report(
                step,
                state,
                data[0],
                baseline=plain,
                baseline_state=plain.init(variables()),
            )
        self.assertEqual(
            sorted(report.shares), ["length 12", "length 16", "length 8"]
        )
        flops = {k: v.flops for k, v in report.executables.items()}
        self.assertLess(flops["length 8"], flops["length 12"])
        self.assertLess(flops["length 12"], flops["length 16"])
        self.assertLess(report.ratios["flops"], 1.0)


class BatchKeysTest(absltest.TestCase):
    """The leaves cut through the step: `batch_keys`, `keys`, a model
    without sequences."""

    def test_batch_keys_name_the_sequences(self):
        data = [lm1b_batch(np.random.default_rng(i), 4) for i in range(7)]

        def make(**kwargs):
            return boostax.make_train_step(
                optax.adam(1e-2),
                model=Tiny(),
                loss=cross_entropy,
                **kwargs,
                options=boostax.StepOptions(batch_keys=("inputs", "targets")),
            )

        step = make(seq_len_warmup=boostax.seq_len_warmup(10, **WARMUP))
        state = step.init(variables())
        for batch in data:
            state, metrics = step(state, batch)
        lengths = [step.program_at(i)[1] for i in range(7)]
        self.assertEqual(lengths, [8, 8, 8, 12, 12, 12, 16])
        # The tokens of the entries cut (not of the image features).
        self.assertEqual(int(metrics["tokens"]), 4 * 16)
        plain = make()
        expected = plain.init(variables())
        for length, batch in zip(lengths, data, strict=True):
            cut = {k: batch[k][:, :length] for k in ("inputs", "targets")}
            expected, _ = plain(expected, cut)
        _utils.assert_trees_equal(state.params, expected.params)

    def test_keys_of_a_loss_function(self):
        data = [lm1b_batch(np.random.default_rng(i), 4) for i in range(4)]

        def loss_fn(w, batch):  # reads the features and labels whole
            x = jax.nn.one_hot(batch["inputs"], VOCAB) @ w
            bias = batch["features"].mean() + batch["label"].mean()
            return jnp.mean((x - batch["targets"][..., None]) ** 2) + bias

        def make(**kwargs):
            return boostax.make_train_step(
                optax.sgd(0.1), loss_fn=loss_fn, **kwargs
            )

        warmup = boostax.seq_len_warmup(
            10, **WARMUP, keys=("inputs", "targets")
        )
        step = make(seq_len_warmup=warmup)
        state = step.init(jnp.ones((VOCAB, 1)))
        plain = make()
        expected = plain.init(jnp.ones((VOCAB, 1)))
        for i, batch in enumerate(data):
            state, _ = step(state, batch)
            length = step.program_at(i)[1]
            cut = dict(batch)
            cut.update(inputs=batch["inputs"][:, :length])
            cut.update(targets=batch["targets"][:, :length])
            expected, _ = plain(expected, cut)
        lengths = [step.program_at(i)[1] for i in range(4)]
        self.assertEqual(lengths, [8, 8, 8, 12])
        _utils.assert_trees_equal(state.params, expected.params)

    def test_a_model_without_sequences_names_the_warm_up(self):
        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(3)(nn.relu(nn.Dense(4)(x)))

        def make():
            return boostax.make_train_step(
                optax.sgd(0.1),
                model=MLP(),
                loss=cross_entropy,
                seq_len_warmup=boostax.seq_len_warmup(10, **WARMUP),
            )

        def mlp_variables(width):
            return MLP().init(jax.random.PRNGKey(0), jnp.zeros((1, width)))

        batch = (np.ones((4, FULL), np.float32), np.zeros(4, np.int32))
        step = make()
        with self.assertRaisesRegex(
            ValueError,
            r"seq_len_warmup: the step fails on the batch cut to its first 8 "
            r"of 16 positions along `seq_axis` 1 \(the leaves cut: "
            r"batch\[0\] \(4, 16\)\), and runs on the whole batch.*needs a "
            r"model of sequences.*name the entries that hold sequences",
        ):
            step(step.init(mlp_variables(FULL)), batch)
        # A state that does not fit the whole batch either: the model's own
        # error, not the warm-up's.
        step = make()
        with self.assertRaisesRegex(ValueError, "params do not fit") as caught:
            step(step.init(mlp_variables(FULL + 1)), batch)
        self.assertNotIn("seq_len_warmup", str(caught.exception))


class FreezingTest(absltest.TestCase):
    def test_programs_are_depth_and_length(self):
        data = batches(8)
        config = {
            # Freezing with lengths; LessBN would find nothing to do here.
            "boost": {"mode": "manual", "grad_freeze": True, "less_bn": False},
            "grad_freeze": {"param_groups": 2, "total_steps": 10},
        }

        def step(warmup):
            with_warmup = dict(config)
            if warmup:
                with_warmup["seq_len_warmup"] = {
                    "enabled": True,
                    "total_steps": 10,
                    **WARMUP,
                }
            return boostax.auto_boost(
                "O1",
                with_warmup,
                optimizer=optax.adam(1e-2),
                model=Tiny(),
                loss=cross_entropy,
                sample_inputs=data[0][0],
                options=boostax.StepOptions(freeze_warmup_steps=2),
            )

        boosted = step(True)
        state = boosted.init(variables())
        for batch in data:
            state, _ = boosted(state, batch)
        programs = [boosted.program_at(i) for i in range(8)]
        depths = [boosted.freezing.depth(i) for i in range(8)]
        self.assertEqual(programs[:2], [("masked", 8), ("masked", 8)])
        self.assertEqual(
            programs[2:],
            list(zip(depths[2:], [8, 12, 12, 12, 16, 16], strict=True)),
        )
        lengths = [p[1] for p in programs]
        _utils.assert_trees_equal(
            state.params, by_hand(step(False), lengths, data).params
        )


class ProgramScheduleTest(absltest.TestCase):
    """The programs with freezing and lengths, listed without compiling."""

    def setUp(self):
        super().setUp()
        freezing = boostax.Freezing(
            ((("a",), ("b",)), (("b",),)), np.array([0, 1, 1, 0])
        )
        lengths = boostax.seq_len_warmup(10, **WARMUP).bind(FULL)
        self.schedule = program_schedule.ProgramSchedule(
            freezing, 2, lengths=lengths
        )

    def test_programs_and_shares(self):
        schedule = self.schedule
        self.assertEqual(
            [schedule.program_at(p) for p in range(7)],
            [("masked", 8), ("masked", 8), (1, 8), (0, 12), (0, 12)]
            + [(1, 12), (1, 16)],
        )
        # The freezing warm-up's two positions run its program: weighted too.
        self.assertEqual(
            schedule.shares(),
            {
                ("masked", 8): 0.2,
                (1, 8): 0.1,
                (0, 12): 0.2,
                (1, 12): 0.1,
                (0, 16): 0.2,
                (1, 16): 0.2,
            },
        )

    def test_background_compiles_in_order_of_first_use(self):
        schedule = self.schedule
        self.assertIsNone(schedule.keys_to_compile(0, {}))
        compiled = {("masked", 8): 1.0}
        # The warm-up's one program is compiled; the depths' are not due
        # during the warm-up (the first timed call), then all at once.
        self.assertIsNone(schedule.keys_to_compile(0, compiled))
        self.assertFalse(schedule.queued_all)
        self.assertEqual(
            schedule.keys_to_compile(2, compiled),
            [(1, 8), (0, 12), (1, 12), (1, 16), (0, 16)],
        )
        self.assertTrue(schedule.queued_all)


class ErrorsTest(parameterized.TestCase):
    @parameterized.parameters(
        (dict(total_steps=0), ValueError, "`total_steps` must be an int >= 1"),
        (dict(duration=0.0), ValueError, r"`duration` must be .*\(0, 1\]"),
        (dict(duration=1.5), ValueError, "`duration` must be"),
        (dict(min_seq_length=0), ValueError, "`min_seq_length`"),
        (dict(max_seq_length=8), ValueError, "must be above `min_seq"),
        (dict(step_size=0), ValueError, "`step_size` must be"),
        (dict(seq_axis=0), ValueError, "`seq_axis` must be an int >= 1"),
        (dict(total_steps=2.5), TypeError, "`total_steps` must be an int"),
    )
    def test_bad_settings(self, change, error, message):
        settings = dict(total_steps=10, **WARMUP)
        settings.update(change)
        total = settings.pop("total_steps")
        with self.assertRaisesRegex(error, message):
            boostax.seq_len_warmup(total, **settings)

    def test_bad_lengths(self):
        warmup = boostax.seq_len_warmup(10, **WARMUP)
        with self.assertRaisesRegex(ValueError, "nothing to warm up"):
            warmup.lengths(8)
        # Above the first length by less than a step: one clipped increment.
        np.testing.assert_array_equal(warmup.lengths(10), [8] * 6)
        with self.assertRaisesRegex(ValueError, r"fewer than its 2 length"):
            boostax.seq_len_warmup(3, **WARMUP).lengths(FULL)
        with self.assertRaisesRegex(ValueError, "differs from `max_seq"):
            boostax.seq_len_warmup(10, max_seq_length=32).lengths(FULL)

    def make(self, **kwargs):
        return boostax.make_train_step(
            optax.sgd(0.1),
            loss_fn=lambda w, batch: jnp.mean((batch[0] @ w - batch[1]) ** 2),
            seq_len_warmup=boostax.seq_len_warmup(10, **WARMUP),
            **kwargs,
        )

    def test_batch_without_sequences_is_refused(self):
        step = self.make()
        state = step.init(jnp.zeros(3))
        with self.assertRaisesRegex(ValueError, "needs batch leaves with a"):
            step(state, (jnp.ones(3), jnp.ones(())))

    def test_dict_batch_of_disagreeing_leaves_is_refused(self):
        # The batch through the step: no leaf's length is guessed.
        def loss_fn(w, batch):
            x = batch["inputs"].astype(jnp.float32)
            return jnp.mean((x @ w - batch["targets"]) ** 2)

        step = boostax.make_train_step(
            optax.sgd(0.1),
            loss_fn=loss_fn,
            seq_len_warmup=boostax.seq_len_warmup(10, **WARMUP),
        )
        state = step.init(jnp.zeros((FULL, FULL)))
        batch = lm1b_batch(np.random.default_rng(5))
        with self.assertRaisesRegex(ValueError, "cannot tell the batch's seq"):
            step(state, batch)

    def test_accumulation_with_a_schedule_is_refused(self):
        step = boostax.make_train_step(
            boostax.gradient_accumulation(optax.sgd(0.1), lambda n: 2),
            model=Tiny(),
            loss=cross_entropy,
            seq_len_warmup=boostax.seq_len_warmup(10, **WARMUP),
        )
        state = step.init(variables())
        with self.assertRaisesRegex(ValueError, "outermost stage with a fixed"):
            step(state, batches(1)[0])

    def test_wrong_type_and_at_depth(self):
        with self.assertRaisesRegex(TypeError, "`seq_len_warmup` must be"):
            boostax.make_train_step(
                optax.sgd(0.1), loss_fn=lambda w, b: 0.0, seq_len_warmup=10
            )
        with self.assertRaisesRegex(ValueError, "`at_depth` bypasses"):
            self.make().at_depth(None)


class ConfigTest(absltest.TestCase):
    def test_auto_boost_reads_the_section(self):
        step = boostax.auto_boost(
            "O0",
            {"seq_len_warmup": {"enabled": True, "total_steps": 10, **WARMUP}},
            optimizer=optax.sgd(0.1),
            model=Tiny(),
            loss=cross_entropy,
        )
        self.assertEqual(
            step.seq_len_warmup, boostax.seq_len_warmup(10, **WARMUP)
        )
        off = boostax.auto_boost(
            "O0", optimizer=optax.sgd(0.1), model=Tiny(), loss=cross_entropy
        )
        self.assertIsNone(off.seq_len_warmup)

    def test_background_compile_gives_the_same_bits(self):
        data = batches(7)
        config = {
            "seq_len_warmup": {"enabled": True, "total_steps": 10, **WARMUP}
        }
        states = []
        for background in (True, False):
            step = boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.adam(1e-2),
                model=Tiny(),
                loss=cross_entropy,
                options=boostax.StepOptions(background_compile=background),
            )
            state = step.init(variables())
            for batch in data:
                state, _ = step(state, batch)
            states.append(state)
            self.assertEqual(
                sorted(step.compile_seconds),
                [(None, 8), (None, 12), (None, 16)],
            )
        _utils.assert_trees_equal(states[0].params, states[1].params)

    def test_keys_from_the_config(self):
        config = {"enabled": True, "total_steps": 10, "keys": ["inputs"]}
        step = boostax.auto_boost(
            "O0",
            {"seq_len_warmup": config},
            optimizer=optax.sgd(0.1),
            model=Tiny(),
            loss=cross_entropy,
        )
        self.assertEqual(step.seq_len_warmup.keys, ("inputs",))
        config["keys"] = "inputs"  # one entry, alone
        parsed = boostax.BoostConfig.from_dict({"seq_len_warmup": config})
        self.assertEqual(parsed.seq_len_warmup.keys, ("inputs",))
        with self.assertRaisesRegex(TypeError, "`seq_len_warmup.keys` must"):
            boostax.BoostConfig.from_dict({"seq_len_warmup": {"keys": 1.0}})
        with self.assertRaisesRegex(ValueError, "`seq_len_warmup.keys` must"):
            boostax.BoostConfig.from_dict({"seq_len_warmup": {"keys": []}})

    def test_bad_config(self):
        with self.assertRaisesRegex(ValueError, "`seq_len_warmup.total_steps`"):
            boostax.BoostConfig.from_dict({"seq_len_warmup": {"enabled": True}})
        with self.assertRaisesRegex(ValueError, "`seq_len_warmup.duration`"):
            boostax.BoostConfig.from_dict({"seq_len_warmup": {"duration": 0}})
        with self.assertRaisesRegex(TypeError, "`seq_len_warmup.step_size`"):
            boostax.BoostConfig.from_dict({"seq_len_warmup": {"step_size": ""}})
        with self.assertRaisesRegex(ValueError, "Unknown key 'truncate'"):
            boostax.BoostConfig.from_dict({"seq_len_warmup": {"truncate": 1}})
        with self.assertWarnsRegex(UserWarning, "`seq_len_warmup.enabled`"):
            boostax.BoostConfig.from_dict(
                {"seq_len_warmup": {"min_seq_length": 4}}
            )

    def test_round_trip(self):
        config = boostax.BoostConfig.from_dict(
            {
                "seq_len_warmup": {
                    "enabled": True,
                    "total_steps": 10,
                    "keys": ("inputs", "targets"),
                }
            }
        )
        self.assertEqual(
            config.to_dict()["seq_len_warmup"]["keys"], ["inputs", "targets"]
        )
        again = boostax.BoostConfig.from_dict(config.to_dict())
        self.assertEqual(again, config)


if __name__ == "__main__":
    absltest.main()
