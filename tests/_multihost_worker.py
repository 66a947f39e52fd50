# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""One process of the multi-host test: ``python -m tests._multihost_worker``.

Arguments: coordinator address, number of processes, this process's id, the
output file. Each process has 4 CPU devices (XLA_FLAGS set by the test),
trains the data-parallel AdaSum step of `tests.data_parallel_test` on its
share of every batch, on a flat mesh and on a ``(node, local)`` mesh with
one node per process, and the averaging step with a sharded optimizer state
(``shard_optimizer_state=True``, with and without gradient accumulation) on
the flat mesh; process 0 writes the final params.
"""

import sys

import jax


def train(devices_per_node: int, rows: slice) -> dict:
    """Trains on a flat mesh and on a ``(node, local)`` mesh of nodes of
    `devices_per_node`, each process on its `rows` of every batch.

    Returns, per mesh ``name``: ``name:loss``, ``name:processes`` (the
    process of each device, one row per node) and ``name:<param path>``.
    The test calls it in one process on every row to get the expected
    values.
    """
    # Imported only now: a worker initializes jax.distributed first.
    import numpy as np
    import optax

    import boostax
    from tests import data_parallel_test as problem

    # A flat mesh over every process's devices, and the multi-host layout of
    # the scaling guide: one node per process, AdaSum across processes.
    flat = jax.make_mesh((len(jax.devices()),), ("data",))
    adam = optax.adam(1e-2)
    # ZeRO-1 across processes: reduce-scatter, then all-gather; with
    # accumulation, per-device accumulators reduced once per update.
    sharded = boostax.DataParallel(flat, shard_optimizer_state=True)
    steps = {
        "flat": (adam, boostax.DataParallel(flat, reduction="adasum")),
        "nodes": (
            adam,
            boostax.DataParallel(
                boostax.node_mesh(devices_per_node),
                reduction="adasum",
                local_axis="local",
            ),
        ),
        "sharded": (adam, sharded),
        "sharded_accumulation": (
            boostax.gradient_accumulation(adam, 2),
            sharded,
        ),
    }
    results = {}
    for name, (optimizer, data_parallel) in steps.items():
        mesh = data_parallel.mesh
        ts = boostax.make_train_step(
            optimizer, loss_fn=problem.loss_fn, data_parallel=data_parallel
        )
        state = ts.init(problem._params())
        for seed in range(3):
            batch = jax.tree.map(lambda a: a[rows], problem._batch(seed))
            state, metrics = ts(state, batch)
        results[f"{name}:loss"] = np.asarray(metrics["loss"])
        devices = np.atleast_2d(mesh.devices)  # (nodes, local) rows
        results[f"{name}:processes"] = np.vectorize(lambda d: d.process_index)(
            devices
        )
        for path, leaf in jax.tree_util.tree_leaves_with_path(state.params):
            key = "/".join(k.key for k in path)
            results[f"{name}:{key}"] = np.asarray(leaf)
    return results


def main(address, num_processes, process_id, out):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        address, num_processes=num_processes, process_id=process_id
    )
    import numpy as np

    from tests import data_parallel_test as problem

    share = problem.BATCH // num_processes
    rows = slice(process_id * share, (process_id + 1) * share)
    results = train(jax.local_device_count(), rows)
    if process_id == 0:
        np.savez(out, **results)
    jax.distributed.shutdown()


if __name__ == "__main__":
    address, n, i, out = sys.argv[1:]
    main(address, int(n), int(i), out)
