# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Bytes each device sends per step: auto_boost("O2", mesh=...) vs averaging.

For each ``nodes x devices-per-node`` layout of simulated CPU devices, the
compiled data-parallel train step of the example models is read, nothing is
run:

- ``mean``: plain data parallelism, ``boostax.make_train_step(...,
  data_parallel=boostax.DataParallel(mesh))`` (one all-reduce of the
  gradients over every device, plus BatchNorm statistics);
- ``O2``: ``boostax.auto_boost("O2", {"common": {"device_number": D}},
  mesh=mesh)`` (LessBN, gradient freezing and AdaSum: gradients averaged
  within each node of D devices, the optimizer's updates AdaSum'd across
  nodes), its step with nothing frozen and, unless ``--quick``, every
  freeze depth weighted by how often the freezing sequence runs it
  (`boostax.measure.cost_report`);
- ``sharded``: the mean step with the optimizer state split over the
  devices, ``boostax.DataParallel(mesh, shard_optimizer_state=True)``
  (ZeRO-1: gradients reduce-scattered, each device updating its slice,
  new parameters all-gathered): its collective bytes against the
  all-reduce minimum 2n(P-1)/P, and the optimizer-state and argument bytes
  each device holds (the state's shards; the compiled program's
  ``memory_analysis``) against the mean step's.

``--zero1`` measures only the ZeRO-1 step, on more models and optimizers
(`measure_zero1`): the small ResNet, the Bottleneck and the bundled
transformer (`models.NNXTransformer`), with SGD-momentum and Adam, on 8
and 16 devices; beside the bytes and `memory_analysis`, it runs the
replicated and the sharded step for 3 steps from the same state and
batches and compares their params. ``--zero1 --precision bfloat16`` (or
``float16``) runs both under the O2 policy of that dtype: the sharded step
then stores the float32 params sharded and all-gathers them at the start
of the step in the dtype the forward reads each leaf in; the rows add the
bytes per collective (``bytes_by_op``), and are written to
``scaling_zero1_<dtype>.json``.

Per step and device: the bytes sent in collectives
(`boostax.measure.collective_bytes` on the compiled HLO), split by the replica
groups (source-target pairs for a ``collective-permute``) into collectives
within a node, collectives across
nodes (one device per node in each group) and collectives spanning nodes
with several devices of a node in a group (a flat all-reduce: how many of
its bytes leave a node depends on the algorithm NCCL or the TPU runtime
picks). Devices ``i`` and ``j`` share a node when ``i // D == j // D``.

The devices are simulated on the host CPU (the script asks JAX for 16): the
bytes come from the compiled HLO and hold for any backend that compiles the
same collectives; no time is measured, since simulated devices have no
network.

    python benchmarks/scaling.py            # full run, writes results/
    python benchmarks/scaling.py --quick    # smoke test (the test suite)
    python benchmarks/scaling.py --zero1    # ~2 min, scaling_zero1.json
    python benchmarks/scaling.py --zero1 --quick
    python benchmarks/scaling.py --zero1 --precision bfloat16
