# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.distributed.adasum`."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import boostax
from boostax._src.distributed.adasum import (
    AdaSumState,
    adasum,
    adasum_gradients,
    adasum_pair,
    adasum_reduce,
    hierarchical_adasum_reduce,
)

EPS = 1e-12
BF16 = jnp.bfloat16

# Odd sizes, a scalar, a 1-element leaf and a bf16 leaf.
SHAPES = {
    "w": ((3, 5), np.float32),
    "b": ((7,), np.float32),
    "s": ((), np.float32),
    "one": ((1,), np.float32),
    "h": ((2, 3, 4), BF16),
}


# --------------------------------------------------------------------------
# Float64 NumPy reference.


def _f64(tree):
    return jax.tree.map(lambda x: np.asarray(x).astype(np.float64), tree)


def _np_pair(a, b, eps=EPS):
    def leaf(x, y):
        if x.size <= 1:
            return (x + y) / 2
        v0 = np.sum(x * y) + eps
        v1 = np.sum(x * x) + eps
        v2 = np.sum(y * y) + eps
        return (1 - v0 / (2 * v1)) * x + (1 - v0 / (2 * v2)) * y

    return jax.tree.map(leaf, _f64(a), _f64(b))


def _reference_tree(trees, eps=EPS):
    """Remainder folded in first, then the pairwise binary tree.

    Scalars and 1-element leaves: the mean over all trees.
    """
    trees = [_f64(t) for t in trees]
    p = len(trees)
    q = 1 << (p.bit_length() - 1)
    level = list(trees[:q])
    for k in range(p - q):
        level[k] = _np_pair(level[k], trees[q + k], eps)
    while len(level) > 1:
        level = [
            _np_pair(level[i], level[i + 1], eps)
            for i in range(0, len(level), 2)
        ]
    mean = jax.tree.map(lambda *xs: np.mean(np.stack(xs), axis=0), *trees)
    return jax.tree.map(lambda r, m: m if r.size <= 1 else r, level[0], mean)


# --------------------------------------------------------------------------
# Helpers.


def _random_tree(rng, common=None):
    """A tree of normal values, plus `common` (to correlate the devices)."""
    tree = {
        k: rng.normal(size=shape).astype(np.float64)
        for k, (shape, _) in SHAPES.items()
    }
    if common is not None:
        tree = jax.tree.map(lambda x, c: x + c, tree, common)
    return {k: tree[k].astype(SHAPES[k][1]) for k in SHAPES}


def _device_trees(n, seed=0):
    rng = np.random.default_rng(seed)
    common = {
        k: 2.0 * rng.normal(size=shape) for k, (shape, _) in SHAPES.items()
    }
    return [_random_tree(rng, common) for _ in range(n)]


def _stack(trees):
    return jax.tree.map(lambda *xs: np.stack(xs), *trees)


def _rows(stacked, i):
    return jax.tree.map(lambda x: np.asarray(x)[i], stacked)


def _first(tree):
    return jax.tree.map(lambda x: x[0], tree)


def _lead(tree):
    return jax.tree.map(lambda x: x[None], tree)


def _mesh(n):
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def _put(mesh, tree, spec):
    return jax.device_put(tree, NamedSharding(mesh, spec))


@functools.cache
def _reducer(n, out_spec="data"):
    """Each device's `adasum_reduce` result, stacked (or replicated)."""
    mesh = _mesh(n)
    if out_spec is None:
        fn = lambda g: adasum_reduce(_first(g), "data")
    else:
        fn = lambda g: _lead(adasum_reduce(_first(g), "data"))
    spec = P("data") if out_spec else P()
    return mesh, jax.jit(
        jax.shard_map(fn, mesh=mesh, in_specs=P("data"), out_specs=spec)
    )


def _reduce(trees):
    mesh, fn = _reducer(len(trees))
    return fn(_put(mesh, _stack(trees), P("data")))


def _tolerances(dtype, ref, atol):
    scale = float(np.max(np.abs(ref)))
    if dtype == BF16:
        return dict(rtol=1e-2, atol=1e-2 * scale + atol)
    return dict(rtol=1e-5, atol=1e-6 * scale + atol)


def assert_tree_close(test, actual, expected, atol=0.0):
    """Leaf-wise, to 1e-5 (f32) or 1e-2 (bf16) relative, plus `atol`."""
    test.assertEqual(jax.tree.structure(actual), jax.tree.structure(expected))
    for path, a in jax.tree_util.tree_leaves_with_path(actual):
        e = functools.reduce(lambda t, k: t[k.key], path, expected)
        np.testing.assert_allclose(
            np.asarray(a).astype(np.float64),
            e,
            err_msg=jax.tree_util.keystr(path),
            **_tolerances(np.asarray(a).dtype, e, atol),
        )


