# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for the precision policy (`boostax._src.precision`) and the
dtype-aware bytes of a step (`boostax._src.measure.step_bytes`)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import nnx

import boostax
from boostax._src import precision as precision_lib
from boostax.examples import models
from tests import _utils

BF16 = jnp.dtype(jnp.bfloat16)
F16 = jnp.dtype(jnp.float16)
F32 = jnp.dtype(jnp.float32)


def _resnet():
    return models.ResNet(stage_sizes=(1, 1), widths=(8, 16))


def _resnet_problem(batch_size=32, steps=1, seed=0):
    digits = _utils.digits()
    model = _resnet()
    variables = jax.jit(model.init, static_argnames="train")(
        jax.random.PRNGKey(0), digits.x_train[:1], train=False
    )
    rng = np.random.default_rng(seed)
    batches = [
        (digits.x_train[i], digits.y_train[i])
        for i in (
            rng.choice(len(digits.x_train), batch_size, replace=False)
            for _ in range(steps)
        )
    ]
    return model, variables, batches


def _resnet_step(precision, **kwargs):
    return boostax.make_train_step(
        optax.adam(3e-3),
        model=_resnet(),
        loss=models.cross_entropy,
        precision=precision,
        **_utils.with_step_options(kwargs),
    )


def _dtypes(tree):
    return {x.dtype for x in jax.tree.leaves(tree) if hasattr(x, "dtype")}


class PolicyTest(parameterized.TestCase):
    def test_amp_levels(self):
        o2 = boostax.precision_policy("O2")
        self.assertEqual(o2.compute_dtype, F16)
        self.assertEqual(o2.loss_scale, "dynamic")
        self.assertFalse(o2.cast_params)
        o3 = boostax.precision_policy("O3", "bfloat16")
        self.assertEqual(o3.compute_dtype, BF16)
        self.assertIsNone(o3.loss_scale)  # bfloat16 has float32's range
        self.assertTrue(o3.cast_params)
        self.assertTrue(boostax.precision_policy("O0").is_float32)
        self.assertIsNone(precision_lib.get_policy("O0"))
        self.assertIsNone(precision_lib.get_policy(None))
        self.assertEqual(
            precision_lib.get_policy("bfloat16").compute_dtype, BF16
        )

    def test_errors(self):
        with self.assertRaisesRegex(NotImplementedError, "'O1'.*'O2'"):
            boostax.precision_policy("O1")
        with self.assertRaisesRegex(NotImplementedError, "'O1'"):
            _resnet_step("O1")
        with self.assertRaisesRegex(ValueError, "`level` must be one of"):
            boostax.precision_policy("O4")
        with self.assertRaisesRegex(ValueError, "`dtype` must be one of"):
            boostax.precision_policy("O2", "float64")
        with self.assertRaisesRegex(ValueError, "'O0' computes in float32"):
            boostax.precision_policy("O0", "bfloat16")
        # Not NumPy's "data type 'garbage' not understood".
        for level in ("O0", "O2"):
            with self.assertRaisesRegex(
                ValueError, r"`dtype` must be .*'float.*got str \('garbage'\)"
            ):
                boostax.precision_policy(level, "garbage")
        with self.assertRaisesRegex(ValueError, "`compute_dtype` must be"):
            boostax.PrecisionPolicy(compute_dtype="int8")
        with self.assertRaisesRegex(ValueError, "`reduce_dtype` must be"):
            boostax.PrecisionPolicy("bfloat16", reduce_dtype="float16")
        with self.assertRaisesRegex(TypeError, "`float32_modules`"):
            boostax.PrecisionPolicy("bfloat16", float32_modules="Dense")
        with self.assertRaisesRegex(ValueError, "`loss_scale` must be"):
            boostax.PrecisionPolicy("float16", loss_scale="static")
        with self.assertRaisesRegex(ValueError, "`precision` must be None"):
            _resnet_step("half")
        # A half reduction dtype needs a mean over a mesh.
        with self.assertRaisesRegex(ValueError, "runs on one device"):
            _resnet_step(
                boostax.PrecisionPolicy("bfloat16", reduce_dtype="bfloat16")
            )

    def test_o0_is_the_float32_step(self):
        model, variables, (batch,) = _resnet_problem()
        plain = _resnet_step(None)
        o0 = _resnet_step("O0")
        self.assertIsNone(o0.precision)
        state = plain.init(variables)
        self.assertEqual(
            str(plain.trace(state, batch).jaxpr),
            str(o0.trace(state, batch).jaxpr),
        )

    def test_float16_brings_a_dynamic_loss_scale_unless_given(self):
        self.assertIsInstance(
            _resnet_step("O2").loss_scale, boostax.DynamicLossScale
        )
        self.assertEqual(
            _resnet_step("O2").loss_scale.loss_scale_value, 2.0**15
        )
        self.assertIsNone(_resnet_step("bfloat16").loss_scale)
        # A float32 policy asking for a loss scale gets it (not dropped).
        float32 = boostax.PrecisionPolicy("float32", loss_scale="dynamic")
        self.assertIsInstance(
            _resnet_step(float32).loss_scale, boostax.DynamicLossScale
        )
        static = boostax.StaticLossScale(128.0)
        self.assertIs(_resnet_step("O2", loss_scale=static).loss_scale, static)


