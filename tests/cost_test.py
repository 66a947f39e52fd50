# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax.measure.cost_report`, the cost reader and the timer."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import nnx

import boostax
from boostax._src.measure import step_bytes as step_bytes_lib
from boostax.examples import models
from tests import _utils


def _resnet_o1(groups=3, total_steps=50, warmup=0):
    digits = _utils.digits()
    model = models.ResNet(stage_sizes=(1, 1), widths=(8, 16))
    ts = boostax.auto_boost(
        "O1",
        {"grad_freeze": {"param_groups": groups, "total_steps": total_steps}},
        optimizer=optax.sgd(0.05, momentum=0.9),
        model=model,
        loss=models.cross_entropy,
        sample_inputs=digits.x_train[:1],
        options=boostax.StepOptions(freeze_warmup_steps=warmup),
    )
    init = jax.jit(model.init, static_argnames="train")  # one compile
    state = ts.init(
        init(jax.random.PRNGKey(0), digits.x_train[:1], train=False)
    )
    return ts, state, (digits.x_train[:16], digits.y_train[:16])


class CollectiveBytesTest(absltest.TestCase):
    def test_rules(self):
        hlo = "\n".join(
            [
                "%a = f32[100]{0} all-reduce(f32[100]{0} %x), "
                "replica_groups={{0,1,2,3}}, to_apply=%add",
                "%b = bf16[8,4]{1,0} all-gather(bf16[2,4]{1,0} %y), "
                "replica_groups=[2,4]<=[8], dimensions={0}",
                "%c = f32[10]{0} collective-permute(f32[10]{0} %z), "
                "source_target_pairs={{0,1}}",
                "%d = (f32[3]{0}, /*index=1*/f32[5]{0}) all-reduce-start("
                "f32[3]{0} %p, f32[5]{0} %q), replica_groups={{0,1}}",
                "%e = f32[6]{0} reduce-scatter(f32[24]{0} %r), "
                "replica_groups={{0,1,2,3}}, dimensions={0}",
                "%f = f32[4]{0} add(f32[4]{0} %s, f32[4]{0} %t)",
                # The SPMD partitioner's spelling: over axis 'b' of 4.
                "%g = f32[50]{0} all-reduce(f32[50]{0} %u), channel_id=3, "
                "replica_groups=mesh['a'=2,'b'=4] {'b'}, "
                "use_global_device_ids=true, to_apply=%add",
            ]
        )
        sent, counts = boostax.measure.collective_bytes(hlo)
        expected = (
            2 * 400 * 3 / 4  # all-reduce, ring, 4 devices
            + 64 * 3 / 4  # all-gather of 64 bytes over groups of 4
            + 40  # collective-permute
            + 2 * 32 * 1 / 2  # async all-reduce of a tuple, 2 devices
            + 24 * 3  # reduce-scatter
            + 2 * 200 * 3 / 4  # all-reduce over a mesh axis of 4
        )
        self.assertAlmostEqual(sent, expected)
        self.assertEqual(
            counts,
            {
                "all-reduce": 3,
                "all-gather": 1,
                "collective-permute": 1,
                "reduce-scatter": 1,
            },
        )

    def test_replica_groups(self):
        groups = step_bytes_lib.replica_groups
        self.assertEqual(
            groups("x, replica_groups={{0,2},{1,3}}, y"), [[0, 2], [1, 3]]
        )
        self.assertEqual(
            groups("replica_groups=[2,4]<=[8]"),
            [[0, 1, 2, 3], [4, 5, 6, 7]],
        )
        self.assertEqual(
            groups("replica_groups=[4,2]<=[2,4]T(1,0)"),
            [[0, 4], [1, 5], [2, 6], [3, 7]],
        )
        self.assertEqual(groups("replica_groups={}, to_apply=%add"), [])
        # XLA's SPMD partitioner: over axes of a mesh, ids in its order.
        self.assertEqual(
            groups("replica_groups=mesh['data'=2,'model'=4] {'data'}"),
            [[0, 4], [1, 5], [2, 6], [3, 7]],
        )
        self.assertEqual(
            groups("replica_groups=mesh['data'=2,'model'=4] {'model'}"),
            [[0, 1, 2, 3], [4, 5, 6, 7]],
        )

    def test_read_step_bytes_of_a_function_step(self):
        # The reader takes any traced step and the function its backward
        # pass differentiates; no TrainStep is needed.
        def loss(w, x):
            return jnp.tanh(x @ w).sum()

        def step(w, x):
            return w - 0.1 * jax.grad(loss)(w, x)

        w, x = jnp.ones((4, 3)), jnp.ones((2, 4), jnp.bfloat16)
        found = step_bytes_lib.read_step_bytes(
            jax.jit(step).trace(w, x),
            lambda w, x: (lambda w: loss(w, x), w),
            w,
            x,
        )
        # tanh(x @ w) and its derivative, 2 x 3 float32 each, and `x` (not
        # an argument of the differentiated function: a residual).
        self.assertEqual(found.saved_by_dtype, {"bfloat16": 16, "float32": 48})
        self.assertEqual(found.saved_activation_bytes, 64)
        self.assertEqual(found.collective_bytes, 0)
        # The first operand dtypes of its two matrix products.
        self.assertEqual(
            found.compute_dtypes, {"dot_general": {"bfloat16": 1, "float32": 1}}
        )


