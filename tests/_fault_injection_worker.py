# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""One training process of tests/fault_injection_test.py, killable on cue.

    python -m tests._fault_injection_worker --ckpt DIR --out FILE.pkl
        [--kill save:S | saved:S | step:S]

Trains a tiny Linen ResNet at O1 (LessBN removes a BatchNorm, freezing with
2 groups) with gradient accumulation (2 micro-steps) and a dynamic loss
scale that starts too high and grows after 3 finite steps, so some steps
overflow and are skipped and the scale moves both ways. Batch i comes from
seed i: a restarted process regenerates the batches it has to redo.

Every `EVERY` steps the state is saved by an Orbax `CheckpointManager`
(asynchronously, its default); on start the latest checkpoint, if any, is
restored into the shapes of a fresh `ts.init(...)`. `--kill` makes the
process SIGKILL itself:

- ``save:S``: right after ``manager.save(S)`` returned, while its
  asynchronous write is still in flight (a kill during a save);
- ``saved:S``: after ``manager.save(S)`` and ``wait_until_finished()``
  (between steps, right after a save completed);
- ``step:S``: after step S, S not a save step (mid-interval).

It prints one JSON line per event (``start``, ``kill``, ``done``; a kill's
line comes before the kill, and only bookkeeping runs between the save's
return and the kill) and, when it finishes, pickles to ``--out`` the final
state (every leaf, by its path), the metrics of the steps it ran and how
its saves went. Run it with the XLA flags and compilation cache of the
process it is compared with.
"""

import argparse
import json
import os
import pickle
import signal
import time

T0 = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from flax import linen as nn  # noqa: E402

import boostax  # noqa: E402

STEPS = 24  # micro-steps (TrainState.step counts them)
# Save every 3 steps: saves fall at both phases of the 2-step accumulation.
EVERY = 3
BATCH = 8
SHAPE = (8, 8, 1)


class TinyResNet(nn.Module):
    """Stem and one basic block on a ReLU: LessBN removes the block's first
    BatchNorm (its pattern 6); two BatchNorms keep running statistics.
    float32 parameters, float16 computation: what loss scaling is for."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        f16 = jnp.float16

        def norm(name):
            return nn.BatchNorm(
                use_running_average=not train, dtype=f16, name=name
            )

        def conv(name):
            return nn.Conv(8, (3, 3), dtype=f16, name=name)

        x = nn.relu(norm("stem_bn")(conv("stem")(x)))
        y = nn.relu(norm("bn_a")(conv("conv_a")(x)))
        y = norm("bn_b")(conv("conv_b")(y))
        x = nn.relu(x + y)
        logits = nn.Dense(10, dtype=f16, name="head")(jnp.mean(x, axis=(1, 2)))
        return logits.astype(jnp.float32)


def batch(i):
    """Batch i, the same in every process."""
    rng = np.random.default_rng(i)
    x = rng.normal(size=(BATCH, *SHAPE)).astype(np.float32)
    y = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    return jnp.asarray(x), jnp.asarray(y)


def build():
    """The train step and the initial variables of the model."""
    model = TinyResNet()
    x = batch(0)[0]
    ts = boostax.auto_boost(
        "O1",
        {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 2},
            "grad_freeze": {"param_groups": 2, "total_steps": STEPS},
        },
        optimizer=optax.sgd(0.05, momentum=0.9),
        model=model,
        loss=lambda logits, y: optax.softmax_cross_entropy_with_integer_labels(
            logits, y
        ).mean(),
        sample_inputs=x,
        # float16 overflows at 65504: the first steps overflow and back
        # off, then the scale grows after every 3 finite steps until a step
        # overflows again.
        loss_scale=boostax.DynamicLossScale(
            loss_scale_value=2.0**21, scale_window=3
        ),
    )
    variables = model.init(jax.random.PRNGKey(0), x, train=False)
    return ts, variables


def flatten(state):
    """{path: numpy array} of every leaf (PRNG keys as their raw data)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out[jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def elapsed():
    return round(time.perf_counter() - T0, 3)


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill", default=None, help="save:S, saved:S, step:S")
    args = parser.parse_args()
    # Restarts load every executable from the persistent cache (the
    # directory is $JAX_COMPILATION_CACHE_DIR) instead of compiling again.
    # (Here, not at import: pytest's --doctest-modules imports this file.)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    kind, kill_step = None, None
    if args.kill:
        kind, s = args.kill.split(":")
        kill_step = int(s)
        assert kind in ("save", "saved", "step"), kind
        assert (kill_step % EVERY == 0) == (kind != "step"), args.kill

    ts, variables = build()
    state = ts.init(variables)
    # Default options: asynchronous saves, every checkpoint kept.
    manager = ocp.CheckpointManager(os.path.abspath(args.ckpt))
    resumed = manager.latest_step()
    if resumed is not None:
        # The shapes, dtypes and shardings of a fresh state.
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        state = manager.restore(resumed, args=ocp.args.StandardRestore(target))
        assert int(state.step) == resumed, (int(state.step), resumed)
    emit(
        "start",
        resumed=resumed,
        t_s=elapsed(),
        less_bn_removed=len(ts.less_bn_report.removed),
    )

    history, saves = [], []
    for i in range(int(state.step), STEPS):
        state, metrics = ts(state, batch(i))
        step = i + 1
        history.append(
            {
                "step": step,
                "loss": np.asarray(metrics["loss"]),
                "overflow": np.asarray(metrics["overflow"]),
                "loss_scale": np.asarray(metrics["loss_scale"]),
                "frozen_groups": np.asarray(metrics["frozen_groups"]),
                "updated": np.asarray(metrics["updated"]),
            }
        )
        kill = step == kill_step
        if kill:
            emit("kill", kind=kind, step=step, t_s=elapsed())
        if step % EVERY == 0:
            # Whether the previous save is still being written (then this
            # one waits for it), and how long save() blocks.
            in_flight = manager.is_saving_in_progress()
            t = time.perf_counter()
            assert manager.save(step, args=ocp.args.StandardSave(state))
            saves.append(
                {
                    "step": step,
                    "previous_in_flight": in_flight,
                    "blocked_s": time.perf_counter() - t,
                }
            )
        if kill and kind == "saved":
            manager.wait_until_finished()
        if kill:
            # "save": the write of step's checkpoint has only begun.
            os.kill(os.getpid(), signal.SIGKILL)

    manager.wait_until_finished()  # the last save, before exiting
    manager.close()
    with open(args.out, "wb") as f:
        pickle.dump(
            {"state": flatten(state), "history": history, "saves": saves}, f
        )
    emit("done", latest=manager.latest_step(), t_s=elapsed())


if __name__ == "__main__":
    main()