def _mlp_step(precision, **kwargs):
    return boostax.make_train_step(
        optax.adam(1e-3),
        loss_fn=_mlp_loss,
        precision=precision,
        **_utils.with_step_options(kwargs),
    )


class UnderflowTest(parameterized.TestCase):
    """A precision that can underflow brings or demands its loss scale."""

    def test_a_float16_policy_brings_a_dynamic_loss_scale(self):
        for policy in (
            boostax.PrecisionPolicy("float16"),
            boostax.PrecisionPolicy("float16", cast_params=True),
            boostax.precision_policy("O3"),
        ):
            self.assertEqual(policy.loss_scale, "dynamic")
            self.assertIsInstance(
                _mlp_step(policy).loss_scale, boostax.DynamicLossScale
            )
        self.assertIsNone(boostax.PrecisionPolicy("bfloat16").loss_scale)
        self.assertTrue(boostax.PrecisionPolicy("float32").is_float32)

    def test_float16_without_a_loss_scale_is_refused(self):
        bfloat16 = boostax.precision_policy("O2", "bfloat16")
        for policy in (
            boostax.PrecisionPolicy("float16", loss_scale=None),
            boostax.precision_policy("O2", loss_scale=None),
            # A bfloat16 policy (no loss scale) turned float16.
            dataclasses.replace(bfloat16, compute_dtype="float16"),
        ):
            with self.assertRaisesRegex(
                ValueError,
                "float16.*`loss_scale=boostax.DynamicLossScale.*"
                "`loss_scale='off'`",
            ):
                _mlp_step(policy)
            with self.assertRaisesRegex(ValueError, "float16.*`loss_scale="):
                boostax.auto_boost(
                    "O0",
                    optimizer=optax.sgd(0.1),
                    loss_fn=_mlp_loss,
                    precision=policy,
                )
            # The step's own loss scale is enough.
            static = boostax.StaticLossScale(128.0)
            self.assertIs(
                _mlp_step(policy, loss_scale=static).loss_scale, static
            )
        # Opting out is said in so many words.
        unscaled = boostax.PrecisionPolicy("float16", loss_scale="off")
        self.assertIsNone(_mlp_step(unscaled).loss_scale)
        self.assertIsNone(_mlp_step(bfloat16).loss_scale)

    def test_float16_policy_trains_a_small_loss(self):
        # A loss scaled by 1e-8: its float16 gradients underflow to zero
        # without a loss scale, and Adam moves no parameter whose gradient
        # is zero (float32 moves every one).
        params, batch = _mlp_problem()

        def tiny_loss(p, b):
            return 1e-8 * _mlp_loss(p, b)

        moved = {}
        for name, policy in {
            "float16": boostax.PrecisionPolicy("float16"),
            "off": boostax.PrecisionPolicy("float16", loss_scale="off"),
        }.items():
            ts = boostax.make_train_step(
                optax.adam(1e-3), loss_fn=tiny_loss, precision=policy
            )
            state, _ = ts(ts.init(params), batch)
            moved[name] = np.mean(
                np.asarray(boostax.flatten_params(state.params)[0])
                != np.asarray(boostax.flatten_params(params)[0])
            )
        self.assertGreater(moved["float16"], 0.99)
        self.assertLess(moved["off"], 0.01)  # what an unscaled step loses


class ComputeDtypeTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("linen_bf16", "linen", "bfloat16", BF16),
        ("linen_o2", "linen", "O2", F16),
        ("linen_o3", "linen", "O3", F16),
        ("nnx_bf16", "nnx", "bfloat16", BF16),
    )
    def test_every_conv_and_matmul_in_the_compute_dtype(
        self, kind, precision, dtype
    ):
        _, variables, (batch,) = _resnet_problem()
        if kind == "nnx":
            model = models.NNXResNet(
                stage_sizes=(1, 1), widths=(8, 16), rngs=nnx.Rngs(0)
            )
            variables = model
        else:
            model = _resnet()
        ts = boostax.make_train_step(
            optax.adam(1e-3),
            model=model,
            loss=models.cross_entropy,
            precision=precision,
        )
        state = ts.init(variables)
        found = boostax.measure.step_bytes(ts, state, batch).compute_dtypes
        self.assertEqual(set(found), {"conv_general_dilated", "dot_general"})
        for counts in found.values():
            self.assertEqual(set(counts), {dtype.name})
        # Masters, optimizer state and BatchNorm statistics stay float32.
        state, metrics = ts(state, batch)
        self.assertEqual(_dtypes(state.params), {F32})
        self.assertEqual(
            _dtypes(state.opt_state) - {jnp.dtype(jnp.int32)}, {F32}
        )
        self.assertEqual(
            _dtypes(state.model_state) - {jnp.dtype(jnp.uint32)}, {F32}
        )
        self.assertEqual(metrics["loss"].dtype, F32)

    def test_float32_modules(self):
        _, variables, (batch,) = _resnet_problem()
        policy = boostax.PrecisionPolicy("bfloat16", float32_modules=("Dense",))
        ts = _resnet_step(policy)
        found = boostax.measure.step_bytes(ts, ts.init(variables), batch)
        # The classifier's forward and backward matmuls in float32, the
        # convolutions in bfloat16.
        self.assertEqual(found.compute_dtypes["dot_general"], {"float32": 3})
        self.assertEqual(
            set(found.compute_dtypes["conv_general_dilated"]), {"bfloat16"}
        )

    def test_the_fn_head_normalises_in_float32(self):
        digits = _utils.digits()
        ts = boostax.auto_boost(
            "O1",
            {"grad_freeze": {"param_groups": 2, "total_steps": 10}},
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=_resnet(),
            loss=models.cross_entropy,
            sample_inputs=digits.x_train[:1],
            precision="bfloat16",
        )
        _, variables, (batch,) = _resnet_problem()
        state = ts.init(variables)
        found = boostax.measure.step_bytes(ts, state, batch).compute_dtypes
        # LessBN's FN head (normalised features and kernel) computes in
        # float32; every convolution in bfloat16.
        self.assertEqual(set(found["dot_general"]), {"float32"})
        self.assertEqual(set(found["conv_general_dilated"]), {"bfloat16"})
        for _ in range(3):
            state, _ = ts(state, batch)
        self.assertEqual(_dtypes(state.params), {F32})