# An optimized HLO module (abridged) with each rule of `kernel_counts`.
KERNELS_HLO = """HloModule jit_step, is_scheduled=true

%fused_computation (p.0: f32[4]) -> f32[4] {
  %p.0 = f32[4]{0} parameter(0)
  %sine = f32[4]{0} sine(f32[4]{0} %p.0)
  ROOT %multiply = f32[4]{0} multiply(f32[4]{0} %sine, f32[4]{0} %sine)
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %a, f32[] %b)
}

%small (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %copy.9 = f32[4]{0} copy(f32[4]{0} %p)
}

%large (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %f.1 = f32[4]{0} fusion(f32[4]{0} %p), kind=kLoop, calls=%fused_computation
  ROOT %f.2 = f32[4]{0} fusion(%f.1), kind=kLoop, calls=%fused_computation
}

%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[4]{0}) %t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(s32[] %i, s32[] %n), direction=LT
}

%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %t), index=1
  %gemm = (f32[4]{0}, s8[0]{0}) custom-call(%x), custom_call_target="gemm"
  ROOT %r = (s32[], f32[4]{0}) tuple(s32[] %i, f32[4]{0} %x)
}

%outlined (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %d = f32[4]{0} dot(f32[4]{0} %p, f32[4]{0} %p)
}

ENTRY %main.7 (x: f32[4], k: pred[]) -> (f32[4], f32[4]) {
  %x = f32[4]{0} parameter(0), metadata={op_name="x"}
  %k = pred[] parameter(1)
  %c = f32[] constant(0)
  %b = f32[2,2]{1,0} bitcast(f32[4]{0} %x)
  %copy = f32[4]{0} copy(f32[4]{0} %x)
  %fusion = f32[4]{0} fusion(f32[4]{0} %x), kind=kLoop, calls=%fused_computation
  %r = f32[] reduce(f32[4]{0} %x, f32[] %c), dimensions={0}, to_apply=%add
  %ars = f32[4]{0} all-reduce-start(%x), replica_groups={}, to_apply=%add
  %ard = f32[4]{0} all-reduce-done(f32[4]{0} %ars)
  %cd = f32[4]{0} conditional(%k, %x, %x), branch_computations={%small, %large}
  %w = (s32[], f32[4]{0}) while(%t), condition=%cond, body=%body
  %o = f32[4]{0} call(f32[4]{0} %x), to_apply=%outlined
  %g = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1
  ROOT %tuple = (f32[4]{0}, f32[4]{0}) tuple(f32[4]{0} %copy, f32[4]{0} %fusion)
}
"""


class KernelCountsTest(absltest.TestCase):
    def test_rules(self):
        self.assertEqual(
            boostax.measure.kernel_counts(KERNELS_HLO),
            {
                "all-reduce-start": 1,  # not its -done half
                "compare": 1,  # the loop's condition, once
                "copy": 1,
                "custom-call": 1,  # the loop's body, once
                "dot": 1,  # the call's computation
                "fusion": 1 + 2,  # one, and the conditional's larger branch
                "reduce": 1,  # its reducer is no kernel of its own
            },
        )

    def test_compiled_program(self):
        compiled = (
            jax.jit(lambda x: (x, jnp.sin(x) * 2)).lower(jnp.ones(4)).compile()
        )
        # The returned input is copied into a new buffer (not donated).
        self.assertEqual(
            boostax.measure.kernel_counts(compiled.as_text()),
            {"copy": 1, "fusion": 1},
        )
        cost = boostax.measure.executable_cost(compiled)
        self.assertEqual(cost.kernels, 2)
        self.assertEqual(cost.kernel_kinds, {"copy": 1, "fusion": 1})


