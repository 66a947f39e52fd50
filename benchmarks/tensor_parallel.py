# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Flax lm1b's transformer on 8 simulated devices, by the ``"jit"`` engine:
data parallel, FSDP, and tensor parallel by logical axes on a 2 x 4
(data x model) mesh.

The model is `boostax.examples.flax_lm1b_models.TransformerLM` with
``logical_axes=True`` (its params annotated as Flax's later ``models.py``
annotates them), its layouts mapped by ``LOGICAL_AXIS_RULES``. For each
layout the step is compiled, nothing is run: the bytes each device sends
per step in the compiled program's collectives
(`boostax.measure.collective_bytes`), and the params and optimizer state each
device holds (`boostax.measure.state_bytes_per_device`), against the replicated
data-parallel step (row ``data 8``). Tests: tests/jit_engine_lm1b_test.py
(the same layouts train as one device).

    python benchmarks/tensor_parallel.py   # ~1 min
"""

from __future__ import annotations

import os
import time

import _common
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

import boostax
from boostax.examples import flax_lm1b_models as models

jax.config.update("jax_num_cpu_devices", 8)

LENGTH, ROWS, VOCAB = 64, 32, 256
# (name, mesh shape, axes, rules, FSDP)
LAYOUTS = (
    ("data 8", (8,), ("data",), None, False),
    ("data 8, FSDP", (8,), ("data",), None, True),
    ("data 2 x model 4", (2, 4), ("data", "model"), True, False),
    ("data 2 x model 4, FSDP", (2, 4), ("data", "model"), True, True),
)


def _config(quick: bool) -> models.TransformerConfig:
    return models.TransformerConfig(
        vocab_size=VOCAB,
        output_vocab_size=VOCAB,
        emb_dim=64,
        num_heads=4,
        num_layers=1 if quick else 2,
        qkv_dim=64,
        mlp_dim=256,
        max_len=LENGTH,
        logical_axes=True,
    )


def _loss(logits, targets):
    weights = (targets > 0).astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return boostax.WeightedLoss((losses * weights).sum(), weights.sum())


def measure(layout, config, boxed, batch) -> dict:
    name, shape, axes, rules, fsdp = layout
    section = {
        "engine": "jit",
        "shard_optimizer_state": fsdp,
        "shard_params": fsdp or None,
    }
    if rules:
        section["logical_axis_rules"] = models.LOGICAL_AXIS_RULES
    ts = boostax.auto_boost(
        "O0",
        {"data_parallel": section},
        optimizer=optax.adamw(3e-3),
        model=models.TransformerLM(config),
        loss=_loss,
        sample_inputs=jnp.ones((1, LENGTH), jnp.int32),
        mesh=jax.make_mesh(shape, axes, devices=jax.devices("cpu")[:8]),
        options=boostax.StepOptions(batch_keys=("inputs", "inputs")),
    )
    variables = boxed if rules else nn.meta.unbox(boxed)
    state = ts.init(variables, rng=jax.random.key(3))
    program = ts.compile_all(state, batch)[None]
    sent, counts = boostax.measure.collective_bytes(program.compiled.as_text())
    held = boostax.measure.state_bytes_per_device(state)
    return {
        "layout": name,
        "mesh": dict(zip(axes, shape, strict=True)),
        "bytes_sent_per_device": sent,
        "collectives": counts,
        "params_bytes_per_device": held["params"],
        "opt_state_bytes_per_device": held["opt_state"],
    }


def main(argv=None) -> dict:
    parser = _common.argument_parser(__doc__, None)
    args = _common.parse(parser, argv)
    start = time.perf_counter()
    config = _config(args.quick)
    boxed = models.TransformerLM(config).init(
        {"params": jax.random.key(0), "dropout": jax.random.key(1)},
        jnp.ones((1, LENGTH), jnp.int32),
    )
    tokens = np.random.default_rng(0).integers(1, VOCAB, size=(ROWS, LENGTH))
    batch = {"inputs": tokens.astype(np.int32)}
    rows = [measure(layout, config, boxed, batch) for layout in LAYOUTS]
    print("\nper device, kB: sent per step / params / optimizer state")
    for row in rows:
        print(
            f"  {row['layout']:<24} {row['bytes_sent_per_device'] / 1e3:8.1f}"
            f" {row['params_bytes_per_device'] / 1e3:8.1f}"
            f" {row['opt_state_bytes_per_device'] / 1e3:8.1f}"
        )
    result = {
        "benchmark": "tensor_parallel",
        "quick": args.quick,
        "model": {
            "num_layers": config.num_layers,
            "emb_dim": config.emb_dim,
            "mlp_dim": config.mlp_dim,
            "vocab": VOCAB,
            "length": LENGTH,
            "global_batch": ROWS,
        },
        "rules": models.LOGICAL_AXIS_RULES,
        "layouts": rows,
        "seconds": time.perf_counter() - start,
    }
    out = args.out or os.path.join(_common.RESULTS_DIR, "tensor_parallel.json")
    _common.write_result(out, result)
    return result


if __name__ == "__main__":
    main()