class SavedBytesTest(parameterized.TestCase):
    def _saved(self, precision, model=None, variables=None):
        _, resnet_variables, (batch,) = _resnet_problem()
        ts = boostax.make_train_step(
            optax.adam(1e-3),
            model=model or _resnet(),
            loss=models.cross_entropy,
            precision=precision,
        )
        state = ts.init(resnet_variables if variables is None else variables)
        return boostax.measure.step_bytes(
            ts, state, batch
        ).saved_activation_bytes

    def test_bfloat16_saves_at_most_055x_float32s_activations(self):
        float32 = self._saved(None)
        bfloat16 = self._saved("bfloat16")
        self.assertLessEqual(bfloat16, 0.55 * float32)
        # Saving the float32 arithmetic of the BatchNorms and the loss
        # instead of recomputing it keeps far more.
        saved = self._saved(
            boostax.PrecisionPolicy("bfloat16", recompute_float32=False)
        )
        self.assertGreater(saved, 0.7 * float32)

    def test_nnx_model(self):
        def model():
            return models.NNXResNet(
                stage_sizes=(1, 1), widths=(8, 16), rngs=nnx.Rngs(0)
            )

        float32 = self._saved(None, model(), model())
        self.assertLessEqual(
            self._saved("bfloat16", model(), model()), 0.55 * float32
        )

    def test_cost_report_column(self):
        _, variables, (batch,) = _resnet_problem()
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.adam(1e-3),
            model=_resnet(),
            loss=models.cross_entropy,
            precision="bfloat16",
        )
        report = boostax.measure.cost_report(ts, ts.init(variables), batch)
        self.assertLessEqual(report.ratios["saved_activation_bytes"], 0.55)
        self.assertEqual(report.ratios["lowered_collective_bytes"], None)
        self.assertEqual(set(report.step_bytes), {"step", "plain"})
        self.assertIn("bfloat16", report.step_bytes["step"].saved_by_dtype)
        self.assertNotIn("bfloat16", report.step_bytes["plain"].saved_by_dtype)
        text = str(report)
        self.assertIn("activations saved for the backward pass", text)
        self.assertIn("x plain): bfloat16", text)
        self.assertIn("step_bytes", report.as_dict())

    def test_saved_activations_leave_out_the_arguments(self):
        saved = boostax.measure.saved_activations(
            lambda w, x: jnp.tanh(x @ w).sum(),
            jnp.ones((4, 3)),
            jnp.ones((2, 4)),
        )
        # tanh's output and its derivative 1 - tanh**2 (2 x 3 float32
        # each); w and x are arguments.
        self.assertEqual(
            saved, boostax.measure.SavedActivations(48, {"float32": 48}, 2)
        )


class TrainingTest(parameterized.TestCase):
    STEPS = 150
    # The mean of the last 20 training losses of a half-precision run,
    # relative to float32's on the same batches (measured: bfloat16 +2.2%,
    # float16 O2 +0.4%, O3 +0.3%).
    TOLERANCE = 0.05

    def test_half_precision_curves_follow_float32(self):
        _, variables, batches = _resnet_problem(64, self.STEPS)
        tails = {}
        for precision in (None, "bfloat16", "O2", "O3"):
            ts = _resnet_step(precision)
            state, losses = ts.init(variables), []
            for batch in batches:
                state, metrics = ts(state, batch)
                losses.append(float(metrics["loss"]))
                self.assertTrue(
                    all(
                        np.isfinite(x).all()
                        for x in jax.tree.leaves(state.params)
                    )
                )
            tails[precision] = np.mean(losses[-20:])
        self.assertLess(tails[None], 0.5 * np.mean(losses[:5]))
        for precision in ("bfloat16", "O2", "O3"):
            self.assertLess(
                abs(tails[precision] / tails[None] - 1),
                self.TOLERANCE,
                precision,
            )

    def test_float16_overflows_are_skipped_and_counted(self):
        _, variables, batches = _resnet_problem(32, 12)
        # MindSpore's start, 2**24, overflows float16 until it has backed off.
        ts = _resnet_step(
            "O2",
            loss_scale=boostax.DynamicLossScale(2.0**24, scale_window=1000),
        )
        state = ts.init(variables)
        skipped = 0
        for batch in batches:
            before = state
            state, metrics = ts(state, batch)
            if bool(metrics["overflow"]):
                skipped += 1
                _utils.assert_trees_equal(state.params, before.params)
                _utils.assert_trees_equal(state.opt_state, before.opt_state)
                _utils.assert_trees_equal(state.model_state, before.model_state)
            for leaf in jax.tree.leaves(state.params):
                self.assertTrue(np.isfinite(leaf).all())
        self.assertGreater(skipped, 0)
        self.assertLess(skipped, len(batches))
        self.assertEqual(
            float(state.algorithms.loss_scale.loss_scale), 2.0 ** (24 - skipped)
        )


def _policy_fp16_loss(params, batch):
    """The loss scale tests' float16 underflow case, in the policy's dtype:
    no manual casts (the policy casts params and, with ``cast_batch``, the
    inputs to float16)."""
    x, y = batch
    dtype = x.dtype
    x = boostax.enhanced_amp(x, 0, 1)
    h = jax.nn.relu(x @ params["early"]["kernel"] + params["early"]["bias"])
    h = boostax.enhanced_amp(h, 1, 2)
    out = h @ params["late"]["kernel"] + params["late"]["bias"]
    out = boostax.enhanced_amp(out, 2, 3)
    assert dtype == F16, dtype
    return jnp.mean((out.astype(jnp.float32) - y) ** 2)


