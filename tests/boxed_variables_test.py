# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.distributed.boxed_variables`: variables
annotated to shard are refused by a step that would replicate them; the
others are unboxed."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import linen as nn
from flax import nnx
from flax.training import train_state as flax_train_state
from jax.sharding import AxisType

import boostax
from tests import _utils

X = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
Y = np.zeros((8, 4), np.float32)


def fsdp_mesh(model=4):
    """The issue's mesh: the 8 devices as (data, model)."""
    return jax.make_mesh(
        (8 // model, model), ("data", "model"), axis_types=(AxisType.Auto,) * 2
    )


def data_mesh():
    return jax.make_mesh((8,), ("data",))


class Dense(nn.Module):
    """A dense layer whose kernel is annotated as `names` asks."""

    names: tuple = (None, "model")
    logical: bool = False

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.lecun_normal()
        if self.logical:
            init = nn.with_logical_partitioning(init, self.names)
        elif self.names is not None:
            init = nn.with_partitioning(init, self.names)
        return nn.Dense(4, kernel_init=init)(x)


def loss(outputs, targets):
    return jnp.mean((outputs - targets) ** 2)


def step(model, mesh=None):
    return boostax.auto_boost(
        "O0", optimizer=optax.sgd(0.1), model=model, loss=loss, mesh=mesh
    )


def init(model, mesh=None):
    """``model.init``, under `mesh`'s context when given (the arrays then
    live on its devices)."""
    if mesh is None:
        return model.init(jax.random.PRNGKey(0), X)
    with jax.set_mesh(mesh):
        return model.init(jax.random.PRNGKey(0), X)


class LinenTest(absltest.TestCase):
    def test_fsdp_annotation_is_refused_naming_leaf_axis_and_ways_out(self):
        mesh = fsdp_mesh()
        variables = init(Dense(), mesh)
        ts = step(Dense(), data_mesh())
        with self.assertRaises(ValueError) as raised:
            ts.init(variables)
        message = str(raised.exception)
        self.assertIn("params/Dense_0/kernel", message)
        self.assertIn("Partitioned(names=(None, 'model'))", message)
        self.assertIn("mesh axis 'model' of 4 devices", message)
        self.assertIn("{'data': 2, 'model': 4}", message)
        self.assertIn("replicates them", message)
        self.assertIn("flax.linen.meta.unbox(variables)", message)
        self.assertIn("'shard_params': True", message)
        # The step took nothing: it still has no plan.
        self.assertIsNone(ts.builder.current_plan)

    def test_the_annotation_own_mesh_and_no_mesh_at_all(self):
        # A mesh in the annotation itself.
        mesh = fsdp_mesh(model=2)
        model = Dense()
        variables = init(model)
        kernel = variables["params"]["Dense_0"]["kernel"]
        variables["params"]["Dense_0"]["kernel"] = kernel.replace(mesh=mesh)
        with self.assertRaisesRegex(ValueError, "'model' of 2 devices"):
            step(model).init(variables)
        # No mesh anywhere, on 8 devices: the size is unknown, refused.
        with self.assertRaisesRegex(
            ValueError, r"no mesh known here has .*none\), with 8 devices"
        ):
            step(model).init(init(model))

    def test_annotations_that_shard_nothing_are_unboxed(self):
        plain = init(Dense(names=None))
        for model, mesh in (
            (Dense(names=(None, None)), fsdp_mesh()),  # every dim unnamed
            (Dense(), fsdp_mesh(model=1)),  # an axis of one device
            # Logical names no rule maps to a mesh axis.
            (Dense(names=("embed", "mlp"), logical=True), fsdp_mesh()),
        ):
            state = step(model, data_mesh()).init(init(model, mesh))
            self.assertEqual(
                jax.tree.structure(state.params),
                jax.tree.structure(plain["params"]),
            )
            np.testing.assert_array_equal(
                state.params["Dense_0"]["kernel"],
                plain["params"]["Dense_0"]["kernel"],
            )

    def test_logical_names_mapped_to_a_sharded_axis_are_refused(self):
        model = Dense(names=("embed", "mlp"), logical=True)
        with nn.logical_axis_rules([("mlp", "model")]):
            variables = init(model, fsdp_mesh())
            with self.assertRaises(ValueError) as raised:
                step(model, data_mesh()).init(variables)
        message = str(raised.exception)
        self.assertIn("LogicallyPartitioned(names=('embed', 'mlp'))", message)
        self.assertIn("mesh axes (None, 'model') by the rules", message)

    def test_unboxed_as_the_message_says_trains_as_unannotated(self):
        mesh = fsdp_mesh()
        variables = nn.meta.unbox(init(Dense(), mesh))
        ts = step(Dense(), data_mesh())
        state, metrics = ts(ts.init(variables), (X, Y))
        plain = step(Dense(names=None), data_mesh())
        want, want_metrics = plain(plain.init(init(Dense(names=None))), (X, Y))
        _utils.assert_trees_equal(state.params, want.params)
        np.testing.assert_array_equal(metrics["loss"], want_metrics["loss"])

    def test_a_flax_train_state_of_boxed_params_is_refused(self):
        variables = init(Dense(), fsdp_mesh())
        flax_state = flax_train_state.TrainState.create(
            apply_fn=Dense().apply,
            params=variables["params"],
            tx=optax.sgd(0.1),
        )
        with self.assertRaisesRegex(ValueError, "params/Dense_0/kernel"):
            boostax.from_flax_train_state(
                step(Dense(), data_mesh()), flax_state, init_optimizer=True
            )


class Annotated(nnx.Module):
    def __init__(self, rngs, names=(None, "model")):
        init = nnx.initializers.lecun_normal()
        self.first = nnx.Linear(
            3, 4, kernel_init=nnx.with_partitioning(init, names), rngs=rngs
        )
        self.second = nnx.Linear(
            4, 4, kernel_init=nnx.with_partitioning(init, names), rngs=rngs
        )

    def __call__(self, x):
        return self.second(self.first(x))


class NNXTest(absltest.TestCase):
    def test_sharded_out_sharding_is_refused(self):
        with jax.set_mesh(fsdp_mesh()):
            model = Annotated(nnx.Rngs(0))
        ts = step(model, data_mesh())
        with self.assertRaises(ValueError) as raised:
            ts.init(model)
        message = str(raised.exception)
        self.assertIn("first/kernel is an nnx.Param with out_sharding", message)
        self.assertIn("(None, 'model')", message)
        self.assertIn("'model' of 4 devices", message)
        self.assertIn("(and 1 more)", message)  # second/kernel
        self.assertIn("nnx.with_partitioning", message)

    def test_unnamed_out_sharding_is_accepted(self):
        with jax.set_mesh(fsdp_mesh()):
            model = Annotated(nnx.Rngs(0), names=(None, None))
        state = step(model, data_mesh()).init(model)
        self.assertEqual(state.params["first"]["kernel"].shape, (3, 4))


if __name__ == "__main__":
    absltest.main()
