# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for compiling the freeze depths in background threads."""

import os
import re
import subprocess
import sys
import textwrap
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest

import boostax
from boostax._src import tree_utils
from boostax._src.freezing import plan as freezing
from boostax._src.step import executables, program_schedule
from boostax._src.step import train_step as train_step_lib
from boostax.examples import models
from tests import _utils, conftest

GROUPS = 3
CONFIG = {
    "boost": {"mode": "manual", "grad_freeze": True},
    "grad_freeze": {"param_groups": GROUPS, "total_steps": 40},
}


WARMUP = 4


def _slow_compiles(ts, seconds):
    """Makes every compile of `ts` take `seconds` longer (a slow machine)."""
    compile_ = ts.executables._compile

    def slow(key, args):
        time.sleep(seconds)
        return compile_(key, args)

    ts.executables._compile = slow


def _step(background, **kwargs):
    digits = _utils.digits(flat=True)
    model = models.MLP(features=(16,) * 5)
    ts = boostax.auto_boost(
        "O1",
        CONFIG,
        optimizer=optax.adam(1e-2),
        model=model,
        loss=models.cross_entropy,
        sample_inputs=digits.x_train[:1],
        **_utils.with_step_options(kwargs, background_compile=background),
    )
    variables = model.init(jax.random.PRNGKey(0), digits.x_train[:1])
    return ts, ts.init(variables)


def _batches(n=12, size=32):
    digits = _utils.digits(flat=True)
    return [
        (
            digits.x_train[i * size : (i + 1) * size],
            digits.y_train[i * size : (i + 1) * size],
        )
        for i in range(n)
    ]


def _plan(sequence, micro_steps=1):
    """A stand-in freezing plan of 3 depths (each its own program)."""
    return types.SimpleNamespace(
        can_mask=True,
        micro_steps=micro_steps,
        wrap=True,
        sequence=np.array(sequence),
        groups=[("a", "b", "c"), ("b", "c"), ("c",)],  # nested suffixes
        canonical_depth=lambda k: k,
    )