def _max_rel_err(actual, expected):
    """max over f32 leaves of |actual - expected|_inf / |expected|_inf."""
    errs = [
        float(np.max(np.abs(np.asarray(a, np.float64) - e)))
        / max(float(np.max(np.abs(e))), 1e-30)
        for a, e in zip(
            jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True
        )
        if np.asarray(a).dtype == np.float32
    ]
    return max(errs)


# --------------------------------------------------------------------------
# adasum_pair.


class AdaSumPairTest(parameterized.TestCase):
    def test_orthogonal_is_sum(self):
        a = {"x": jnp.array([1.0, 0.0, 0.0]), "y": jnp.array([[0.0, 2.0]])}
        b = {"x": jnp.array([0.0, 3.0, 0.0]), "y": jnp.array([[5.0, 0.0]])}
        out = jax.jit(adasum_pair)(a, b)
        np.testing.assert_allclose(out["x"], [1.0, 3.0, 0.0], rtol=1e-7)
        np.testing.assert_allclose(out["y"], [[5.0, 2.0]], rtol=1e-7)

    def test_identical_is_mean(self):
        a = {"x": jnp.array([1.0, -2.0, 0.5]), "y": jnp.ones((2, 3))}
        out = jax.jit(adasum_pair)(a, a)
        np.testing.assert_array_equal(out["x"], a["x"])
        np.testing.assert_array_equal(out["y"], a["y"])

    def test_per_leaf_coefficients(self):
        rng = np.random.default_rng(1)
        a = {k: rng.normal(size=s) for k, s in [("u", (4, 3)), ("v", (5,))]}
        b = {k: v + rng.normal(size=v.shape) for k, v in a.items()}
        f32 = lambda t: jax.tree.map(lambda x: x.astype(np.float32), t)
        out = jax.jit(adasum_pair)(f32(a), f32(b))
        ref = _np_pair(f32(a), f32(b))
        for k in a:
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-6)
        # Per leaf, not over the whole tree: the coefficients differ.
        whole = _np_pair(
            {"all": np.concatenate([f32(a)["u"].ravel(), f32(a)["v"]])},
            {"all": np.concatenate([f32(b)["u"].ravel(), f32(b)["v"]])},
        )["all"]
        self.assertGreater(
            np.max(np.abs(whole[:12] - np.ravel(ref["u"]))), 1e-3
        )

    def test_bf16_dots_in_float32(self):
        # 4096 terms: a bf16 dot product would be far off; float32 is not.
        rng = np.random.default_rng(2)
        a = jnp.asarray(rng.normal(size=4096) + 1.0, BF16)
        b = jnp.asarray(rng.normal(size=4096) + 1.0, BF16)
        out = jax.jit(adasum_pair)(a, b)
        self.assertEqual(out.dtype, BF16)
        ref = _np_pair(a, b)  # float64 on the bf16-rounded values
        np.testing.assert_allclose(
            np.asarray(out, np.float64), ref, rtol=1e-2, atol=1e-2
        )

    def test_scalars_averaged(self):
        a = {"s": jnp.float32(1.0), "one": jnp.array([4.0])}
        b = {"s": jnp.float32(3.0), "one": jnp.array([-2.0])}
        out = jax.jit(adasum_pair)(a, b)
        np.testing.assert_array_equal(out["s"], 2.0)
        np.testing.assert_array_equal(out["one"], [1.0])

    def test_zero_vectors(self):
        z, x = jnp.zeros(3), jnp.array([1.0, 2.0, 3.0])
        np.testing.assert_array_equal(adasum_pair(z, z), z)
        np.testing.assert_allclose(adasum_pair(z, x), x, rtol=1e-7)


# --------------------------------------------------------------------------
# adasum_reduce.


class AdaSumReduceTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("p8", 8), ("p6", 6), ("p5", 5), ("p3", 3), ("p2", 2), ("p1", 1)
    )
    def test_matches_reference(self, n):
        trees = _device_trees(n)
        out = _reduce(trees)
        ref = _reference_tree(trees)
        for i in range(n):
            assert_tree_close(self, _rows(out, i), ref)
            # Every device holds the same bits.
            jax.tree.map(
                np.testing.assert_array_equal, _rows(out, i), _rows(out, 0)
            )
        for k, (shape, dtype) in SHAPES.items():
            self.assertEqual(out[k].shape, (n, *shape))
            self.assertEqual(out[k].dtype, dtype)
        self.assertLess(_max_rel_err(_rows(out, 0), ref), 1e-5)

    @parameterized.named_parameters(("p8", 8), ("p6", 6))
    def test_orthogonal_is_sum(self, n):
        trees = []
        for i in range(n):
            tree = {}
            for k, (shape, dtype) in SHAPES.items():
                x = np.zeros(int(np.prod(shape)))
                if x.size > 1:
                    x[i % x.size] = i + 1.0 if i < x.size else 0.0
                else:
                    x[:] = i
                tree[k] = x.reshape(shape).astype(dtype)
            trees.append(tree)
        out = _rows(_reduce(trees), 0)
        for k in SHAPES:
            stacked = np.stack([np.asarray(t[k], np.float64) for t in trees])
            want = stacked.mean(0) if stacked[0].size <= 1 else stacked.sum(0)
            np.testing.assert_allclose(
                np.asarray(out[k], np.float64), want, rtol=1e-6, err_msg=k
            )

    @parameterized.named_parameters(("p8", 8), ("p6", 6))
    def test_identical_is_itself(self, n):
        tree = _device_trees(1, seed=3)[0]
        out = _rows(_reduce([tree] * n), 0)
        for k, x in tree.items():
            if x.size > 1:  # bit for bit: both coefficients are exactly 1/2
                np.testing.assert_array_equal(out[k], x, err_msg=k)
            else:  # a pmean: x * n / n
                np.testing.assert_allclose(out[k], x, rtol=1e-6, err_msg=k)

    def test_replicated_out_specs(self):
        # The result is invariant over the axis: out_specs=P() type-checks.
        trees = _device_trees(6, seed=4)
        mesh, fn = _reducer(6, out_spec=None)
        out = fn(_put(mesh, _stack(trees), P("data")))
        assert_tree_close(self, out, _reference_tree(trees))

    def test_tuple_axis_is_mesh_order(self):
        mesh = jax.make_mesh((2, 4), ("a", "b"))
        trees = _device_trees(8, seed=5)
        stacked = jax.tree.map(
            lambda x: x.reshape(2, 4, *x.shape[1:]), _stack(trees)
        )
        fn = jax.jit(
            jax.shard_map(
                lambda g: adasum_reduce(
                    jax.tree.map(lambda x: x[0, 0], g), ("b", "a")
                ),
                mesh=mesh,
                in_specs=P("a", "b"),
                out_specs=P(),
            )
        )
        out = fn(_put(mesh, stacked, P("a", "b")))
        assert_tree_close(self, out, _reference_tree(trees))

    def test_collective_bytes(self):
        n = 8
        shapes = {"w": (64, 33), "b": (100,), "c": (5,), "s": ()}
        grad_bytes = 4 * sum(int(np.prod(s)) for s in shapes.values())
        mesh, fn = _reducer(n)
        x = _put(
            mesh,
            {k: np.ones((n, *s), np.float32) for k, s in shapes.items()},
            P("data"),
        )
        hlo = fn.lower(x).compile().as_text()
        sent, counts = boostax.measure.collective_bytes(hlo)
        # Vector halving, distance doubling: 3 half-exchanges, 3 x (1 + 2)
        # butterflies of per-leaf scalars, one all-gather, one all-reduce
        # (the scalar leaf's mean).
        self.assertEqual(counts["all-gather"], 1)
        self.assertGreaterEqual(counts["collective-permute"], 3)
        self.assertLessEqual(sent, 2 * grad_bytes + 1024)
        # log2(8) full copies (a butterfly of whole vectors) is 3x.
        self.assertLess(sent, 0.7 * 3 * grad_bytes)
        print(
            f"\n[adasum] P={n}: {sent:.0f} bytes sent per device for "
            f"{grad_bytes} gradient bytes ({sent / grad_bytes:.3f}x); "
            f"{dict(counts)}"
        )


# --------------------------------------------------------------------------
# Hierarchical.