"""

from __future__ import annotations

import functools
import os
import re
import time
import warnings

import _common
import jax
import numpy as np
import optax
from flax import nnx

import boostax
from boostax.examples import models, speedup, text

# Before any backend use: 16 host CPU devices, whatever XLA_FLAGS says.
NUM_DEVICES = 16
jax.config.update("jax_num_cpu_devices", NUM_DEVICES)

# (nodes, devices per node): one 8-device host cut into nodes by
# `common.device_number`, and two or four hosts of 16 devices in all.
MESHES = ((1, 8), (2, 4), (4, 2), (8, 1), (2, 8), (4, 4))
QUICK_MESHES = ((2, 4),)

# --------------------------------------------------------------------------
# Models.


# The example models: (workload, quick) of `boostax.examples.speedup`.
_WORKLOADS = {
    "resnet_small": ("digits", True),  # the demo's quick ResNet, 8x8x1
    "bottleneck": ("digits32", False),  # the speed benchmark's, 32x32x3
}


def _model(name: str):
    """``(model, input shape of one example, O2's freezing groups)`` of the
    workload (the small ResNet has 7 parameter chunks: 10 groups would
    freeze nothing)."""
    workload_name, quick = _WORKLOADS[name]
    workload = speedup.WORKLOADS[workload_name](quick=quick)
    return (
        workload.model,
        workload.digits.x_train.shape[1:],
        workload.param_groups,
    )


def _describe(model, shape) -> str:
    return f"{_common.describe(model)} on {'x'.join(map(str, shape))}"


def _variables(model, shape):
    """Variables of the model's shapes, as fresh as an init's (zeros, and
    BatchNorm scales and variances one): the bytes do not depend on the
    values, and tracing is cheaper than compiling the init. (Trained-looking
    BatchNorms would be folded by LessBN, and an FN head over them refused.)
    """
    abstract = jax.eval_shape(
        lambda: model.init(
            jax.random.PRNGKey(0), np.zeros((1, *shape), np.float32)
        )
    )

    def fresh(path, s):
        one = jax.tree_util.keystr(path[-1:]) in ("['scale']", "['var']")
        return (np.ones if one else np.zeros)(s.shape, s.dtype)

    return jax.tree_util.tree_map_with_path(fresh, abstract)


def _nbytes(tree) -> int:
    return sum(
        int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
        for x in jax.tree.leaves(tree)
    )


def _bytes_on_first_device(tree) -> int:
    """Bytes of `tree`'s arrays held by the lowest-numbered device."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        first = min(leaf.sharding.device_set, key=lambda d: d.id)
        total += sum(
            s.data.nbytes for s in leaf.addressable_shards if s.device == first
        )
    return total


# --------------------------------------------------------------------------
# Collective bytes by where they go.

_PAIRS = re.compile(r"source_target_pairs=\{(\{\d+,\d+\}(?:,\{\d+,\d+\})*)\}")


def split_bytes(hlo: str, num_devices: int, per_node: int) -> dict:
    """Bytes per device in the collectives of `hlo`, by where they go.

    Each collective's bytes are `boostax.measure.collective_bytes` of its
    line, so the parts add up to `boostax.measure.collective_bytes(hlo)`. A
    ``collective-permute``'s are split by the share of its source-target
    pairs within and across nodes.

    Returns:
      ``{"total", "within_node", "across_nodes", "spanning_nodes",
      "collectives"}`` (bytes per device; ``{op: count}``).
    """
    parts = {"within_node": 0.0, "across_nodes": 0.0, "spanning_nodes": 0.0}
    collectives = {}
    for line in hlo.splitlines():
        sent, counts = boostax.measure.collective_bytes(line)
        if not counts:
            continue
        for op, n in counts.items():
            collectives[op] = collectives.get(op, 0) + n
        pairs = _PAIRS.search(line)
        if pairs:
            pairs = re.findall(r"\{(\d+),(\d+)\}", pairs[1])
            pairs = [(int(a), int(b)) for a, b in pairs]
            across = sum(a // per_node != b // per_node for a, b in pairs)
            parts["across_nodes"] += sent * across / len(pairs)
            parts["within_node"] += sent * (len(pairs) - across) / len(pairs)
            continue
        groups = boostax.measure.replica_groups(line) or [range(num_devices)]
        nodes = [[d // per_node for d in g] for g in groups]
        if all(len(set(g)) <= 1 for g in nodes):
            parts["within_node"] += sent
        elif all(len(set(g)) == len(g) for g in nodes):
            parts["across_nodes"] += sent
        else:
            parts["spanning_nodes"] += sent
    total = boostax.measure.collective_bytes(hlo)[0]
    return {"total": total, **parts, "collectives": collectives}


# --------------------------------------------------------------------------
# One layout.


def measure(name: str, nodes: int, per_node: int, args) -> dict:
    model, shape, param_groups = _model(name)
    devices = nodes * per_node
    mesh = jax.make_mesh(
        (devices,), ("data",), devices=jax.devices("cpu")[:devices]
    )
    batch = (
        np.zeros((args.batch_size, *shape), np.float32),
        np.zeros((args.batch_size,), np.int32),
    )
    variables = _variables(model, shape)
    optimizer = optax.sgd(args.learning_rate, momentum=0.9)
    start = time.perf_counter()

    plain = boostax.make_train_step(
        optimizer,
        model=model,
        loss=models.cross_entropy,
        data_parallel=boostax.DataParallel(mesh),
    )
    plain_state = plain.init(variables)
    plain_compiled = plain.lower(plain_state, batch).compile()
    sharded = _sharded(
        optimizer, model, mesh, variables, batch, plain_state, plain_compiled
    )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = {
            "common": {"device_number": per_node},
            "grad_freeze": {"param_groups": param_groups},
        }
        boost = functools.partial(
            boostax.auto_boost,
            "O2",
            optimizer=optimizer,
            model=model,
            loss=models.cross_entropy,
            sample_inputs=batch[0][:1],
            mesh=mesh,
        )
        boosted = boost(config)
        state = boosted.init(variables)
    dp = boosted.data_parallel
    o2 = {
        "algorithms": [
            a
            for a in ("less_bn", "grad_freeze", "adasum")
            if boosted.config.is_enabled(a)
        ],
        "reduction": dp.reduction,
        "nodes_adasum": dp.num_nodes if dp.reduction == "adasum" else None,
        "param_groups": param_groups,
        "warnings": [str(w.message) for w in caught],
        "param_bytes": _nbytes(state.params),
    }
    if nodes > 1 and per_node > 1:
        o2["sharded"] = _o2_sharded(boost, config, variables, batch, per_node)
        o2["opt_state_bytes_per_device"] = _bytes_on_first_device(
            state.opt_state
        )
    if args.quick:
        first = boosted.lower(state, batch).compile()
        o2["nothing_frozen"] = split_bytes(first.as_text(), devices, per_node)
    else:
        report = boostax.measure.cost_report(
            boosted, state, batch, baseline=plain_compiled
        )
        compiled = boosted.compile_all(state, batch)
        by_depth = {
            ("step" if k is None else f"depth {k}"): split_bytes(
                c.as_text(), devices, per_node
            )
            for k, c in sorted(compiled.items(), key=lambda kv: kv[0] or 0)
        }
        o2["nothing_frozen"] = by_depth["depth 0"]
        o2["by_depth"] = by_depth
        o2["shares"] = report.shares
        o2["weighted_collective_bytes"] = report.weighted["collective_bytes"]
        o2["weighted_over_plain"] = report.ratios["collective_bytes"]
    return {
        "model": _describe(model, shape),
        "nodes": nodes,
        "devices_per_node": per_node,
        "devices": devices,
        "global_batch": args.batch_size,
        "param_bytes": _nbytes(variables["params"]),
        "mean": split_bytes(plain_compiled.as_text(), devices, per_node),
        "O2": o2,
        "sharded": {
            **sharded,
            "collectives": split_bytes(sharded.pop("hlo"), devices, per_node),
        },
        "seconds": time.perf_counter() - start,
    }


def _sharded(optimizer, model, mesh, variables, batch, plain_state, plain):
    """The mean step with a sharded optimizer state, against `plain`'s."""
    step = boostax.make_train_step(
        optimizer,
        model=model,
        loss=models.cross_entropy,
        data_parallel=boostax.DataParallel(mesh, shard_optimizer_state=True),
    )
    state = step.init(variables)
    compiled = step.lower(state, batch).compile()
    devices = mesh.devices.size
    param_bytes = _nbytes(variables["params"])
    return {
        "hlo": compiled.as_text(),
        "all_reduce_minimum": 2 * param_bytes * (devices - 1) / devices,
        "opt_state_bytes": _nbytes(state.opt_state),
        "opt_state_bytes_per_device": _bytes_on_first_device(state.opt_state),
        "mean_opt_state_bytes_per_device": _bytes_on_first_device(
            plain_state.opt_state
        ),
        "argument_bytes_per_device": (
            compiled.memory_analysis().argument_size_in_bytes
        ),
        "mean_argument_bytes_per_device": (
            plain.memory_analysis().argument_size_in_bytes
        ),
    }


def _o2_sharded(boost, config, variables, batch, per_node: int) -> dict:
    """O2 with each node's optimizer state split over its devices
    (``shard_optimizer_state=True``): its first program's bytes sent (as
    ``O2``'s ``nothing_frozen``) and the state each device holds.

    LessBN's gradient centralization is on, as in the replicated O2 row: the
    centralized kernels are split along their output axis (the axis the
    centralization does not average over)."""
    step = boost({**config, "data_parallel": {"shard_optimizer_state": True}})
    state = step.init(variables)
    compiled = step.lower(state, batch).compile()
    return {
        **split_bytes(
            compiled.as_text(), step.data_parallel.num_devices, per_node
        ),
        "opt_state_bytes_per_device": _bytes_on_first_device(state.opt_state),
    }


# --------------------------------------------------------------------------


def _kb(value: float) -> str:
    return f"{value / 1e3:8.1f}"


def print_table(rows: list[dict]) -> None:
    print(
        "\nkB sent per device per step (compiled HLO; within / across / "
        "spanning nodes)"
    )
    print(
        f"  {'model':<12} {'N x D':>6} {'params':>8} | {'mean':>8} | "
        f"{'O2':>8} {'within':>8} {'across':>8} {'span':>8} "
        f"{'/mean':>6} {'weighted':>8}"
    )
    for r in rows:
        m, o = r["mean"], r["O2"]
        first = o["nothing_frozen"]
        weighted = o.get("weighted_collective_bytes")
        print(
            f"  {r['name']:<12} {r['nodes']:>2} x {r['devices_per_node']:<2}"
            f"{_kb(r['param_bytes'])} | {_kb(m['total'])} | "
            f"{_kb(first['total'])} {_kb(first['within_node'])} "
            f"{_kb(first['across_nodes'])} {_kb(first['spanning_nodes'])} "
            f"{first['total'] / m['total']:>6.2f} "
            f"{'' if weighted is None else _kb(weighted):>8}"
        )


def print_sharded_table(rows: list[dict]) -> None:
    print(
        "\nSharded optimizer state (ZeRO-1) vs the mean step, per device: "
        "kB sent, optimizer state, step arguments"
    )
    print(
        f"  {'model':<12} {'P':>3} | {'mean':>8} {'sharded':>8} "
        f"{'2n(P-1)/P':>9} | {'state':>8} {'sharded':>8} | "
        f"{'args':>8} {'sharded':>8}"
    )
    for r in rows:
        s = r["sharded"]
        print(
            f"  {r['name']:<12} {r['devices']:>3} |"
            f"{_kb(r['mean']['total'])} {_kb(s['collectives']['total'])} "
            f"{_kb(s['all_reduce_minimum']):>9} |"
            f"{_kb(s['mean_opt_state_bytes_per_device'])} "
            f"{_kb(s['opt_state_bytes_per_device'])} |"
            f"{_kb(s['mean_argument_bytes_per_device'])} "
            f"{_kb(s['argument_bytes_per_device'])}"
        )


def print_o2_sharded_table(rows: list[dict]) -> None:
    print(
        "\nO2 with the optimizer state split within each node, per device "
        "(first program): kB sent, optimizer state"
    )
    print(
        f"  {'model':<12} {'N x D':>6} | {'mean':>8} {'O2':>8} "
        f"{'sharded':>8} {'/mean':>6} | {'state':>8} {'sharded':>8}"
    )
    for r in rows:
        o = r["O2"]
        if "sharded" not in o:
            continue
        layout = (
            f"  {r['name']:<12} {r['nodes']:>2} x {r['devices_per_node']:<2}|"
        )
        s, mean = o["sharded"], r["mean"]["total"]
        print(
            f"{layout}"
            f"{_kb(mean)} {_kb(o['nothing_frozen']['total'])} "
            f"{_kb(s['total'])} {s['total'] / mean:>6.2f} |"
            f"{_kb(o['opt_state_bytes_per_device'])} "
            f"{_kb(s['opt_state_bytes_per_device'])}"
        )


# --------------------------------------------------------------------------
# ZeRO-1 alone (``--zero1``): more models and optimizers, and the params.

ZERO1_MODELS = ("resnet_small", "bottleneck", "transformer")
ZERO1_OPTIMIZERS = {
    "sgd_momentum": lambda: optax.sgd(0.05, momentum=0.9),
    "adam": lambda: optax.adam(1e-3),
    # Optimizers that read whole leaves: the "shard_map" engine refuses
    # them sharded, the "jit" one shards them (`--jit`).
    "clipped_adamw": lambda: optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(1e-3)
    ),
    "adafactor": lambda: optax.adafactor(1e-3),
}
# With --jit, the arms of the "jit" engine beside the "shard_map" ones:
# (name, shard_optimizer_state, shard_params).
JIT_ARMS = (
    ("jit_replicated", False, None),
    ("jit_sharded", True, None),
    ("jit_fsdp", True, True),
)
ZERO1_DEVICES = (8, 16)
# Steps run from the same initial state and batches by the replicated and
# the sharded step, and the tolerance their params are held to.
ZERO1_STEPS = 3
ZERO1_RTOL, ZERO1_ATOL = 1e-5, 1e-6
# `models.NNXTransformer` of `boostax.examples.language_model.Workload`'s
# sizes (its benchmark's model; windows of 64 bytes).
TRANSFORMER = {"context": 64, "d_model": 64, "num_heads": 4, "num_blocks": 2}


def _zero1_model(name: str, batch_size: int):
    """``(model, init variables or module, batches, description)``: the
    model initialised from seed 0 and `ZERO1_STEPS` random batches."""
    rng = np.random.default_rng(0)
    if name == "transformer":
        model = models.NNXTransformer(
            vocab_size=text.VOCAB_SIZE, **TRANSFORMER, rngs=nnx.Rngs(0)
        )
        shape = (batch_size, TRANSFORMER["context"])
        batches = [
            (
                rng.integers(0, text.VOCAB_SIZE, shape, dtype=np.int32),
                rng.integers(0, text.VOCAB_SIZE, shape, dtype=np.int32),
            )
            for _ in range(ZERO1_STEPS)
        ]
        sizes = ", ".join(f"{k} {v}" for k, v in TRANSFORMER.items())
        return model, model, batches, f"NNXTransformer ({sizes})"
    model, shape, _ = _model(name)
    batches = [
        (
            rng.normal(size=(batch_size, *shape)).astype(np.float32),
            rng.integers(0, 10, batch_size, dtype=np.int32),
        )
        for _ in range(ZERO1_STEPS)
    ]
    init = jax.jit(model.init)(jax.random.PRNGKey(0), batches[0][0][:1])
    return model, init, batches, _describe(model, shape)


def _zero1_step(
    optimizer,
    model,
    mesh,
    init,
    batch,
    shard: bool,
    precision=None,
    engine: str = "shard_map",
    shard_params: bool | None = None,
):
    """The data-parallel step, its compiled program and initial state."""
    step = boostax.make_train_step(
        optimizer,
        model=model,
        loss=models.cross_entropy,
        data_parallel=boostax.DataParallel(
            mesh,
            shard_optimizer_state=shard,
            shard_params=shard_params,
            engine=engine,
        ),
        precision=precision,
    )
    state = step.init(init)
    return step, step.compile_all(state, batch)[None], state


def _memory(compiled) -> dict:
    memory = compiled.memory_analysis()
    return {
        "argument": memory.argument_size_in_bytes,
        "output": memory.output_size_in_bytes,
        "temp": memory.temp_size_in_bytes,
    }


def _bytes_by_op(hlo: str) -> dict[str, float]:
    """``{collective: bytes per device}`` of `hlo`."""
    by_op: dict[str, float] = {}
    for line in hlo.splitlines():
        sent, counts = boostax.measure.collective_bytes(line)
        for op in counts:
            by_op[op] = by_op.get(op, 0.0) + sent
    return by_op


def measure_zero1(name: str, optimizer_name: str, devices: int, args) -> dict:
    """One ZeRO-1 row: the replicated and the sharded step's compiled
    programs and states, and their params after `ZERO1_STEPS` steps."""
    model, init, batches, description = _zero1_model(name, args.batch_size)
    mesh = jax.make_mesh(
        (devices,), ("data",), devices=jax.devices("cpu")[:devices]
    )
    start = time.perf_counter()
    arms = {}
    arm_settings = [("replicated", False, None, "shard_map")]
    arm_settings.append(("sharded", True, None, "shard_map"))
    if args.jit:
        arm_settings += [(*arm, "jit") for arm in JIT_ARMS]
    for arm, shard, shard_params, engine in arm_settings:
        try:
            step, compiled, state = _zero1_step(
                ZERO1_OPTIMIZERS[optimizer_name](),
                model,
                mesh,
                init,
                batches[0],
                shard,
                _zero1_policy(args.precision),
                engine,
                shard_params,
            )
        except ValueError as refused:  # the shard_map engine's refusals
            if engine != "shard_map" or not shard:
                raise
            arms[arm] = {"refused": str(refused)}
            continue
        per_device = boostax.measure.state_bytes_per_device(state)
        initial = jax.device_get(state.params)
        for batch in batches:
            state, _ = step(state, batch)
        arms[arm] = {
            "collectives": split_bytes(compiled.as_text(), devices, devices),
            "bytes_by_op": _bytes_by_op(compiled.as_text()),
            "opt_state_bytes_per_device": per_device["opt_state"],
            "state_bytes_per_device": per_device,
            "memory_analysis": _memory(compiled),
            "params": jax.device_get(state.params),
            "params_max_change": max(
                float(np.max(np.abs(a - b)))
                for a, b in zip(
                    jax.tree.leaves(jax.device_get(state.params)),
                    jax.tree.leaves(initial),
                    strict=True,
                )
            ),
        }
    replicated = arms["replicated"]
    reference = jax.tree.leaves(replicated.pop("params"))
    param_bytes = _nbytes(reference)
    for other in arms.values():
        if "params" in other:
            leaves = jax.tree.leaves(other.pop("params"))
            other["params_max_abs_difference"] = max(
                float(np.max(np.abs(a - b)))
                for a, b in zip(leaves, reference, strict=True)
            )
            other["params_close"] = all(
                np.allclose(a, b, rtol=ZERO1_RTOL, atol=ZERO1_ATOL)
                for a, b in zip(leaves, reference, strict=True)
            )
    sharded = arms["sharded"]
    return {
        "name": name,
        "model": description,
        "optimizer": optimizer_name,
        "precision": args.precision,
        "devices": devices,
        "global_batch": args.batch_size,
        "param_bytes": param_bytes,
        "all_reduce_minimum": 2 * param_bytes * (devices - 1) / devices,
        **arms,
        "steps": ZERO1_STEPS,
        "params_max_abs_difference": sharded.get("params_max_abs_difference"),
        "params_close": sharded.get("params_close"),
        "tolerance": {"rtol": ZERO1_RTOL, "atol": ZERO1_ATOL},
        "seconds": time.perf_counter() - start,
    }


def _zero1_policy(precision: str):
    """The O2 policy of `precision`, ``None`` for float32."""
    if precision == "float32":
        return None
    return boostax.precision_policy("O2", precision)


def print_zero1_table(rows: list[dict]) -> None:
    print(
        "\nEach arm vs the replicated step, per device: kB sent (compiled "
        "HLO), params and optimizer state held, memory_analysis arguments "
        f"+ temps; params after {ZERO1_STEPS} steps"
    )
    print(
        f"  {'model':<12} {'optimizer':<13} {'P':>3} {'arm':<15}| "
        f"{'sent':>8} {'params':>8} {'state':>8} {'memory':>8} | "
        f"{'max diff':>8}"
    )
    for r in rows:
        for arm in ("replicated", "sharded", *(a[0] for a in JIT_ARMS)):
            if arm not in r:
                continue
            a = r[arm]
            head = (
                f"  {r['name']:<12} {r['optimizer']:<13} {r['devices']:>3} "
                f"{arm:<15}|"
            )
            if "refused" in a:
                print(f"{head} refused: {a['refused'][:60]}...")
                continue
            memory = (
                a["memory_analysis"]["argument"] + a["memory_analysis"]["temp"]
            )
            diff = a.get("params_max_abs_difference", 0.0)
            print(
                f"{head}{_kb(a['collectives']['total'])}"
                f"{_kb(a['state_bytes_per_device']['params'])}"
                f"{_kb(a['opt_state_bytes_per_device'])}{_kb(memory)} | "
                f"{diff:8.1e}"
            )


def main_zero1(args) -> dict:
    """``--zero1``: the ZeRO-1 rows only, to their own file."""
    start = time.perf_counter()
    rows = []
    for name in args.models.split(","):
        for optimizer_name in args.optimizers.split(","):
            for devices in map(int, args.devices.split(",")):
                print(
                    f"compiling {name} {optimizer_name} on {devices}",
                    flush=True,
                )
                rows.append(measure_zero1(name, optimizer_name, devices, args))
    print_zero1_table(rows)
    return _write_result("scaling_zero1", rows, start, args)


def _write_result(benchmark: str, rows, start: float, args) -> dict:
    """The rows, the simulated devices and the seconds since `start`,
    written to ``args.out``."""
    cpus = len(jax.devices("cpu"))
    result = {
        "benchmark": benchmark,
        "quick": args.quick,
        "devices": f"{cpus} x {jax.devices('cpu')[0].device_kind} (simulated)",
        "configurations": rows,
        "seconds": time.perf_counter() - start,
    }
    _common.write_result(args.out, result)
    return result


def _check_choices(flag: str, value: str, allowed) -> None:
    unknown = [v for v in value.split(",") if v not in allowed]
    if unknown:
        raise ValueError(
            f"{flag}: each of {list(allowed)}, got {value!r} "
            f"({', '.join(unknown)} unknown)."
        )


def main(argv=None) -> dict:
    parser = _common.argument_parser(__doc__, None, learning_rate=0.05)
    parser.add_argument(
        "--zero1",
        action="store_true",
        help="only the ZeRO-1 rows (--models of ZERO1_MODELS, --optimizers,"
        " --devices), written to results/scaling_zero1.json",
    )
    parser.add_argument(
        "--jit",
        action="store_true",
        help="with --zero1: also the engine='jit' arms (replicated, ZeRO-1, "
        "FSDP), written to results/scaling_zero1_jit.json",
    )
    parser.add_argument(
        "--models",
        default=None,
        help="example models (default: resnet_small,bottleneck; with "
        f"--zero1 {','.join(ZERO1_MODELS)})",
    )
    parser.add_argument(
        "--meshes",
        default=",".join(f"{n}x{d}" for n, d in MESHES),
        help="NODESxDEVICES_PER_NODE layouts (at most 16 devices)",
    )
    parser.add_argument(
        "--optimizers",
        default=",".join(ZERO1_OPTIMIZERS),
        help="with --zero1: of %(default)s",
    )
    parser.add_argument(
        "--devices",
        default=",".join(map(str, ZERO1_DEVICES)),
        help="with --zero1: device counts (at most 16)",
    )
    parser.add_argument(
        "--precision",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="with --zero1: the O2 policy's compute dtype (float32: none)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="global batch (shapes only; the bytes do not depend on it)",
    )
    args = _common.parse(
        parser,
        argv,
        models=None,
        meshes=",".join(f"{n}x{d}" for n, d in QUICK_MESHES),
        optimizers="adam",
        devices="8",
    )
    stem = "scaling_zero1" if args.zero1 else "scaling"
    if args.zero1 and args.precision != "float32":
        stem += f"_{args.precision}"
    if args.zero1 and args.jit:
        stem += "_jit"
    args.out = args.out or os.path.join(_common.RESULTS_DIR, f"{stem}.json")
    cpus = len(jax.devices("cpu"))
    if args.zero1:
        if args.models is None:
            quick = "resnet_small,transformer"
            args.models = quick if args.quick else ",".join(ZERO1_MODELS)
        _check_choices("--models", args.models, ZERO1_MODELS)
        _check_choices("--optimizers", args.optimizers, ZERO1_OPTIMIZERS)
        for devices in map(int, args.devices.split(",")):
            if not 1 < devices <= cpus or args.batch_size % devices:
                raise ValueError(
                    f"--devices {devices}: needs 2 to {cpus} devices and a "
                    f"global batch ({args.batch_size}) divisible by them."
                )
        return main_zero1(args)
    if args.models is None:
        args.models = (
            "resnet_small" if args.quick else "resnet_small,bottleneck"
        )
    _check_choices("--models", args.models, _WORKLOADS)
    meshes = [tuple(map(int, m.split("x"))) for m in args.meshes.split(",")]
    for nodes, per_node in meshes:
        if nodes * per_node > cpus or args.batch_size % (nodes * per_node):
            raise ValueError(
                f"Layout {nodes}x{per_node}: needs at most {cpus} devices "
                f"and a global batch ({args.batch_size}) divisible by them."
            )

    start = time.perf_counter()
    rows = []
    for name in args.models.split(","):
        for nodes, per_node in meshes:
            print(f"compiling {name} on {nodes} x {per_node}", flush=True)
            rows.append({"name": name, **measure(name, nodes, per_node, args)})
    print_table(rows)
    print_sharded_table(rows)
    print_o2_sharded_table(rows)
    return _write_result("scaling", rows, start, args)


if __name__ == "__main__":
    main()
