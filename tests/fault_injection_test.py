# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A training process SIGKILLed three times, once during an asynchronous
Orbax save, and restarted from its latest checkpoint each time ends bit for
bit where the uninterrupted run ends.

The run (tests/_fault_injection_worker.py) is O1 (LessBN, freezing) with
gradient accumulation and a dynamic loss scale that overflows and moves
both ways, saved every `EVERY` steps. Both the uninterrupted run and the
killed one are subprocesses with the same XLA flags and the suite's
persistent compilation cache (restarts load their executables from it);
the uninterrupted one runs alongside the restarts. The work each kill loses
is checked against the bound of docs/checkpointing.md.
BOOSTAX_FAULT_INJECTION_REPORT=1 (with pytest -s) prints the schedule, the
lost steps and the times.
"""

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import orbax.checkpoint as ocp
from absl.testing import absltest

from tests import _fault_injection_worker as worker
from tests import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, EVERY = worker.STEPS, worker.EVERY
# How Orbax names a checkpoint being written: `<step>.orbax-checkpoint-tmp`.
TMP_MARK = ".orbax-checkpoint-tmp"


def kill_schedule(seed):
    """Three kills, one of each kind, in a seeded order at seeded steps.

    Kinds ``save`` (during an async save) and ``saved`` (right after a save
    finished) fall on save steps, ``step`` between them. The steps, one in
    each third of [2 * EVERY, STEPS - EVERY], increase, so every restart
    reaches its kill and every kill has a finished checkpoint before it.
    """
    rng = np.random.default_rng(seed)
    kinds = [str(k) for k in rng.permutation(["save", "saved", "step"])]
    edges = np.linspace(2 * EVERY, STEPS - EVERY + 1, 4).astype(int)
    schedule = []
    for kind, lo, hi in zip(kinds, edges[:-1], edges[1:], strict=True):
        steps = [
            s for s in range(lo, hi) if (s % EVERY == 0) != (kind == "step")
        ]
        schedule.append((kind, int(rng.choice(steps))))
    return schedule


def _env():
    env = dict(os.environ)
    # The suite's compile flags (one device): both runs compute alike.
    env["XLA_FLAGS"] = " ".join(conftest.COMPILE_FAST_FLAGS)
    env["BOOSTAX_BACKGROUND_COMPILE"] = "0"
    # The suite's persistent compilation cache (tests/conftest.py).
    env["JAX_COMPILATION_CACHE_DIR"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    env["PYTHONPATH"] = ROOT
    return env


def _start(ckpt, out, kill=None):
    args = [sys.executable, "-m", "tests._fault_injection_worker"]
    args += ["--ckpt", ckpt, "--out", out]
    if kill is not None:
        args += ["--kill", f"{kill[0]}:{kill[1]}"]
    return subprocess.Popen(
        args,
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process):
    """(returncode, {event: fields}, log) of a worker."""
    log = process.communicate(timeout=300)[0]
    events = {}
    for line in log.splitlines():
        if line.startswith('{"event"'):
            fields = json.loads(line)
            events[fields.pop("event")] = fields
    return process.returncode, events, log


def _stop(process):
    """Kills a worker still running (a failed assertion left it behind)."""
    if process is not None and process.poll() is None:
        process.kill()
        process.communicate()


def _on_disk(ckpt):
    """(finished steps, steps being written when the process died)."""
    names = os.listdir(ckpt)
    finished = sorted(int(n) for n in names if n.isdigit())
    partial = sorted(int(n.split(".")[0]) for n in names if TMP_MARK in n)
    return finished, partial


def _latest_step(ckpt):
    """The step Orbax restores in a restarted process."""
    options = ocp.CheckpointManagerOptions(read_only=True)
    manager = ocp.CheckpointManager(ckpt, options=options)
    try:
        return manager.latest_step()
    finally:
        manager.close()


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


class FaultInjectionTest(absltest.TestCase):
    def _check_kill(self, ckpt, kill, rc, events, log):
        """Checks a killed process and its checkpoints; returns the step a
        restart resumes from."""
        kind, step = kill
        self.assertEqual(rc, -signal.SIGKILL, log)
        self.assertIn("kill", events, log)
        self.assertEqual(events["kill"]["kind"], kind, log)
        self.assertEqual(events["kill"]["step"], step, log)
        finished, partial = _on_disk(ckpt)
        latest = _latest_step(ckpt)
        # A half-written checkpoint is never the latest.
        self.assertEqual(latest, finished[-1])
        if kind == "save":
            # Killed while step's checkpoint was being written: it stays
            # half-written, and the one before is the latest.
            self.assertIn(step, partial)
            self.assertNotIn(step, finished)
            self.assertEqual(latest, step - EVERY)
        elif kind == "saved":
            self.assertEqual(latest, step)
        else:
            # The save issued last may still have been in flight.
            last_save = step - step % EVERY
            self.assertIn(latest, (last_save - EVERY, last_save))
        # Killed after save() returned: at most 2 * EVERY - 1 steps are
        # lost (docs/checkpointing.md).
        self.assertBetween(step - latest, 0, 2 * EVERY - 1)
        return latest

    def test_killed_run_resumes_bit_for_bit(self):
        start = time.perf_counter()
        schedule = kill_schedule(seed=0)
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = os.path.join(tmp, "killed")
            out = os.path.join(tmp, "out.pkl")
            reference, resumed_from, runs, lost = None, None, [], []
            try:
                for kill in [*schedule, None]:
                    rc, events, log = _finish(_start(ckpt, out, kill))
                    if reference is None:
                        # The uninterrupted run, alongside the restarts,
                        # once the first process has compiled the steps.
                        reference = _start(
                            os.path.join(tmp, "reference"),
                            os.path.join(tmp, "ref.pkl"),
                        )
                    runs.append(events)
                    # Every restart resumed from the latest checkpoint the
                    # kill before left finished, not from scratch.
                    self.assertIn("start", events, log)
                    self.assertEqual(
                        events["start"]["resumed"], resumed_from, log
                    )
                    if kill is None:
                        self.assertEqual(rc, 0, log)
                        break
                    latest = self._check_kill(ckpt, kill, rc, events, log)
                    lost.append(kill[1] - latest)
                    resumed_from = latest
                rc, ref_events, ref_log = _finish(reference)
            finally:
                _stop(reference)
            self.assertEqual(rc, 0, ref_log)
            self.assertIn("start", ref_events, ref_log)
            self.assertIsNone(ref_events["start"]["resumed"])
            # Each save redone after a kill replaced the half-written one.
            self.assertEqual(
                _on_disk(ckpt), (list(range(EVERY, STEPS + 1, EVERY)), [])
            )
            expected = _load(os.path.join(tmp, "ref.pkl"))
            actual = _load(out)
        self.assertLen(runs, len(schedule) + 1)
        if os.environ.get("BOOSTAX_FAULT_INJECTION_REPORT"):
            waited = [s["previous_in_flight"] for s in expected["saves"]]
            report = {
                "schedule": schedule,
                "resumed": [r["start"]["resumed"] for r in runs],
                "lost_steps": lost,
                "run_s": [r.get("done", r.get("kill"))["t_s"] for r in runs],
                "reference_s": ref_events["done"]["t_s"],
                "reference_saves_waiting_for_previous": sum(waited),
                "reference_saves": len(waited),
                "save_blocked_s": [
                    round(s["blocked_s"], 3) for s in expected["saves"]
                ],
                "test_s": round(time.perf_counter() - start, 1),
            }
            print(json.dumps(report))

        # What the run exercises (the uninterrupted run's metrics).
        history = expected["history"]
        self.assertLen(history, STEPS)
        self.assertGreaterEqual(ref_events["start"]["less_bn_removed"], 1)
        overflow = [bool(h["overflow"]) for h in history]
        self.assertTrue(any(overflow) and not all(overflow))
        change = np.diff([h["loss_scale"] for h in history])
        self.assertTrue((change > 0).any() and (change < 0).any())
        self.assertLen({int(h["frozen_groups"]) for h in history}, 2)
        updated = [bool(h["updated"]) for h in history]
        self.assertTrue(any(updated) and not all(updated))

        # Bit for bit: every leaf (step, params, opt_state with the
        # accumulator, BatchNorm statistics, rng, loss scale and counter,
        # freeze position), and the metrics of the steps the last run redid.
        state = actual["state"]
        self.assertEqual(list(state), list(expected["state"]))
        for name in (
            ".step",
            ".rng",
            ".opt_state.mini_step",
            ".algorithms.freeze.position",
            ".algorithms.loss_scale.loss_scale",
            ".algorithms.loss_scale.counter",
        ):
            self.assertIn(name, state)
        for prefix in (".model_state['batch_stats']", ".opt_state.acc_grads"):
            self.assertTrue(any(n.startswith(prefix) for n in state), prefix)
        for name, value in expected["state"].items():
            self.assertEqual(state[name].dtype, value.dtype, name)
            np.testing.assert_array_equal(state[name], value, err_msg=name)
        redone = actual["history"]
        self.assertEqual(redone[0]["step"], resumed_from + 1)
        for h in redone:
            for key, value in history[h["step"] - 1].items():
                np.testing.assert_array_equal(
                    h[key], value, err_msg=f"{key} at step {h['step']}"
                )


if __name__ == "__main__":
    absltest.main()
