# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A training process whose checkpoint directory stops being writable.

    python -m tests._checkpoint_failure_worker --ckpt DIR --saves MODE

Trains a tiny least-squares step and saves its state with Orbax every 2
steps, as docs/checkpointing.md's failure-safe patterns do (``MODE`` is
``async``: asynchronous saves, the error reported and the process ended
with ``os._exit``; ``sync``: synchronous saves; ``snapshot``:
`boostax.save_snapshot`). After the first save
the checkpoint directory is replaced by a file, so every later save fails
(the tests run as root, for whom ``chmod`` does not stop writes). The
process must print the save's error and exit with status 1; the test runs
it with a timeout, because the plain pattern never exits here (Orbax
0.12.8's threads of the failed save wait for signals that never come).
"""

import argparse
import os
import shutil
import sys
import traceback

import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp

import boostax

STEPS = 8
EVERY = 2


def batch(i):
    return jnp.full((3,), float(i))


def break_directory(path):
    """Replaces the checkpoint directory by a file: no save can write."""
    shutil.rmtree(path)
    with open(path, "w") as f:
        f.write("not a directory\n")


def train(ts, state, manager, path):
    for i in range(int(state.step), STEPS):
        state, _ = ts(state, batch(i))
        if (i + 1) % EVERY == 0:
            manager.save(i + 1, args=ocp.args.StandardSave(state))
            if i + 1 == EVERY:
                manager.wait_until_finished()
                print("saved", i + 1, flush=True)
                break_directory(path)
    manager.wait_until_finished()
    return state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument(
        "--saves", choices=("async", "sync", "snapshot"), required=True
    )
    args = parser.parse_args()
    loss_fn = lambda w, b: jnp.sum((w - b) ** 2)  # noqa: E731
    ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=loss_fn)
    state = ts.init(jnp.zeros(3))
    path = os.path.abspath(args.ckpt)

    if args.saves == "snapshot":
        # boostax.save_snapshot (DimReduce's trajectory files) saves
        # synchronously: the failure is raised and nothing waits.
        boostax.save_snapshot(path, 1, {"w": state.params})
        print("saved", EVERY, flush=True)
        break_directory(path)
        boostax.save_snapshot(path, 2, {"w": state.params})
        print("finished", flush=True)
        return

    if args.saves == "sync":
        # The documented synchronous pattern: a failed save raises in
        # `save` itself, and no Orbax thread is left behind.
        options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False)
        with ocp.CheckpointManager(path, options=options) as manager:
            train(ts, state, manager, path)
        print("finished", flush=True)
        return

    # The documented asynchronous pattern.
    manager = ocp.CheckpointManager(path)
    try:
        train(ts, state, manager, path)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    manager.close()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