class HierarchicalTest(parameterized.TestCase):
    @parameterized.named_parameters(("n2_l4", 2, 4), ("n4_l2", 4, 2))
    def test_mean_then_adasum(self, nodes, local):
        mesh = jax.make_mesh((nodes, local), ("node", "local"))
        trees = _device_trees(nodes * local, seed=6)
        stacked = jax.tree.map(
            lambda x: x.reshape(nodes, local, *x.shape[1:]), _stack(trees)
        )
        fn = jax.jit(
            jax.shard_map(
                lambda g: hierarchical_adasum_reduce(
                    jax.tree.map(lambda x: x[0, 0], g),
                    local_axis="local",
                    node_axis="node",
                ),
                mesh=mesh,
                in_specs=P("node", "local"),
                out_specs=P(),
            )
        )
        out = fn(_put(mesh, stacked, P("node", "local")))
        node_means = [
            jax.tree.map(
                lambda *xs: np.mean(np.stack(xs), axis=0),
                *_f64(trees[j * local : (j + 1) * local]),
            )
            for j in range(nodes)
        ]
        ref = _reference_tree(node_means)
        assert_tree_close(self, out, ref)
        self.assertLess(_max_rel_err(out, ref), 1e-5)


# --------------------------------------------------------------------------
# The Optax wrappers.


def _grads(n, seed):
    rng = np.random.default_rng(seed)
    common = rng.normal(size=(4, 3))
    return [
        {
            "k": (common + rng.normal(size=(4, 3))).astype(np.float32),
            "b": rng.normal(size=(3,)).astype(np.float32),
            "t": np.float32(rng.normal()),
        }
        for _ in range(n)
    ]


def _params():
    return {
        "k": jnp.zeros((4, 3)),
        "b": jnp.zeros(3),
        "t": jnp.zeros([]),
    }


def _stateful_step(tx, mesh):
    """One `tx.update` per device; the state has a leading device axis."""

    def step(grads, state, params):
        updates, state = tx.update(_first(grads), _first(state), params)
        return updates, _lead(state)

    return jax.jit(
        jax.shard_map(
            step,
            mesh=mesh,
            in_specs=(P("data"), P("data"), P()),
            out_specs=(P(), P("data")),
        )
    )


class AdaSumOptimizerTest(parameterized.TestCase):
    def test_sgd_is_adasum_of_scaled_grads(self):
        n, lr = 8, 0.1
        mesh, grads = _mesh(n), _grads(n, seed=7)
        tx = adasum(optax.sgd(lr), "data")
        step = _stateful_step(tx, mesh)
        state = _put(mesh, _stack([tx.init(_params())] * n), P("data"))
        updates, _ = step(
            _put(mesh, _stack(grads), P("data")), state, _params()
        )
        scaled = [jax.tree.map(lambda g: -lr * g, g) for g in grads]
        assert_tree_close(self, updates, _reference_tree(scaled), atol=1e-8)

    def test_adam_reduces_per_device_updates(self):
        n = 8
        mesh = _mesh(n)
        inner = optax.adam(1e-2)
        tx = adasum(inner, "data")
        step = _stateful_step(tx, mesh)
        state = tx.init(_params())
        self.assertIsInstance(state, AdaSumState)
        state = _put(mesh, _stack([state] * n), P("data"))
        # Host-side per-device Adam, never synchronized.
        host = [inner.init(_params()) for _ in range(n)]
        for seed in (8, 9):
            grads = _grads(n, seed)
            updates, state = step(
                _put(mesh, _stack(grads), P("data")), state, _params()
            )
            local = []
            for i in range(n):
                u, host[i] = inner.update(grads[i], host[i], _params())
                local.append(u)
            assert_tree_close(self, updates, _reference_tree(local), atol=1e-8)
        mu = np.asarray(state.inner_state[0].mu["k"])
        self.assertEqual(mu.shape, (n, 4, 3))
        self.assertGreater(np.max(np.abs(mu[0] - mu[1])), 1e-3)
        np.testing.assert_allclose(
            mu, np.stack([h[0].mu["k"] for h in host]), rtol=1e-6, atol=1e-7
        )

    def test_hierarchical_sgd(self):
        nodes, local, lr = 2, 4, 0.5
        mesh = jax.make_mesh((nodes, local), ("node", "local"))
        grads = _grads(nodes * local, seed=10)
        tx = adasum(optax.sgd(lr), "node", local_axis_name="local")
        spec = P(("node", "local"))
        fn = jax.jit(
            jax.shard_map(
                lambda g, p: tx.update(_first(g), tx.init(p), p)[0],
                mesh=mesh,
                in_specs=(spec, P()),
                out_specs=P(),
            )
        )
        updates = fn(_put(mesh, _stack(grads), spec), _params())
        node_means = [
            jax.tree.map(
                lambda *xs: -lr * np.mean(np.stack(xs), axis=0),
                *_f64(grads[j * local : (j + 1) * local]),
            )
            for j in range(nodes)
        ]
        assert_tree_close(self, updates, _reference_tree(node_means), atol=1e-8)

    def test_adasum_gradients_then_sgd(self):
        n, lr = 6, 0.3
        mesh, grads = _mesh(n), _grads(n, seed=11)
        tx = optax.chain(adasum_gradients("data"), optax.sgd(lr))
        fn = jax.jit(
            jax.shard_map(
                lambda g, p: tx.update(_first(g), tx.init(p), p)[0],
                mesh=mesh,
                in_specs=(P("data"), P()),
                out_specs=P(),
            )
        )
        updates = fn(_put(mesh, _stack(grads), P("data")), _params())
        ref = jax.tree.map(lambda x: -lr * x, _reference_tree(grads))
        assert_tree_close(self, updates, ref, atol=1e-8)

    def test_extra_args_reach_inner(self):
        def update_fn(updates, state, params=None, *, scale):
            del params
            return jax.tree.map(lambda g: scale * g, updates), state

        inner = optax.GradientTransformationExtraArgs(
            optax.init_empty_state, update_fn
        )
        n = 2
        mesh, grads = _mesh(n), _grads(n, seed=12)
        tx = adasum(inner, "data")
        fn = jax.jit(
            jax.shard_map(
                lambda g, p: tx.update(_first(g), tx.init(p), p, scale=2.0)[0],
                mesh=mesh,
                in_specs=(P("data"), P()),
                out_specs=P(),
            )
        )
        updates = fn(_put(mesh, _stack(grads), P("data")), _params())
        ref = _reference_tree([jax.tree.map(lambda x: 2 * x, g) for g in grads])
        assert_tree_close(self, updates, ref, atol=1e-8)