class ExecutableCostTest(absltest.TestCase):
    def test_matmul(self):
        compiled = (
            jax.jit(lambda a, b: a @ b)
            .lower(jnp.ones((8, 16)), jnp.ones((16, 4)))
            .compile()
        )
        cost = boostax.measure.executable_cost(compiled)
        self.assertEqual(cost.flops, 2 * 8 * 16 * 4)
        self.assertEqual(cost.argument_bytes, 4 * (8 * 16 + 16 * 4))
        self.assertEqual(cost.output_bytes, 4 * 8 * 4)
        self.assertEqual(cost.collective_bytes, 0.0)


class CostReportTest(absltest.TestCase):
    def test_o1_weighted_over_the_sequence(self):
        # The first 10 of the 50 planned steps run the warm-up program.
        ts, state, batch = _resnet_o1(warmup=10)
        report = boostax.measure.cost_report(ts, state, batch)
        self.assertEqual(
            sorted(report.executables),
            ["depth 0", "depth 1", "depth 2", "plain", "warm-up"],
        )
        sequence = np.asarray(ts.freezing.sequence)
        self.assertEqual(report.shares["warm-up"], 10 / 50)
        for k in range(3):
            self.assertAlmostEqual(
                report.shares[f"depth {k}"], np.sum(sequence[10:] == k) / 50
            )
        names = [n for n in report.executables if n != "plain"]
        weighted = sum(
            report.shares[n] * report.executables[n].flops for n in names
        )
        self.assertAlmostEqual(report.weighted["flops"], weighted)
        plain = report.executables["plain"]
        self.assertAlmostEqual(report.ratios["flops"], weighted / plain.flops)
        # LessBN and freezing both save: FLOPs and bytes fall, each depth
        # below the one before.
        flops = [report.executables[f"depth {k}"].flops for k in range(3)]
        self.assertLess(flops[0], plain.flops)
        self.assertTrue(flops[0] > flops[1] > flops[2], flops)
        self.assertLess(report.ratios["bytes_accessed"], 1.0)
        self.assertLess(report.expected_step_ratio, 1.0)
        # Kernels, weighted like the FLOPs: LessBN's and the frozen
        # backward's are gone.
        kernels = [report.executables[f"depth {k}"].kernels for k in range(3)]
        self.assertAlmostEqual(
            report.weighted["kernels"],
            sum(
                report.shares[n] * report.executables[n].kernels for n in names
            ),
        )
        # The warm-up program computes every gradient: no saving but
        # LessBN's.
        warmup = report.executables["warm-up"]
        self.assertTrue(plain.flops > warmup.flops > flops[0], warmup.flops)
        self.assertTrue(plain.kernels > kernels[0] > kernels[2], kernels)
        self.assertLess(report.ratios["kernels"], 1.0)
        self.assertEqual(len(report.less_bn.removed), 3)
        self.assertEqual(report.algorithms, ("less_bn", "grad_freeze"))
        self.assertEqual(set(report.compile_seconds), set(report.executables))
        text = str(report)
        for name in ("plain", "depth 2", "weighted", "projected", "LessBN"):
            self.assertIn(name, text)
        json.dumps(report.as_dict())  # serializable
        # The executables are kept: training starts without compiling.
        traces = ts.trace_count
        ts(state, batch)
        self.assertEqual(ts.trace_count, traces)

    def test_o0_equals_plain(self):
        digits = _utils.digits()
        model = models.ResNet(stage_sizes=(1, 1), widths=(8, 16))
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.adam(1e-3),
            model=model,
            loss=models.cross_entropy,
        )
        state = ts.init(
            model.init(jax.random.PRNGKey(0), digits.x_train[:1], train=False)
        )
        report = boostax.measure.cost_report(
            ts, state, (digits.x_train[:8], digits.y_train[:8])
        )
        self.assertEqual(sorted(report.executables), ["plain", "step"])
        self.assertEqual(report.ratios["flops"], 1.0)
        self.assertEqual(report.ratios["bytes_accessed"], 1.0)
        self.assertEqual(report.expected_step_ratio, 1.0)
        self.assertIsNone(report.less_bn)
        # O0 launches the plain step's kernels, one for one.
        step, plain = report.executables["step"], report.executables["plain"]
        self.assertEqual(step.kernel_kinds, plain.kernel_kinds)
        self.assertGreater(step.kernels, 20)  # convolutions, fusions, ...
        self.assertEqual(report.weighted["kernels"], plain.kernels)
        self.assertEqual(report.ratios["kernels"], 1.0)
        header, _, row = str(report).splitlines()[1:4]
        self.assertIn("kernels", header)
        self.assertIn(f" {plain.kernels} ", row)
        self.assertEqual(
            report.as_dict()["executables"]["step"]["kernels"], step.kernels
        )

    def test_nnx_and_plain_functions(self):
        digits = _utils.digits(flat=True)
        batch = (digits.x_train[:8], digits.y_train[:8])
        module = models.NNXMLP(rngs=nnx.Rngs(0))
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=module,
            loss=models.cross_entropy,
        )
        report = boostax.measure.cost_report(ts, ts.init(module), batch)
        self.assertEqual(report.ratios["flops"], 1.0)

        def loss_fn(w, batch):
            return jnp.mean((batch[0] @ w - batch[1]) ** 2)

        fn = boostax.auto_boost("O0", optimizer=optax.sgd(0.1), loss_fn=loss_fn)
        state = fn.init(jnp.zeros((64,)))
        report = boostax.measure.cost_report(
            fn, state, (digits.x_train[:8], jnp.ones(8))
        )
        self.assertEqual(report.ratios["flops"], 1.0)

    def test_data_parallel_counts_collectives(self):
        digits = _utils.digits(flat=True)
        mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
        model = models.MLP()
        ts = boostax.auto_boost(
            "O2",
            {
                "boost": {
                    "mode": "manual",
                    "less_bn": False,
                    "grad_freeze": False,
                    "adasum": True,
                },
                "common": {"device_number": 1},
            },
            optimizer=optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
            mesh=mesh,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), digits.x_train[:1]))
        report = boostax.measure.cost_report(
            ts, state, (digits.x_train[:32], digits.y_train[:32])
        )
        plain = report.executables["plain"]
        # The plain step averages the gradients over the same mesh.
        self.assertGreater(plain.collective_bytes, 0)
        self.assertIn("all-reduce", plain.collectives)
        self.assertGreater(report.weighted["collective_bytes"], 0)
        self.assertIn(
            "collective-permute", report.executables["step"].collectives
        )
        self.assertIsNotNone(report.ratios["collective_bytes"])

    def test_explicit_baseline_and_errors(self):
        ts, state, batch = _resnet_o1()
        with self.assertRaisesRegex(ValueError, "`accelerator` must be one"):
            boostax.measure.cost_report(ts, state, batch, accelerator="GPU")
        with self.assertRaisesRegex(TypeError, "`accelerator` must be"):
            boostax.measure.cost_report(ts, state, batch, accelerator=1.0)
        with self.assertRaisesRegex(ValueError, "`baseline_state` together"):
            boostax.measure.cost_report(ts, state, batch, baseline=ts)
        plain = boostax.make_train_step(
            optax.sgd(0.1), loss_fn=lambda w, b: jnp.sum(w**2)
        )
        with self.assertRaisesRegex(ValueError, "no recipe"):
            boostax.measure.cost_report(plain, plain.init(jnp.ones(3)), batch)
        # A compiled baseline needs no state; its compile time is unknown.
        compiled = ts.lower(state, batch, 0).compile()
        report = boostax.measure.cost_report(
            ts, state, batch, baseline=compiled
        )
        self.assertAlmostEqual(
            report.ratios["flops"] * compiled.cost_analysis()["flops"],
            report.weighted["flops"],
            places=1,
        )
        self.assertNotIn("plain", report.compile_seconds)
        custom = boostax.measure.Accelerator("chip", 1e12, 1e9, "made up")
        report = boostax.measure.cost_report(
            ts, state, batch, baseline=compiled, accelerator=custom
        )
        self.assertEqual(report.accelerator, custom)


class TimingTest(absltest.TestCase):
    def test_interleaved_order_and_ratio(self):
        calls = []
        runs = {
            "a": lambda: calls.append("a"),
            "b": lambda: calls.append("b"),
        }
        samples = boostax.measure.interleaved_timings(
            runs, repetitions=3, steps=2
        )
        self.assertEqual(calls, ["a", "b", "a", "b", "b", "a", "a", "b"])
        self.assertEqual([len(v) for v in samples.values()], [3, 3])
        self.assertTrue(all(t >= 0 for v in samples.values() for t in v))
        self.assertEqual(
            boostax.measure.paired_ratio([2.0, 4.0, 9.0], [1.0] * 3), 4.0
        )
        with self.assertRaisesRegex(ValueError, "`repetitions` must be"):
            boostax.measure.interleaved_timings(runs, repetitions=0, steps=1)


if __name__ == "__main__":
    absltest.main()
