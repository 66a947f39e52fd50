# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Every benchmark runs in its --quick mode, so none can rot."""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from absl.testing import absltest, parameterized

from tests import conftest

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks")
SCRIPTS = sorted(
    path
    for path in glob.glob(os.path.join(BENCHMARKS, "*.py"))
    if not os.path.basename(path).startswith("_")
)


_SEPARATOR = "\n=====\n"
# Runs `script -h` for each script path in argv, separated by _SEPARATOR.
_HELP_OF_EACH = f"""
import runpy, sys
for i, script in enumerate(sys.argv[1:]):
    if i:
        print({_SEPARATOR!r}, end="")
    sys.argv = [script, "-h"]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
"""


class BenchmarksTest(parameterized.TestCase):
    def test_there_are_benchmarks(self):
        self.assertNotEmpty(SCRIPTS)

    def test_device_script_runs_existing_benchmarks(self):
        # benchmarks/device.sh runs on an accelerator host only: check that
        # it parses and that every script and flag it uses exists.
        script = os.path.join(BENCHMARKS, "device.sh")
        subprocess.run(["bash", "-n", script], check=True)
        with open(script, encoding="utf-8") as f:
            commands = [
                line.strip()
                for line in f.read().replace("\\\n", " ").splitlines()
                if line.strip().startswith("timeout ")
            ]
        used = {}
        for command in commands:
            name = re.search(r"benchmarks/(\w+)\.py", command).group(1)
            used[name] = set(re.findall(r"(--[a-z][a-z-]*)", command))
        self.assertEqual(set(used), {"precision", "speedup", "step_overhead"})
        self.assertLen(commands, 5)
        # The dispatch-bound table comes first.
        self.assertIn("step_overhead.py", commands[0])
        # Every script's --help, from one process (one JAX import).
        names = sorted(used)
        helped = subprocess.run(
            [sys.executable, "-c", _HELP_OF_EACH]
            + [os.path.join(BENCHMARKS, f"{name}.py") for name in names],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.path.abspath(BENCHMARKS)},
        ).stdout.split(_SEPARATOR)
        for name, text in zip(names, helped, strict=True):
            self.assertIn("usage:", text, name)
            for flag in used[name]:
                self.assertIn(flag, text, name)

    @parameterized.named_parameters(
        (os.path.basename(path)[:-3], path) for path in SCRIPTS
    )
    def test_quick_mode(self, script):
        result = _run_quick(script)
        self.assertTrue(result["quick"])
        self.assertIn("environment", result)
        self.assertIn("command", result)
        self.assertEqual(
            result["compilation_cache_dir"],
            os.environ["JAX_COMPILATION_CACHE_DIR"],
        )
        if os.path.basename(script) == "scaling.py":
            _check_sharded_rows(self, result)

    def test_speedup_less_bn_ablation(self):
        result = _run_quick(
            os.path.join(BENCHMARKS, "speedup.py"), "--less-bn-ablation"
        )
        digits = result["workloads"]["digits"]
        self.assertEqual(
            list(digits["summary"]),
            ["plain optax", "O1 less_bn", "O1 BN+GC", "O1 BN+FN", "O1 BN"],
        )
        self.assertNotIn("compilation", digits)
        less_bn = {
            name: report["less_bn"]
            for name, report in digits["cost_reports"].items()
        }
        # Every variant removes the same BatchNorms; two have the FN head.
        removed = {tuple(r["removed"]) for r in less_bn.values()}
        self.assertLen(removed, 1)
        self.assertNotEmpty(removed.pop())
        self.assertEqual(
            [name for name, r in less_bn.items() if r["fn_head"]],
            ["O1 less_bn", "O1 BN+FN"],
        )

    def test_speedup_recipe_steps(self):
        result = _run_quick(
            os.path.join(BENCHMARKS, "speedup.py"), "--recipe-steps"
        )
        digits = result["workloads"]["digits"]
        names = ["O1 recipe", "O1 BN", "O1 BN+zero", "FN s=1", "FN s=4"]
        self.assertEqual(
            list(digits["summary"]), ["plain optax", *names, "FN s=16 log"]
        )
        reports = digits["cost_reports"]
        # The FN head alone keeps every BatchNorm (no LessBN report).
        self.assertIsNone(reports["FN s=4"]["less_bn"])
        self.assertEqual(
            reports["O1 BN+zero"]["less_bn"]["removed"],
            reports["O1 BN"]["less_bn"]["removed"],
        )

    def test_scaling_zero1(self):
        result = _run_quick(os.path.join(BENCHMARKS, "scaling.py"), "--zero1")
        self.assertEqual(result["benchmark"], "scaling_zero1")
        rows = result["configurations"]
        self.assertEqual(
            [(r["name"], r["optimizer"], r["devices"]) for r in rows],
            [("resnet_small", "adam", 8), ("transformer", "adam", 8)],
        )
        for row in rows:
            replicated, sharded = row["replicated"], row["sharded"]
            sent = sharded["collectives"]
            self.assertIn("reduce-scatter", sent["collectives"])
            self.assertIn("all-gather", sent["collectives"])
            self.assertNotIn("reduce-scatter", replicated["collectives"])
            self.assertBetween(
                sent["total"],
                row["all_reduce_minimum"],
                1.02 * replicated["collectives"]["total"],
            )
            # Adam's two slots: about 1/8 of them on each device.
            whole = replicated["opt_state_bytes_per_device"]
            self.assertBetween(
                sharded["opt_state_bytes_per_device"], whole / 8, whole / 7
            )
            self.assertLess(
                sharded["memory_analysis"]["argument"],
                replicated["memory_analysis"]["argument"] - 0.8 * whole,
            )
            # The steps moved the params, and both arms alike.
            self.assertGreater(replicated["params_max_change"], 1e-4)
            self.assertTrue(row["params_close"])
            self.assertLess(row["params_max_abs_difference"], 1e-5)

    def test_scaling_zero1_bfloat16(self):
        # The params stored sharded, gathered at the step's start in
        # bfloat16 (LayerNorm and BatchNorm leaves in float32): about 3/4
        # of the replicated step's bytes (all float32 gradients and a
        # half-precision all-gather), 1/8 of the params on each device.
        result = _run_quick(
            os.path.join(BENCHMARKS, "scaling.py"),
            "--zero1",
            "--precision",
            "bfloat16",
        )
        for row in result["configurations"]:
            self.assertEqual(row["precision"], "bfloat16")
            replicated, sharded = row["replicated"], row["sharded"]
            self.assertBetween(
                sharded["collectives"]["total"]
                / replicated["collectives"]["total"],
                0.74,
                0.78,
            )
            by_op = sharded["bytes_by_op"]
            self.assertLess(by_op["all-gather"], 0.6 * by_op["reduce-scatter"])
            params = replicated["state_bytes_per_device"]["params"]
            self.assertLess(
                sharded["state_bytes_per_device"]["params"], params / 7
            )
            self.assertTrue(row["params_close"])

    def test_image_methods_retime(self):
        # --retime-from takes an earlier run's chosen settings and runs and
        # times the programs again: nothing trained, nothing selected.
        script = os.path.join(BENCHMARKS, "image_methods.py")
        with tempfile.TemporaryDirectory() as tmp:
            first = os.path.join(tmp, "first.json")
            arms = ("--arms", "recipe")
            earlier = _run_quick(script, *arms, out=first)["workloads"]
            again = _run_quick(
                script,
                *arms,
                "--retime-from",
                first,
                out=os.path.join(tmp, "again.json"),
            )["workloads"]
        shapes, retimed = earlier["shapes"], again["shapes"]
        self.assertEqual(retimed["selection"]["retimed_from"], first)
        for arm in ("plain optax", "recipe"):
            self.assertEqual(
                retimed["selection"][arm]["chosen"],
                shapes["selection"][arm]["chosen"],
            )
            self.assertEqual(
                [r["final_accuracy"] for r in retimed["runs"][arm]],
                [r["final_accuracy"] for r in shapes["runs"][arm]],
            )
        # The recipe's programs are its sizes: timed again.
        self.assertEqual(
            set(retimed["summary"]["step_cost_by_depth"]["recipe"]),
            set(shapes["summary"]["step_cost_by_depth"]["recipe"]),
        )

    def test_speedup_budgets(self):
        script = os.path.join(BENCHMARKS, "speedup.py")
        with tempfile.TemporaryDirectory() as tmp:
            first = os.path.join(tmp, "first.json")
            result = _run_quick(script, "--budgets", out=first)
            # --reuse trains only what the earlier results lack (here
            # nothing): every run comes back, timed again.
            reused = _run_quick(
                script,
                "--budgets",
                "--skip-compilation",
                "--reuse",
                first,
                out=os.path.join(tmp, "reused.json"),
            )["workloads"]["digits"]
        digits = result["workloads"]["digits"]
        self.assertEqual(reused["runs_reused_from"], [first])
        for name, runs in digits["runs"].items():
            self.assertEqual(
                [r["final_accuracy"] for r in reused["runs"][name]],
                [r["final_accuracy"] for r in runs],
            )
        self.assertEqual(digits["fractions"], [0.5, 1.0, 1.5])
        arms = digits["summary"]["arms"]
        self.assertEqual(list(arms), ["plain optax", "O1", "O1 recipe"])
        plain = arms["plain optax"]
        # Plain reaches its own accuracy exactly at its full budget.
        self.assertAlmostEqual(plain["speedup_median"], 1.0)
        self.assertAlmostEqual(
            plain["budgets"]["1.0"]["relative_time_median"], 1.0
        )
        # The O1 recipe's time is the sum of its steps' costs, and only the
        # programs its runs ran are timed (these short runs stay inside
        # the freezing warm-up: its masked program only).
        costs = digits["summary"]["step_cost_by_depth"]["O1 recipe"]
        runs = digits["runs"]["O1 recipe"]
        self.assertEqual(
            set(costs), {str(d) for r in runs for d in r["depths"]}
        )
        self.assertEqual(set(costs), {"masked"})
        self.assertTrue(digits["plot"].endswith("_digits.png"))
        # Past the full budget: every arm trains 1.5x; plain's time to its
        # own full-budget accuracy is still read up to 1x.
        self.assertIn("1.5", plain["budgets"])
        self.assertLessEqual(
            digits["summary"]["plain_seconds_to_target"],
            digits["summary"]["plain_full_budget_seconds"],
        )

    def test_transformer_budgets(self):
        script = os.path.join(BENCHMARKS, "transformer_budgets.py")
        with tempfile.TemporaryDirectory() as tmp:
            first = os.path.join(tmp, "first.json")
            result = _run_quick(script, out=first)
            # --retime trains nothing: every run and the noise come back,
            # only the step costs (so the times) are measured again.
            retimed = _run_quick(
                script, "--retime", first, out=os.path.join(tmp, "again.json")
            )
            # --reuse takes every run it finds (here all of them) and the
            # per-window losses stored beside it: the noise comes out the
            # same, recomputed; no partial file is left behind.
            reused = _run_quick(
                script, "--reuse", first, out=os.path.join(tmp, "reused.json")
            )
            with np.load(os.path.join(tmp, "reused_window_losses.npz")) as f:
                stored = sorted(f.files)
            # --train-only, one arm a process: each adds its runs to the
            # partial file and stops before the step costs; a last --reuse
            # of that file times them all, as one process would have.
            parts = os.path.join(tmp, "parts.json")
            partial = os.path.join(tmp, "parts.partial.json")
            only_o1 = _run_quick(
                script,
                *("--train-only", "--arms", "O1", "--reuse-plain", first),
                out=parts,
                read=partial,
            )
            self.assertFalse(os.path.exists(parts))
            _run_quick(
                script,
                *("--train-only", "--arms", "text recipe", "--reuse", partial),
                out=parts,
                read=partial,
            )
            in_parts = _run_quick(
                script,
                *("--arms", "O1", "text recipe", "--reuse", partial),
                out=parts,
            )
            left = sorted(os.listdir(tmp))
        self.assertEqual(retimed["retimed_from"], first)
        self.assertEqual(retimed["noise"], result["noise"])
        self.assertEqual(reused["runs_reused_from"], [first])
        self.assertEqual(reused["noise"], result["noise"])
        self.assertEqual(list(only_o1["runs"]), ["plain optax", "O1"])
        self.assertEqual(
            list(in_parts["runs"]), ["plain optax", "O1", "text recipe"]
        )
        for name in ("O1", "text recipe"):
            self.assertEqual(
                in_parts["noise"]["arms"][name], result["noise"]["arms"][name]
            )
        self.assertEqual(
            stored,
            sorted(
                f"{arm}/{seed}" for arm in result["runs"] for seed in (0, 1)
            ),
        )
        self.assertFalse([name for name in left if "partial" in name])
        # O1 switches nothing on here (no BatchNorm): plain's runs.
        self.assertEqual(
            [r["final_accuracy"] for r in result["runs"]["O1"]],
            [r["final_accuracy"] for r in result["runs"]["plain optax"]],
        )
        self.assertEqual(
            result["noise"]["arms"]["O1"]["full_budget_gap"], [0.0, 0.0]
        )
        for name, runs in result["runs"].items():
            for again in (retimed, reused, in_parts):
                if name not in again["runs"]:
                    continue
                self.assertEqual(
                    [r["final_accuracy"] for r in again["runs"][name]],
                    [r["final_accuracy"] for r in runs],
                )
        self.assertEqual(result["fractions"], [0.5, 1.0, 1.5])
        summary = result["summary"]
        self.assertEqual(
            summary["metric"],
            {"name": "validation loss", "higher_is_better": False},
        )
        arms = list(summary["arms"])
        self.assertEqual(arms, ["plain optax", "O1", "text recipe"])
        plain = summary["arms"]["plain optax"]["budgets"]
        self.assertLen(plain["1.0"]["seeds"], 2)
        self.assertLen(plain["1.5"]["seeds"], 1)
        # The whole validation split, tiled; its noise beside each gap.
        noise = result["noise"]
        self.assertEqual(noise["windows"], result["validation_windows"])
        self.assertGreaterEqual(
            result["validation_windows"] * 32,
            result["corpus"]["validation_bytes"] - 32,
        )
        self.assertGreater(noise["block_sem"], 0)
        self.assertLen(noise["arms"]["text recipe"]["full_budget_gap"], 2)
        self.assertIn("text recipe", result["with_compile"])

    def test_speedup_budget_arms(self):
        # --arms trains the named rows only (plain Optax always).
        result = _run_quick(
            os.path.join(BENCHMARKS, "speedup.py"),
            "--budgets",
            "--budget-ablation",
            "--arms",
            "FN s=1",
        )
        arms = result["workloads"]["digits"]["summary"]["arms"]
        self.assertEqual(list(arms), ["plain optax", "FN s=1"])

    def test_transformer_o0_bitwise_and_less_bn_message(self):
        result = _run_quick(
            os.path.join(BENCHMARKS, "transformer.py"),
            "--arms",
            "O0",
            "LessBN (O1)",
        )
        summary = result["summary"]
        self.assertEqual(list(summary), ["plain optax", "O0", "LessBN (O1)"])
        self.assertEqual(summary["O0"]["params_bitwise_equal_to_plain"], [True])
        self.assertEqual(summary["O0"]["same_curve_as_plain"], [True])
        notes = summary["LessBN (O1)"]["notes"]
        self.assertIn("found no BatchNorm", notes["less_bn_report"])
        # O1's FN head is not put on the per-position logits, and the
        # report says why.
        self.assertIn(
            "FN head not placed: the output (1, 32, 256) of the last dense "
            "layer 'head' is per position",
            notes["less_bn_report"],
        )
        self.assertEqual(
            len(result["corpus"]["train_files"])
            + len(result["corpus"]["validation_files"]),
            result["corpus"]["files"],
        )


