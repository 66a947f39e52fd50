# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Progressive image resizing: Composer's schedule, the resize, the step."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn

import boostax
from boostax._src.methods import progressive_resizing as resizing_lib
from boostax.examples import models
from tests import _utils

FULL = 16
CLASSES = 3
# Widths 8, 8, 8, 12, 12, 12 (updates 0-5), then 16 from update 6 on.
SCHEDULE = dict(delay_fraction=0.0)
WIDTHS = [8, 8, 8, 12, 12, 12]


def composer_width(update, total, initial, finetune, delay, increment, width):
    """Composer's ``ProgressiveResizing.apply`` (its scale and pinned width,
    ``resize_batch`` skipping scales >= 1), in float64 NumPy, with
    boostax's clamp to ``[increment, width]`` and full `width` at scale 1."""
    elapsed = np.float64(update) / np.float64(total)
    if elapsed >= delay:
        ramp = np.float64(1.0) - finetune - delay
        frac = 1.0 if ramp <= 0 else min((elapsed - delay) / ramp, 1.0)
    else:
        frac = 0.0
    scale = initial + (1 - initial) * frac
    if scale >= 1:  # boostax: the finetune at full size (Composer may not)
        return width
    pinned = round(float(width * scale / increment)) * increment
    return int(min(width, max(min(increment, width), pinned)))


def reference_resize(x, height, width):
    """Antialiased linear resampling of NHWC `x` (float64 NumPy): the
    triangle filter widened by the shrink factor, weights normalised."""

    def weights(size_in, size_out):
        scale = size_out / size_in
        kernel_scale = max(1.0 / scale, 1.0)
        sample = (np.arange(size_out) + 0.5) / scale - 0.5
        distance = np.abs(sample[None, :] - np.arange(size_in)[:, None])
        w = np.maximum(0.0, 1.0 - distance / kernel_scale)
        return w / w.sum(axis=0, keepdims=True)  # (in, out)

    x = np.asarray(x, np.float64)
    wh, ww = weights(x.shape[1], height), weights(x.shape[2], width)
    return np.einsum("nhwc,hi,wj->nijc", x, wh, ww)


class CNN(nn.Module):
    """Conv-BatchNorm-relu twice, global average pooling, a head."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        for features in (4, 8):
            x = nn.Conv(features, (3, 3), use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=not train)(x)
            x = nn.relu(x)
        return nn.Dense(CLASSES)(jnp.mean(x, axis=(1, 2)))


class Flattening(nn.Module):
    """A head on the flattened feature map: fixes the image size."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(2, (3, 3))(x))
        return nn.Dense(CLASSES)(x.reshape(len(x), -1))


class PerPixel(nn.Module):
    """Logits at every pixel: its outputs change shape with the image."""

    @nn.compact
    def __call__(self, x):
        return nn.Conv(CLASSES, (3, 3))(x)


def batches(n, batch_size=4):
    rng = np.random.default_rng(0)
    return [
        (
            rng.normal(size=(batch_size, FULL, FULL, 3)).astype(np.float32),
            rng.integers(0, CLASSES, batch_size).astype(np.int32),
        )
        for _ in range(n)
    ]


def variables(model=None):
    model = model or CNN()
    return model.init(jax.random.PRNGKey(0), jnp.zeros((1, FULL, FULL, 3)))