class BackgroundCompileTest(absltest.TestCase):
    def test_same_bits_whether_programs_were_ready_or_waited_for(self):
        # Positions 0-3 run the warm-up program, 4-11 the depths' own.
        batches = _batches()
        ahead, state = _step(background=False, freeze_warmup_steps=WARMUP)
        ahead.compile_all(state, batches[0])  # every program ready
        programs = [freezing.MASKED, *range(GROUPS)]
        self.assertCountEqual(ahead.compile_seconds, programs)
        # Compiled on the spot: the wait is the compile time.
        self.assertAlmostEqual(
            ahead.compile_wait_seconds,
            sum(ahead.compile_seconds.values()),
            delta=0.5,
        )
        background, other = _step(background=True, freeze_warmup_steps=WARMUP)
        _slow_compiles(background, seconds=1.0)
        depths = []
        for batch in batches:
            state, _ = ahead(state, batch)
            other, metrics = background(other, batch)
            depths.append(int(metrics["frozen_groups"]))
        np.testing.assert_array_equal(depths, ahead.freezing.sequence[:12])
        self.assertGreater(len(set(depths[WARMUP:])), 1)  # own programs ran
        _utils.assert_trees_equal(other, state)
        # Training waited for the slow compiles, and got the same bits.
        self.assertGreater(background.compile_wait_seconds, 1.0)
        # Every program compiled once: the warm-up one on the spot, the
        # depths' in the background (compile_all returns the depths').
        compile_all = background.compile_all(other, batches[0])
        self.assertEqual(background.pending_compiles, 0)
        self.assertCountEqual(compile_all, range(GROUPS))
        self.assertCountEqual(background.compile_seconds, programs)
        self.assertEqual(background.trace_count, len(programs))

    def test_resumes_exactly_inside_the_warmup(self):
        batches = _batches(n=8)
        ts, start = _step(background=True, freeze_warmup_steps=WARMUP)
        uninterrupted = start
        for batch in batches:
            uninterrupted, _ = ts(uninterrupted, batch)
        resumed = start
        for batch in batches[:2]:  # stop at position 2, mid-warm-up
            resumed, _ = ts(resumed, batch)
        saved = jax.device_get(resumed)
        fresh, _ = _step(background=True, freeze_warmup_steps=WARMUP)
        restored = jax.tree.map(jnp.asarray, saved)
        for batch in batches[2:]:
            restored, _ = fresh(restored, batch)
        _utils.assert_trees_equal(restored, uninterrupted)

    def test_warmup_program_trains_like_the_depths_own(self):
        ts, state = _step(background=False, freeze_warmup_steps=WARMUP)
        batch = _batches(n=1)[0]
        sequence = ts.freezing.sequence
        position = int(np.flatnonzero(sequence[:WARMUP] > 0)[0])
        depth = int(sequence[position])
        for _ in range(position):
            state, _ = ts(state, batch)
        masked, metrics = ts(state, batch)  # the warm-up program
        self.assertEqual(int(metrics["frozen_groups"]), depth)
        own, _ = ts.at_depth(depth)(state, batch)
        trained = ts.freezing.mask(state.params, depth)
        self.assertIn(False, jax.tree.leaves(trained))
        for old, new, expected, t in zip(
            jax.tree.leaves(state.params),
            jax.tree.leaves(masked.params),
            jax.tree.leaves(own.params),
            jax.tree.leaves(trained),
            strict=True,
        ):
            if t:
                np.testing.assert_allclose(new, expected, rtol=1e-5, atol=1e-6)
            else:  # frozen: bit for bit, as the depth's own step keeps it
                np.testing.assert_array_equal(new, old)
        _utils.assert_trees_all_close(
            masked.opt_state, own.opt_state, rtol=1e-5, atol=1e-6
        )
        new_adam, old_adam = (
            tree_utils.find_state(s.opt_state, optax.ScaleByAdamState)
            for s in (masked, state)
        )
        for new, old in (
            (new_adam.mu, old_adam.mu),
            (new_adam.nu, old_adam.nu),
        ):
            for new_slot, old_slot, t in zip(
                jax.tree.leaves(new),
                jax.tree.leaves(old),
                jax.tree.leaves(trained),
                strict=True,
            ):
                if not t:
                    np.testing.assert_array_equal(new_slot, old_slot)

    def test_a_shut_pool_compiles_on_the_spot(self):
        # What a step does after its compile pool was shut down (at exit):
        # its queued compiles were cancelled; it compiles what it needs.
        batches = _batches(n=8)
        ts, state = _step(background=True, freeze_warmup_steps=0)
        state, _ = ts(state, batches[0])
        ts.executables._pool.shutdown()
        depths = set()
        for batch in batches[1:]:
            state, metrics = ts(state, batch)
            depths.add(int(metrics["frozen_groups"]))
        self.assertGreater(len(depths), 1)
        self.assertEqual(ts.pending_compiles, 0)

    def test_lower_takes_shapes_with_freezing(self):
        ts, state = _step(background=False)
        batch = _batches(n=1)[0]
        shapes = jax.eval_shape(lambda: state)
        lowered = ts.lower(shapes, batch, depth=GROUPS - 1)
        self.assertIn("func", lowered.as_text()[:2000])
        self.assertEqual(ts.pending_compiles, 0)

    def test_depths_in_order_of_first_use(self):
        ts, state = _step(background=False)
        sequence = ts.freezing.sequence
        for position in (0, 7, len(sequence) - 1):
            order = executables.keys_by_first_use(ts.freezing, position)
            rolled = [
                ts.freezing.canonical_depth(int(d))
                for d in np.roll(sequence, -position)
            ]
            expected = list(dict.fromkeys(rolled))
            self.assertEqual(order, expected)

    def test_donated_state_and_other_shapes(self):
        batches = _batches()
        ts, state = _step(background=True, donate_state=True)
        for batch in batches[:4]:
            state, _ = ts(state, batch)
        ts.compile_all(state, batches[4])  # no background trace after
        traces = ts.trace_count
        # A smaller batch is not what was compiled: jit compiles for it.
        small = (batches[4][0][:7], batches[4][1][:7])
        state, metrics = ts(state, small)
        self.assertTrue(np.isfinite(float(metrics["loss"])))
        self.assertEqual(ts.trace_count, traces + 1)

    def test_a_failing_compile_raises_at_the_step(self):
        def broken(params, batch):
            raise RuntimeError("broken loss")

        ts = train_step_lib.TrainStep(
            boostax.make_objective(loss_fn=broken),
            optax.sgd(0.1),
            freezing=boostax.Freezing(((("w",),),), np.zeros(4, np.int32)),
            options=boostax.StepOptions(background_compile=True),
        )
        state = ts.init({"w": jnp.zeros(3)})
        with self.assertRaisesRegex(RuntimeError, "broken loss"):
            ts(state, (jnp.ones(3), jnp.ones(())))

    def test_background_compile_without_programs_to_compile_is_refused(self):
        # One program (no freezing, no warm-up): nothing to compile ahead.
        with self.assertRaisesRegex(ValueError, "drop the setting"):
            train_step_lib.TrainStep(
                boostax.make_objective(loss_fn=lambda p, b: jnp.sum(p["w"])),
                optax.sgd(0.1),
                options=boostax.StepOptions(background_compile=True),
            )
        # False is a setting that changes nothing either way: accepted.
        train_step_lib.TrainStep(
            boostax.make_objective(loss_fn=lambda p, b: jnp.sum(p["w"])),
            optax.sgd(0.1),
            options=boostax.StepOptions(background_compile=False),
        )

    def test_default_follows_the_environment(self):
        # tests/conftest.py sets BOOSTAX_BACKGROUND_COMPILE=0.
        self.assertFalse(train_step_lib.BACKGROUND_COMPILE)
        ts, _ = _step(background=None)
        self.assertFalse(ts.background_compile)
        ts, _ = _step(background=True)
        self.assertTrue(ts.background_compile)