# --------------------------------------------------------------------------
# Arguments.


class ArgumentsTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("zero", 0.0, ValueError),
        ("negative", -1e-3, ValueError),
        ("nan", float("nan"), ValueError),
        ("string", "1e-12", TypeError),
        ("bool", True, TypeError),
    )
    def test_bad_eps(self, eps, error):
        with self.assertRaisesRegex(error, r"`eps` must be .*got"):
            adasum(optax.sgd(0.1), "data", eps=eps)
        with self.assertRaisesRegex(error, r"`eps`"):
            adasum_gradients("data", eps=eps)
        with self.assertRaisesRegex(error, r"`eps`"):
            adasum_pair(jnp.ones(2), jnp.ones(2), eps=eps)

    @parameterized.named_parameters(
        ("int", 3, TypeError),
        ("empty", (), TypeError),
        ("list", ["data"], TypeError),
        ("tuple_of_int", ("data", 1), TypeError),
        ("repeated", ("data", "data"), ValueError),
    )
    def test_bad_axis_name(self, axis, error):
        with self.assertRaisesRegex(error, r"`axis_name` must .*got"):
            adasum(optax.sgd(0.1), axis)
        with self.assertRaisesRegex(error, r"`axis_name`"):
            adasum_gradients(axis)
        with self.assertRaisesRegex(error, r"`local_axis_name`"):
            adasum(optax.sgd(0.1), "node", local_axis_name=axis)
        with self.assertRaisesRegex(error, r"`axis_name`"):
            adasum_reduce(jnp.ones(2), axis)
        with self.assertRaisesRegex(error, r"`node_axis`"):
            hierarchical_adasum_reduce(
                jnp.ones(2), local_axis="local", node_axis=axis
            )

    def test_shared_axes(self):
        with self.assertRaisesRegex(ValueError, r"must not share"):
            adasum(optax.sgd(0.1), ("a", "b"), local_axis_name="b")
        with self.assertRaisesRegex(ValueError, r"must not share"):
            hierarchical_adasum_reduce(
                jnp.ones(2), local_axis="a", node_axis="a"
            )

    def test_bad_inner(self):
        with self.assertRaisesRegex(
            TypeError, r"`inner` must be an optax.GradientTransformation"
        ):
            adasum(lambda g: g, "data")

    def test_outside_shard_map(self):
        with self.assertRaisesRegex(NameError, r"inside `jax.shard_map`"):
            adasum_reduce(jnp.ones(2), "data")

    def test_bad_leaves(self):
        with self.assertRaisesRegex(TypeError, r"floating-point leaves.*int32"):
            adasum_pair(jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int32))
        with self.assertRaisesRegex(ValueError, r"equal shapes"):
            adasum_pair(jnp.ones(2), jnp.ones(3))


if __name__ == "__main__":
    absltest.main()