class GroupLossScaleUnderPolicyTest(parameterized.TestCase):
    def test_group_scales_train_the_early_layer(self):
        params, batch = _utils.fp16_underflow_problem()
        results = {}
        for name, rule in {
            "global": None,  # the policy's dynamic scale, from 2**15
            "group": _utils.fp16_underflow_groups(),
        }.items():
            ts = boostax.make_train_step(
                optax.adam(1e-6),
                loss_fn=_policy_fp16_loss,
                precision="O2",
                loss_scale=rule,
                # the inputs, not the targets
                options=boostax.StepOptions(cast_batch=(True, False)),
            )
            state, overflows = ts.init(params), 0
            for _ in range(40):
                state, metrics = ts(state, batch)
                overflows += int(metrics["overflow"])
            results[name] = (state.params, overflows)
        global_params, global_overflows = results["global"]
        self.assertGreater(global_overflows, 5)
        _utils.assert_trees_equal(
            global_params["early"]["kernel"], params["early"]["kernel"]
        )
        group_params, group_overflows = results["group"]
        self.assertEqual(group_overflows, 0)
        self.assertGreater(
            np.abs(
                group_params["early"]["kernel"] - params["early"]["kernel"]
            ).min(),
            0.0,
        )


def _mlp_loss(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return jnp.mean((h @ params["out"]["w"] - y) ** 2)


def _mlp_problem(batch_size=24):
    rng = np.random.default_rng(0)
    params = {
        "hidden": {
            "w": jnp.asarray(rng.normal(size=(16, 64)), jnp.float32),
            "b": jnp.zeros((1, 64), jnp.float32),
        },
        "out": {"w": jnp.asarray(rng.normal(size=(64, 4)), jnp.float32)},
    }
    batch = (
        jnp.asarray(rng.normal(size=(batch_size, 16)), jnp.float32),
        jnp.asarray(rng.normal(size=(batch_size, 4)), jnp.float32),
    )
    return params, batch


class PlainLossFunctionTest(parameterized.TestCase):
    """A plain loss_fn under a policy: params cast, targets never."""

    @parameterized.named_parameters(
        ("batch_as_given", None, F32),
        ("inputs_cast", (True, False), F16),
        ("inputs_cast_by_a_function", lambda batch: (True, False), F16),
    )
    def test_large_targets_train_under_float16(self, cast_batch, x_dtype):
        params, (x, y) = _mlp_problem()
        batch = (x, 1e5 + y)  # inf in float16

        def loss_fn(p, b):
            inputs, targets = b
            assert targets.dtype == F32, targets.dtype  # never cast
            assert inputs.dtype == x_dtype, inputs.dtype
            assert p["out"]["w"].dtype == F16, p["out"]["w"].dtype
            h = jnp.tanh(inputs @ p["hidden"]["w"] + p["hidden"]["b"])
            error = h @ p["out"]["w"] - (targets - 1e5)
            return 1e-3 * jnp.mean(error**2)  # in float16's range at 2**15

        ts = boostax.make_train_step(
            optax.adam(1e-2),
            loss_fn=loss_fn,
            precision="O2",
            options=boostax.StepOptions(cast_batch=cast_batch),
        )
        state = ts.init(params)
        losses = []
        for _ in range(5):
            state, metrics = ts(state, batch)
            self.assertFalse(bool(metrics["overflow"]))
            losses.append(float(metrics["loss"]))
        self.assertLess(losses[-1], losses[0])
        self.assertEqual(_dtypes(state.params), {F32})

    def test_cast_batch_errors(self):
        with self.assertRaisesRegex(TypeError, "`cast_batch` must be None"):
            _mlp_step("O2", cast_batch=(1, 0))
        with self.assertRaisesRegex(ValueError, "`cast_batch=` goes with"):
            _resnet_step("O2", cast_batch=(True, False))
        # Never accepted and ignored: a float32 step casts nothing.
        for precision in (None, "O0"):
            with self.assertRaisesRegex(ValueError, "`cast_batch`.*float32"):
                _mlp_step(precision, cast_batch=(True, False))
        _, batch = _mlp_problem()
        with self.assertRaisesRegex(
            ValueError, "`cast_batch` must be a prefix"
        ):
            precision_lib.cast_batch_leaves(batch, (True, False, True), F16)
        with self.assertRaisesRegex(TypeError, "`cast_batch` must be None"):
            precision_lib.cast_batch_leaves(batch, lambda b: None, F16)


def _cast(tree, dtype):
    return precision_lib.cast_floating(tree, dtype)


class StateDtypeTest(parameterized.TestCase):
    """The state check compares the dtype and shape of every leaf."""

    def test_a_float16_state_is_refused_by_a_float32_step(self):
        params, batch = _mlp_problem()
        ts = boostax.make_train_step(
            optax.sgd(0.1, momentum=0.9), loss_fn=_mlp_loss
        )
        state = ts.init(params)
        ts.check_state(state)  # its own, restored: accepted
        half = state.replace(params=_cast(state.params, F16))
        with self.assertRaisesRegex(
            ValueError,
            r"`state.params\['hidden'\]\['b'\]` .* expected float32\[1,64\], "
            r"got float16\[1,64\]",
        ):
            ts(half, batch)
        # Every slot: the optimizer's momentum too.
        with self.assertRaisesRegex(
            ValueError, r"`state.opt_state.* expected float32.*got bfloat16"
        ):
            ts.check_state(
                state.replace(opt_state=_cast(state.opt_state, BF16))
            )
        # Another model of the same structure: other shapes.
        wider, _ = _mlp_problem()
        wider["hidden"]["b"] = jnp.zeros((1, 65), jnp.float32)
        with self.assertRaisesRegex(
            ValueError,
            r"`state.params\['hidden'\]\['b'\]` .*\[1,64\].*\[1,65\]",
        ):
            ts.check_state(state.replace(params=wider))

    def test_a_step_without_init_keeps_the_first_states_dtypes(self):
        params, _ = _mlp_problem()
        state = _mlp_step(None).init(params)
        fresh = _mlp_step(None)  # restoring: no `init` on this step
        fresh.check_state(state)
        fresh.check_state(state)
        with self.assertRaisesRegex(ValueError, "expected float32.*float16"):
            fresh.check_state(state.replace(params=_cast(state.params, F16)))

    def test_a_policy_state_keeps_float32_masters(self):
        params, _ = _mlp_problem()
        ts = _mlp_step("O2")
        state = ts.init(params)
        half = state.replace(params=_cast(state.params, F16))
        with self.assertRaisesRegex(ValueError, "expected float32.*float16"):
            ts.check_state(half)


class CompositionTest(parameterized.TestCase):
    def test_gradients_reduced_in_bfloat16_send_half_the_bytes(self):
        params, batch = _mlp_problem()
        mesh = jax.make_mesh((8,), ("data",))
        sent, states = {}, {}
        for reduce_dtype in ("float32", "bfloat16"):
            ts = boostax.make_train_step(
                optax.sgd(0.1),
                loss_fn=_mlp_loss,
                data_parallel=boostax.DataParallel(mesh),
                precision=boostax.PrecisionPolicy(
                    "bfloat16", reduce_dtype=reduce_dtype
                ),
            )
            state = ts.init(params)
            sent[reduce_dtype] = boostax.measure.step_bytes(
                ts, state, batch
            ).collective_bytes
            state, _ = ts(state, batch)
            states[reduce_dtype] = state
        self.assertGreater(sent["float32"], 0)
        self.assertLessEqual(sent["bfloat16"], 0.55 * sent["float32"])
        # Gradients rounded to bfloat16 (8 significant bits) before the
        # mean: each update within 2**-7 of float32's largest.
        self.assertEqual(_dtypes(states["bfloat16"].params), {F32})
        for name in ("hidden", "out"):
            update = {
                k: np.asarray(states[k].params[name]["w"] - params[name]["w"])
                for k in states
            }
            np.testing.assert_allclose(
                update["bfloat16"],
                update["float32"],
                rtol=0,
                atol=2**-7 * np.abs(update["float32"]).max(),
            )

    def test_adasum_refuses_a_half_reduction(self):
        mesh = jax.make_mesh((8,), ("data",))
        with self.assertRaisesRegex(
            ValueError, "reduces gradients in bfloat16.*'adasum'"
        ):
            boostax.make_train_step(
                optax.sgd(0.1),
                loss_fn=_mlp_loss,
                data_parallel=boostax.DataParallel(mesh, reduction="adasum"),
                precision=boostax.PrecisionPolicy(
                    "bfloat16", reduce_dtype="bfloat16"
                ),
            )

    def test_adasum_with_a_float32_reduction_trains(self):
        params, batch = _mlp_problem()
        ts = boostax.make_train_step(
            optax.sgd(0.1),
            loss_fn=_mlp_loss,
            data_parallel=boostax.DataParallel(
                jax.make_mesh((8,), ("data",)), reduction="adasum"
            ),
            precision="bfloat16",
        )
        state = ts.init(params)
        state, metrics = ts(state, batch)
        self.assertEqual(_dtypes(state.params), {F32})
        self.assertTrue(np.isfinite(float(metrics["adasum_cosine"])))

    def test_accumulation_sums_in_float32(self):
        params, batch = _mlp_problem()
        ts = boostax.make_train_step(
            boostax.gradient_accumulation(optax.sgd(0.1), 2),
            loss_fn=_mlp_loss,
            precision="O2",
        )
        state, _ = ts(ts.init(params), batch)
        accumulation = state.opt_state
        self.assertIsInstance(accumulation, boostax.GradientAccumulationState)
        self.assertEqual(_dtypes(accumulation.acc_grads), {F32})
        _utils.assert_trees_equal(state.params, params)  # a micro-step

    def test_dim_reduce_projects_in_float32(self):
        params, batch = _mlp_problem()
        flat = np.asarray(boostax.flatten_params(params)[0])
        rng = np.random.default_rng(1)
        trajectory = flat + 0.1 * rng.normal(size=(6, flat.size))
        ts = boostax.make_train_step(
            boostax.dim_reduce(boostax.pca_components(trajectory, 3)),
            loss_fn=_mlp_loss,
            precision="bfloat16",
        )
        state = ts.init(params)
        for _ in range(3):
            state, metrics = ts(state, batch)
        self.assertEqual(_dtypes(state.params), {F32})
        floating = {
            d
            for d in _dtypes(state.opt_state)
            if jnp.issubdtype(d, jnp.floating)
        }
        self.assertEqual(floating, {F32})  # the PCA matrix, BFGS's H, ...
        self.assertGreater(int(metrics["dim_reduce_trials"]), 0)


class TransformerTest(parameterized.TestCase):
    def test_reference_attention_is_flaxs(self):
        rng = np.random.default_rng(0)
        q, k, v = (
            jnp.asarray(rng.normal(size=(2, 8, 2, 4)), jnp.float32)
            for _ in range(3)
        )
        mask = nnx.make_causal_mask(jnp.zeros((2, 8)))
        np.testing.assert_allclose(
            models.reference_attention(q, k, v, mask=mask),
            nnx.dot_product_attention(q, k, v, mask=mask),
            rtol=1e-5,
            atol=1e-6,
        )

    @parameterized.named_parameters(
        ("bfloat16", "bfloat16", BF16), ("float16", "O2", F16)
    )
    def test_decoder_in_half_precision(self, precision, dtype):
        def model():
            return models.NNXTransformer(
                context=16,
                d_model=32,
                num_heads=2,
                num_blocks=1,
                attention_fn=models.reference_attention,
                rngs=nnx.Rngs(0),
            )

        tokens = np.random.default_rng(0).integers(0, 256, (8, 17))
        batch = (tokens[:, :-1], tokens[:, 1:])
        saved = {}
        for policy in (None, precision):
            ts = boostax.make_train_step(
                optax.adamw(1e-3),
                model=model(),
                loss=models.cross_entropy,
                precision=policy,
            )
            state = ts.init(model())
            found = boostax.measure.step_bytes(ts, state, batch)
            saved[policy] = found.saved_activation_bytes
        # Every matmul (embeddings are gathers) in the compute dtype, the
        # softmax of the attention and of the loss in float32.
        self.assertEqual(set(found.compute_dtypes["dot_general"]), {dtype.name})
        self.assertLessEqual(saved[precision], 0.55 * saved[None])
        for _ in range(3):
            state, metrics = ts(state, batch)
        self.assertEqual(_dtypes(state.params), {F32})
        self.assertTrue(np.isfinite(float(metrics["loss"])))


if __name__ == "__main__":
    absltest.main()