class ScheduleTest(parameterized.TestCase):
    @parameterized.parameters(
        (100, 0.5, 0.2, 0.5, 4, 224, 224),  # Composer's defaults
        (100, 0.5, 0.2, 0.0, 4, 32, 32),
        (57, 0.3, 0.1, 0.2, 8, 64, 48),  # not square
        (10, 0.25, 0.5, 0.5, 4, 32, 32),  # a step at delay_fraction
        (33, 0.1, 0.0, 0.0, 16, 40, 40),  # 16 does not divide 40
    )
    def test_sizes_are_composers(
        self, total, initial, finetune, delay, increment, height, width
    ):
        resizing = boostax.progressive_resizing(
            total,
            initial_scale=initial,
            finetune_fraction=finetune,
            delay_fraction=delay,
            size_increment=increment,
        )
        sizes = resizing.bind(height, width)
        for update in range(total + 5):
            expected = composer_width(
                update, total, initial, finetune, delay, increment, width
            )
            self.assertEqual(sizes.at(update), expected, update)
            self.assertEqual(
                sizes.size(sizes.at(update)),
                (max(1, height * expected // width), expected),
            )
        # Full size for the last `finetune_fraction` at the latest.
        self.assertLessEqual(len(sizes.table), int((1 - finetune) * total) + 1)

    def test_brief_formula_without_delay(self):
        # delay_fraction 0: s0 + (1 - s0) min(1, t / ((1 - f) T)).
        resizing = boostax.progressive_resizing(10, **SCHEDULE)
        self.assertEqual(resizing.widths(FULL).tolist(), WIDTHS)
        for t in range(10):
            scale = 0.5 + 0.5 * min(1.0, t / (0.8 * 10))
            self.assertAlmostEqual(resizing.scale(t), scale)

    def test_counted_in_updates_with_accumulation(self):
        sizes = boostax.progressive_resizing(10, **SCHEDULE).bind(
            FULL, FULL, micro_steps=2
        )
        positions = np.arange(20)
        expected = [WIDTHS[u] if u < 6 else FULL for u in positions // 2]
        np.testing.assert_array_equal(sizes.at_positions(positions), expected)
        self.assertEqual(sizes.end, 12)
        self.assertEqual(sizes.sizes(), [(8, 8), (12, 12), (16, 16)])


class ResizeTest(parameterized.TestCase):
    @parameterized.parameters((8, 8), (12, 12), (6, 10), (16, 16), (3, 5))
    def test_resize_equals_the_float64_reference(self, height, width):
        x = np.random.default_rng(1).normal(size=(2, FULL, FULL, 3))
        resize = jax.jit(lambda x: boostax.resize_images(x, height, width))
        got = resize(jnp.asarray(x, jnp.float32))
        self.assertEqual(got.shape, (2, height, width, 3))
        np.testing.assert_allclose(
            got, reference_resize(x, height, width), rtol=1e-5, atol=1e-5
        )

    def test_crop_is_the_centre(self):
        x = np.random.default_rng(2).normal(size=(2, 10, 12, 3))
        got = jax.jit(lambda x: boostax.resize_images(x, 4, 8, "crop"))(x)
        np.testing.assert_array_equal(got, x[:, 3:7, 2:10].astype(np.float32))

    def test_integer_images_keep_their_dtype(self):
        x = np.arange(2 * 8 * 8, dtype=np.uint8).reshape(2, 8, 8, 1)
        got = jax.jit(lambda x: boostax.resize_images(x, 4, 4))(x)
        self.assertEqual(got.dtype, jnp.uint8)
        expected = np.round(reference_resize(x, 4, 4))
        np.testing.assert_array_equal(got, expected)

    def test_bad_inputs(self):
        x = jnp.zeros((1, 8, 8, 3))
        with self.assertRaisesRegex(ValueError, r"`mode` must be one of"):
            boostax.resize_images(x, 4, 4, "nearest")
        with self.assertRaisesRegex(ValueError, "`height`"):
            boostax.resize_images(x, 9, 4)
        with self.assertRaisesRegex(ValueError, r"\(batch, height, width"):
            boostax.resize_images(jnp.zeros((8, 8, 3)), 4, 4)


def make(optimizer=None, **kwargs):
    return boostax.make_train_step(
        optimizer or boostax.gradient_accumulation(optax.adam(1e-2), 2),
        model=CNN(),
        loss=models.cross_entropy,
        **kwargs,
    )


class StepTest(absltest.TestCase):
    """One step (accumulation over 2 micro-steps), compiled once per size."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = batches(14)
        cls.step = make(
            seq_len_warmup=boostax.progressive_resizing(10, **SCHEDULE)
        )
        state = cls.step.init(variables())
        cls.metrics = []
        for batch in cls.data:
            state, metrics = cls.step(state, batch)
            cls.metrics.append(metrics)
        cls.whole = state
        cls.traces = cls.step.trace_count  # before any test compiles more

    def test_sizes_metrics_and_one_trace_per_size(self):
        widths = [w for w in WIDTHS for _ in range(2)] + [FULL, FULL]
        programs = [self.step.program_at(i) for i in range(14)]
        self.assertEqual(programs, [(None, w) for w in widths])
        self.assertEqual(
            [
                (int(m["image_height"]), int(m["image_width"]))
                for m in self.metrics
            ],
            [(w, w) for w in widths],
        )
        sizes = self.step.program_lengths.sizes()
        self.assertEqual(sizes, [(8, 8), (12, 12), (16, 16)])
        self.assertEqual(self.traces, len(sizes))
        self.assertEqual(
            self.step.program_shares(),
            {(None, 8): 0.3, (None, 12): 0.3, (None, 16): 0.4},
        )

    def test_cost_report_weighs_the_sizes(self):
        plain = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = boostax.measure.cost_report(
                self.step,
                self.step.init(variables()),
                self.data[0],
                baseline=plain,
                baseline_state=plain.init(variables()),
            )
        flops = {k: v.flops for k, v in report.executables.items()}
        self.assertEqual(
            sorted(report.shares), ["width 12", "width 16", "width 8"]
        )
        self.assertLess(flops["width 8"], flops["width 12"])
        self.assertLess(flops["width 12"], flops["width 16"])
        self.assertLess(report.ratios["flops"], 1.0)

    def test_equals_resizing_by_hand(self):
        plain = make()
        state = plain.init(variables())
        for i, (images, labels) in enumerate(self.data):
            width = self.step.program_at(i)[1]
            small = boostax.resize_images(jnp.asarray(images), width, width)
            state, _ = plain(state, (small, labels))
        _utils.assert_trees_equal(state.params, self.whole.params)
        _utils.assert_trees_equal(state.model_state, self.whole.model_state)

    def test_resume_is_bitwise(self):
        traces = self.step.trace_count
        state = self.step.init(variables())
        for batch in self.data[:5]:  # mid-update, at the smallest size
            state, _ = self.step(state, batch)
        saved = jax.device_get(state)
        state = jax.tree.map(jnp.asarray, saved)
        for batch in self.data[5:]:
            state, _ = self.step(state, batch)
        _utils.assert_trees_equal(state.params, self.whole.params)
        _utils.assert_trees_equal(state.opt_state, self.whole.opt_state)
        self.assertEqual(self.step.trace_count, traces)  # nothing new


class DictBatchTest(absltest.TestCase):
    def test_crop_of_the_step_batch_keys_entry(self):
        images, labels = batches(1)[0]
        batch = {"image": images, "label": labels}

        def make_dict(**kwargs):
            return boostax.make_train_step(
                optax.sgd(0.1),
                model=CNN(),
                loss=models.cross_entropy,
                **kwargs,
                options=boostax.StepOptions(batch_keys=("image", "label")),
            )

        resizing = boostax.progressive_resizing(10, mode="crop")
        step = make_dict(seq_len_warmup=resizing)
        state, metrics = step(step.init(variables()), batch)
        self.assertEqual(step.program_at(0), (None, 8))
        self.assertEqual(int(metrics["image_height"]), 8)
        plain = make_dict()
        cropped = {"image": images[:, 4:12, 4:12], "label": labels}
        expected, _ = plain(plain.init(variables()), cropped)
        _utils.assert_trees_equal(state.params, expected.params)


class ComposeTest(absltest.TestCase):
    def test_data_parallel(self):
        data = batches(8, batch_size=8)
        step = make(
            optax.adam(1e-2),
            seq_len_warmup=boostax.progressive_resizing(10, **SCHEDULE),
            data_parallel=boostax.DataParallel(jax.make_mesh((8,), ("data",))),
        )
        state = step.init(variables())
        widths = []
        for batch in data:
            state, metrics = step(state, batch)
            widths.append(int(metrics["image_width"]))
        self.assertEqual(widths, [8, 8, 8, 12, 12, 12, 16, 16])
        self.assertEqual(step.trace_count, 3)
        self.assertTrue(np.isfinite(float(metrics["loss"])))

    def test_o1_less_bn_freezing_and_precision(self):
        data = batches(8)
        config = {
            "grad_freeze": {"param_groups": 2, "total_steps": 10},
            "progressive_resizing": {
                "enabled": True,
                "total_steps": 10,
                "delay_fraction": 0.0,
            },
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = boostax.auto_boost(
                "O1",
                config,
                optimizer=optax.adam(1e-2),
                model=CNN(),
                loss=models.cross_entropy,
                sample_inputs=data[0][0],
                precision="bfloat16",
                loss_scale=boostax.DynamicLossScale(2.0**8),
                options=boostax.StepOptions(freeze_warmup_steps=2),
            )
        self.assertEqual(
            step.config.enabled_algorithms, ("less_bn", "grad_freeze")
        )
        self.assertTrue(step.less_bn_report.found_batch_norm)
        state = step.init(variables(), trained=False)
        for batch in data:
            state, metrics = step(state, batch)
        self.assertIn("loss_scale", metrics)
        self.assertTrue(np.isfinite(float(metrics["loss"])))
        programs = [step.program_at(i) for i in range(8)]
        depths = [step.freezing.depth(i) for i in range(8)]
        self.assertEqual(programs[:2], [("masked", 8), ("masked", 8)])
        self.assertEqual(
            programs[2:],
            list(zip(depths[2:], [8, 12, 12, 12, 16, 16], strict=True)),
        )
        # Each (depth, size) program used was traced once, lazily.
        self.assertEqual(step.trace_count, len(set(programs)))
        self.assertEqual(int(metrics["image_width"]), 16)


class ErrorsTest(parameterized.TestCase):
    @parameterized.parameters(
        (dict(initial_scale=0.0), ValueError, "`initial_scale`"),
        (dict(initial_scale=1.5), ValueError, "`initial_scale`"),
        (dict(finetune_fraction=-0.1), ValueError, "`finetune_fraction`"),
        (dict(delay_fraction=0.9), ValueError, "`delay_fraction` \\+"),
        (dict(size_increment=0), ValueError, "`size_increment`"),
        (dict(size_increment=2.0), TypeError, "`size_increment`"),
        (dict(mode="nearest"), ValueError, r"`mode` must be one of \['resiz"),
        (dict(keys=1.5), TypeError, "`keys`"),
    )
    def test_bad_settings(self, change, error, message):
        with self.assertRaisesRegex(error, message):
            boostax.progressive_resizing(10, **change)

    def test_nothing_to_resize(self):
        with self.assertRaisesRegex(ValueError, "nothing to resize"):
            boostax.progressive_resizing(10, initial_scale=1.0).widths(16)

    def _first_call(self, model, batch=None):
        step = boostax.make_train_step(
            optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
            seq_len_warmup=boostax.progressive_resizing(10),
        )
        state = step.init(variables(model))
        step(state, batch or batches(1)[0])

    def test_a_model_without_global_pooling_is_refused(self):
        with self.assertRaisesRegex(
            ValueError, "fails on the batch's images resized from 16x16 to 8x8"
        ):
            self._first_call(Flattening())

    def test_outputs_that_change_shape_are_refused(self):
        with self.assertRaisesRegex(
            ValueError, "outputs change shape with the image size"
        ):
            self._first_call(PerPixel())

    def test_batches_without_images_are_refused(self):
        with self.assertRaisesRegex(ValueError, "NHWC images"):
            resizing_lib.ProgressiveResizing(10).bind_batch(
                (np.zeros((4, 16)), np.zeros(4))
            )
        with self.assertRaisesRegex(ValueError, "names the entry 'image'"):
            boostax.progressive_resizing(10, keys="image").bind_batch(
                {"x": np.zeros((4, 16, 16, 3))}
            )
        with self.assertRaisesRegex(ValueError, "disagree"):
            boostax.progressive_resizing(10).bind_batch(
                (np.zeros((4, 16, 16, 3)), np.zeros((4, 8, 8, 3)))
            )


class ConfigTest(absltest.TestCase):
    def test_auto_boost_reads_the_section(self):
        section = {"enabled": True, "total_steps": 10, "keys": "image"}
        step = boostax.auto_boost(
            "O0",
            {"progressive_resizing": section},
            optimizer=optax.sgd(0.1),
            model=CNN(),
            loss=models.cross_entropy,
        )
        self.assertEqual(
            step.seq_len_warmup, boostax.progressive_resizing(10, keys="image")
        )

    def test_round_trip(self):
        section = {"enabled": True, "total_steps": 10, "mode": "crop"}
        config = boostax.BoostConfig.from_dict(
            {"progressive_resizing": {**section, "keys": ["image"]}}
        )
        self.assertEqual(config.progressive_resizing.keys, ("image",))
        again = boostax.BoostConfig.from_dict(config.to_dict())
        self.assertEqual(again, config)
        self.assertEqual(
            resizing_lib.from_config(again.progressive_resizing),
            boostax.progressive_resizing(10, mode="crop", keys="image"),
        )

    def test_bad_config(self):
        parse = boostax.BoostConfig.from_dict
        with self.assertRaisesRegex(
            ValueError, "`progressive_resizing.total_steps`"
        ):
            parse({"progressive_resizing": {"enabled": True}})
        with self.assertRaisesRegex(
            ValueError, "`progressive_resizing.initial_scale`"
        ):
            parse({"progressive_resizing": {"initial_scale": 0}})
        with self.assertRaisesRegex(
            ValueError, r"`progressive_resizing.mode` must be one of"
        ):
            parse({"progressive_resizing": {"mode": "nearest"}})
        with self.assertRaisesRegex(
            ValueError, r"`progressive_resizing.delay_fraction` \+"
        ):
            parse({"progressive_resizing": {"finetune_fraction": 0.6}})
        with self.assertWarnsRegex(
            UserWarning, "`progressive_resizing.enabled` is False"
        ):
            parse({"progressive_resizing": {"initial_scale": 0.25}})
        both = {
            name: {"enabled": True, "total_steps": 10}
            for name in ("seq_len_warmup", "progressive_resizing")
        }
        with self.assertRaisesRegex(ValueError, "both True"):
            boostax.auto_boost(
                "O0",
                both,
                optimizer=optax.sgd(0.1),
                model=CNN(),
                loss=models.cross_entropy,
            )


if __name__ == "__main__":
    absltest.main()