def _check_sharded_rows(test, result):
    """scaling.py's ZeRO-1 rows: the bytes of one all-reduce, 1/P of the
    optimizer state on each device."""
    for row in result["configurations"]:
        sharded, devices = row["sharded"], row["devices"]
        sent = sharded["collectives"]
        test.assertIn("reduce-scatter", sent["collectives"])
        test.assertIn("all-gather", sent["collectives"])
        # The mean step's all-reduce also carries BatchNorm statistics.
        test.assertAlmostEqual(
            sent["total"] / row["mean"]["total"], 1.0, delta=0.01
        )
        test.assertGreaterEqual(sent["total"], sharded["all_reduce_minimum"])
        whole = sharded["opt_state_bytes"]
        test.assertEqual(sharded["mean_opt_state_bytes_per_device"], whole)
        # A few small leaves have no axis divisible by P: kept whole.
        per_device = sharded["opt_state_bytes_per_device"]
        test.assertBetween(per_device, whole / devices, 1.05 * whole / devices)
        test.assertLess(
            sharded["argument_bytes_per_device"],
            sharded["mean_argument_bytes_per_device"] - 0.8 * whole,
        )
        o2 = row["O2"].get("sharded")
        if o2 is not None:
            # AdaSum across nodes on each device's slices: about the
            # bytes of the mean step, 1/D of a node's state per device.
            test.assertLessEqual(o2["total"], 1.1 * row["mean"]["total"])
            test.assertLessEqual(
                o2["opt_state_bytes_per_device"],
                1.05
                * row["O2"]["opt_state_bytes_per_device"]
                / row["devices_per_node"],
            )


def _run_quick(script, *args, out=None, read=None):
    """Runs `script --quick *args` in a subprocess; returns its JSON
    (written to `out` if given, else to a temporary file; the file `read`
    if given)."""
    if out is None:
        with tempfile.TemporaryDirectory() as tmp:
            return _run_quick(
                script, *args, out=os.path.join(tmp, "result.json")
            )
    env = dict(os.environ)
    # Benchmarks choose their devices; the suite's compile flags stay
    # (quick mode is a smoke test, its timings are not read).
    env["XLA_FLAGS"] = " ".join(conftest.COMPILE_FAST_FLAGS)
    # The suite's cache (tests/conftest.py): other tests compile some of
    # the same steps.
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
    subprocess.run(
        [sys.executable, script, "--quick", *args, "--out", out]
        + ["--compilation-cache", cache],
        check=True,
        env=env,
        timeout=600,
    )
    with open(read or out, encoding="utf-8") as f:
        return json.load(f)


if __name__ == "__main__":
    absltest.main()