# Trains one step of O1 with six freeze depths, compiling the other depths
# in background threads, and exits while they compile.
EXIT_MID_COMPILE = textwrap.dedent(
    """
    import jax, numpy as np, optax, boostax
    from boostax.examples import models

    model = models.ResNet(stage_sizes=(1, 1), widths=(8, 16))
    x = np.ones((8, 8, 8, 1), np.float32)
    ts = boostax.auto_boost(
        "O1",
        {"grad_freeze": {"param_groups": 6, "total_steps": 40}},
        optimizer=optax.adam(1e-2), model=model, loss=models.cross_entropy,
        sample_inputs=x[:1],
        options=boostax.StepOptions(
            background_compile=True,
            freeze_warmup_steps=0,  # every depth compiles from the first step
        ),
    )
    state = ts.init(model.init(jax.random.PRNGKey(0), x[:1], train=False))
    state, _ = ts(state, (x, np.zeros(8, np.int32)))
    jax.block_until_ready(state)
    print("compiling", ts.pending_compiles, flush=True)
    """
)


class WarmupArgumentTest(absltest.TestCase):
    def test_refused_where_it_would_be_ignored(self):
        digits = _utils.digits(flat=True)
        with self.assertRaisesRegex(ValueError, "no freezing"):
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                model=models.MLP(features=(8,)),
                loss=models.cross_entropy,
                sample_inputs=digits.x_train[:1],
                options=boostax.StepOptions(freeze_warmup_steps=8),
            )
        one_state_per_group = types.SimpleNamespace(can_mask=False)
        with self.assertRaisesRegex(ValueError, "FreezeOpt"):
            program_schedule.ProgramSchedule(one_state_per_group, 8, True)
        with self.assertRaisesRegex(ValueError, "freeze_warmup_steps"):
            program_schedule.warmup_steps(-1, object())


class ProgramSharesTest(absltest.TestCase):
    def test_shares_count_the_warmup(self):
        # 40 planned steps: all of them inside the default warm-up (1024),
        # so the warm-up program is the only one a run of the plan runs.
        ts, _ = _step(False)
        self.assertEqual(ts.program_shares(), {freezing.MASKED: 1.0})
        ts, _ = _step(False, freeze_warmup_steps=WARMUP)
        keys = executables.sequence_keys(ts.freezing)
        shares = ts.program_shares()
        self.assertEqual(list(shares)[0], freezing.MASKED)
        self.assertAlmostEqual(shares[freezing.MASKED], WARMUP / len(keys))
        for k in range(GROUPS):
            self.assertAlmostEqual(
                shares.get(k, 0.0), np.sum(keys[WARMUP:] == k) / len(keys)
            )
        self.assertAlmostEqual(sum(shares.values()), 1.0)
        # Without a warm-up: the sequence's own shares.
        ts, _ = _step(False, freeze_warmup_steps=0)
        self.assertEqual(
            ts.program_shares(), executables.key_shares(ts.freezing)
        )

    def test_a_long_opening_depth_runs_its_own_program(self):
        # Progressive freezing trains everything first: those positions run
        # depth 0's own program (no mask), a warm-up program the rest of
        # the warm-up, compiled in the background once depth 0's is; its
        # depths 1 and 2 both freeze group 0's own leaves, so it
        # differentiates group 1's alone.
        def schedule(sequence, warmup):
            return program_schedule.ProgramSchedule(_plan(sequence), warmup)

        from_1 = freezing.warmup_key(1)
        long = schedule([0] * 100 + [1, 2] * 50, 128)
        self.assertEqual(long.lead, 100)
        runs = [long.program_at(p) for p in range(200)]
        self.assertEqual(runs[:100], [0] * 100)
        self.assertEqual(runs[100:128], [from_1] * 28)
        self.assertEqual(runs[128:], [1, 2] * 36)
        self.assertEqual(
            long.shares(),
            {from_1: 0.14, 0: 0.5, 1: 0.18, 2: 0.18},
        )
        self.assertEqual(list(long.shares())[0], from_1)
        self.assertEqual(long.programs_from(0, warmup=True), [0, from_1, 1, 2])
        self.assertIsNone(long.keys_to_compile(0, {}))
        self.assertEqual(long.keys_to_compile(1, {0: 1.0}), [from_1])
        # A run of one depth over the whole warm-up needs no warm-up program.
        whole = schedule([0] * 200 + [1, 2], 128)
        self.assertEqual(whole.lead, 128)
        self.assertNotIn(freezing.MASKED, whole.shares())
        self.assertEqual(whole.programs_from(0, warmup=True), [0, 1, 2])
        # A short opening run (MindSpore's interval freezing) does not.
        short = schedule([0] * 20 + [1, 2] * 90, 128)
        self.assertEqual(short.lead, 0)
        self.assertEqual(short.program_at(0), freezing.MASKED)

    def test_warmup_end_inside_an_accumulated_update(self):
        # 2 micro-steps per entry: a warm-up of 3 train steps ends inside
        # the second entry, whose other micro-step runs its depth's program.
        plan = _plan([0, 1, 1, 2], micro_steps=2)
        schedule = program_schedule.ProgramSchedule(plan, 3)
        shares = schedule.shares()
        runs = [schedule.program_at(p) for p in range(8)]
        self.assertEqual(
            shares, {k: runs.count(k) / 8 for k in (freezing.MASKED, 1, 2)}
        )


