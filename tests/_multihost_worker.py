# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""One process of the multi-host test: ``python -m tests._multihost_worker``.

Arguments: coordinator address, number of processes, this process's id, the
output file. Each process has 4 CPU devices (XLA_FLAGS set by the test),
trains the data-parallel AdaSum step of `tests.data_parallel_test` on its
share of every batch, and process 0 writes the final params.
"""

import sys

import jax


def main(address, num_processes, process_id, out):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        address, num_processes=num_processes, process_id=process_id
    )
    import numpy as np
    import optax

    import boostax
    from tests import data_parallel_test as problem

    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    ts = boostax.make_train_step(
        optax.adam(1e-2),
        loss_fn=problem.loss_fn,
        data_parallel=boostax.DataParallel(mesh, reduction="adasum"),
    )
    state = ts.init(problem._params())
    share = problem.BATCH // num_processes
    rows = slice(process_id * share, (process_id + 1) * share)
    for seed in range(3):
        batch = jax.tree.map(lambda a: a[rows], problem._batch(seed))
        state, metrics = ts(state, batch)
    if process_id == 0:
        np.savez(
            out,
            loss=np.asarray(metrics["loss"]),
            processes=np.array([d.process_index for d in mesh.devices.flat]),
            **{
                "/".join(k.key for k in path): np.asarray(leaf)
                for path, leaf in jax.tree_util.tree_leaves_with_path(
                    state.params
                )
            },
        )
    jax.distributed.shutdown()


if __name__ == "__main__":
    address, n, i, out = sys.argv[1:]
    main(address, int(n), int(i), out)