class WarmupMaskTest(absltest.TestCase):
    def test_one_predicate_per_set_of_depths(self):
        # The warm-up program's masks: leaves trained at the same depths
        # share one comparison (one lookup per leaf compiled slower), and
        # the leaves every depth trains none.
        ts, state = _step(False)
        plan = ts.freezing
        for depth in range(GROUPS):
            traced = plan.traced_mask(state.params, jnp.int32(depth))
            self.assertEqual(
                [bool(t) for t in jax.tree.leaves(traced)],
                jax.tree.leaves(plan.mask(state.params, depth)),
            )
        jaxpr = jax.make_jaxpr(
            lambda depth: plan.traced_mask(state.params, depth)
        )(jnp.int32(0))
        self.assertLen(jaxpr.eqns, GROUPS - 1)


class ProgramCopiesTest(absltest.TestCase):
    def test_copies_only_the_frozen_leaves(self):
        # Without donation, a leaf a program returns as given is a copy
        # kernel: the frozen params and their Adam moments are (3 a leaf),
        # the base key and the depth metric (a constant) are not.
        ts, state = _step(False, freeze_warmup_steps=0)
        digits = _utils.digits(flat=True)
        batch = (digits.x_train[:8], digits.y_train[:8])
        paths = [
            jax.tree_util.keystr(path)
            for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]
        ]
        for depth, program in ts.compile_all(state, batch).items():
            frozen = jax.tree.leaves(ts.freezing.mask(state.params, depth))
            hlo = program.as_text()
            entry = hlo[hlo.index("ENTRY") :].split("\n}")[0]
            # The program takes the leaves a step changes flat: its
            # ``moving_i`` is the state's leaf ``moving_positions[i]``,
            # whose path says which part of the state it is.
            copied = [
                re.match(
                    r"\.([a-z]+)", paths[program.moving_positions[int(i)]]
                )[1].split("_")[0]
                for i in re.findall(r"\bcopy\(%?moving_(\d+)_", entry)
            ]
            self.assertEqual(
                sorted(copied),
                ["opt"] * 2 * frozen.count(False)
                + ["params"] * frozen.count(False),
                (depth, copied),
            )
            self.assertNotIn("frozen_groups", program.compiled.out_info[1])
            new_state, metrics = program(state, batch)
            self.assertIs(new_state.rng, state.rng)
            self.assertEqual(int(metrics["frozen_groups"]), depth)


class ExitTest(absltest.TestCase):
    def test_exits_cleanly_while_depths_compile(self):
        env = dict(os.environ)
        env["XLA_FLAGS"] = " ".join(conftest.COMPILE_FAST_FLAGS)
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(__file__))
        env.pop("JAX_COMPILATION_CACHE_DIR", None)  # really compile
        for _ in range(3):
            run = subprocess.run(
                [sys.executable, "-c", EXIT_MID_COMPILE],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.assertEqual(run.returncode, 0, run.stderr[-2000:])
            pending = int(run.stdout.split("compiling")[-1])
            self.assertGreater(pending, 0)  # it did exit mid-compile


if __name__ == "__main__":
    absltest.main()
