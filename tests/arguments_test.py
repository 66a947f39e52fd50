# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Bad arguments to the public API are refused, by name, before any work.

One table of ``(call, argument, bad value, exception)``: a string flag
(``"False"`` is truthy), an int or ``np.bool_`` where a bool is asked for, a
bool where a count or a number is, NaN and inf for finite hyper-parameters,
negative counts and wrong types. Each call must raise ``TypeError`` (wrong
type) or ``ValueError`` (wrong value) whose message names the argument in
backticks. The checks come before any tracing or compiling, so nothing here
compiles a step.
"""

import math

import numpy as np
import optax
from absl.testing import absltest, parameterized

import boostax
from boostax import mindspore as boost
from boostax._src import validation
from boostax.examples import models

NAN, INF = math.nan, math.inf
SGD = optax.sgd(0.1)
X = np.zeros((1, 8), np.float32)  # MLP inputs (never traced here)
PARAMS = {"w": np.ones((16, 16), np.float32), "b": np.ones(16, np.float32)}
CE = models.cross_entropy

# (label, value, exception) for each kind of argument.
BAD_BOOLS = (
    ("str_False", "False", TypeError),
    ("str_True", "True", TypeError),
    ("int_0", 0, TypeError),
    ("int_1", 1, TypeError),
    ("np_bool", np.bool_(True), TypeError),
    ("none", None, TypeError),
)
BAD_OPTIONAL_BOOLS = tuple(c for c in BAD_BOOLS if c[1] is not None)
BAD_TYPES_FOR_INTS = (
    ("bool_True", True, TypeError),
    ("bool_False", False, TypeError),
    ("np_bool", np.bool_(True), TypeError),
    ("float", 2.0, TypeError),
    ("str", "3", TypeError),
)
BAD_COUNTS = BAD_TYPES_FOR_INTS + (("negative", -1, ValueError),)
BAD_NUMBERS = (
    ("nan", NAN, ValueError),
    ("inf", INF, ValueError),
    ("minus_inf", -INF, ValueError),
    ("str", "0.5", TypeError),
    ("bool", True, TypeError),
    ("np_bool", np.bool_(True), TypeError),
    ("none", None, TypeError),
)
# Per-leaf fan-in axes: one tuple of ints or None per leaf of PARAMS.
BAD_AXES = (
    ("str_entry", {"w": "in", "b": None}, TypeError),
    ("float_entry", {"w": (0.5,), "b": None}, TypeError),
    ("bool_entry", {"w": (True,), "b": None}, TypeError),
    ("int_entry", {"w": 0, "b": None}, TypeError),
)
BAD_AXES_VALUES = (
    ("out_of_range", {"w": (2,), "b": None}, ValueError),
    ("every_axis", {"w": (0, 1), "b": None}, ValueError),
    ("no_axis", {"w": (), "b": None}, ValueError),
    ("other_structure", {"v": (0,)}, ValueError),
)
BAD_POSITIVE_NUMBERS = BAD_NUMBERS + (
    ("zero", 0.0, ValueError),
    ("negative", -1.0, ValueError),
)


def _freeze_opt():
    return boost.FreezeOpt(SGD)


def _mesh():
    return boostax.node_mesh(1)


# (call label, argument, call(value), bad values)
_TABLE = [
    # --- flags ------------------------------------------------------------
    (
        "less_bn",
        "fn_flag",
        lambda v: boostax.less_bn(models.MLP(), X, fn_flag=v),
        BAD_OPTIONAL_BOOLS,  # None: the FN head where it works
    ),
    (
        "less_bn_report",
        "fn_flag",
        lambda v: boostax.less_bn_report(models.MLP(), X, fn_flag=v),
        BAD_OPTIONAL_BOOLS,  # None: the FN head where it works
    ),
    (
        "LessBN",
        "fn_flag",
        lambda v: boost.LessBN(models.MLP(), v, sample_inputs=X),
        BAD_OPTIONAL_BOOLS,  # None: the FN head where it works
    ),
    (
        "interleaved_timings",
        "warmup",
        lambda v: boostax.measure.interleaved_timings(
            {"a": lambda: None}, repetitions=1, steps=1, warmup=v
        ),
        BAD_BOOLS,
    ),
    (
        "freeze_cell",
        "reducer_flag",
        lambda v: boost.freeze_cell(v, models.MLP(), _freeze_opt(), loss=CE),
        BAD_BOOLS,
    ),
    (
        "freeze_cell",
        "use_grad_accumulation",
        lambda v: boost.freeze_cell(
            False, models.MLP(), _freeze_opt(), use_grad_accumulation=v, loss=CE
        ),
        BAD_BOOLS,
    ),
    (
        "freeze_cell",
        "mean",
        lambda v: boost.freeze_cell(
            False, models.MLP(), _freeze_opt(), mean=v, loss=CE
        ),
        BAD_OPTIONAL_BOOLS,
    ),
    (
        "BoostTrainOneStepCell",
        "adasum",
        lambda v: boost.BoostTrainOneStepCell(
            models.MLP(), SGD, loss=CE, adasum=v
        ),
        BAD_BOOLS,
    ),
    (
        "BoostTrainOneStepWithLossScaleCell",
        "adasum",
        lambda v: boost.BoostTrainOneStepWithLossScaleCell(
            models.MLP(), SGD, 2.0, loss=CE, adasum=v
        ),
        BAD_BOOLS,
    ),
    # --- counts -----------------------------------------------------------
    (
        "generate_freeze_index_sequence",
        "parameter_groups_number",
        lambda v: boostax.generate_freeze_index_sequence(v, 1, 0.5, 10),
        BAD_COUNTS,
    ),
    (
        "generate_freeze_index_sequence",
        "freeze_strategy",
        lambda v: boostax.generate_freeze_index_sequence(10, v, 0.5, 10),
        BAD_COUNTS + (("three", 3, ValueError),),
    ),
    (
        "generate_freeze_index_sequence",
        "total_steps",
        lambda v: boostax.generate_freeze_index_sequence(10, 1, 0.5, v),
        BAD_COUNTS + (("zero", 0, ValueError),),
    ),
    (
        "generate_freeze_index_sequence",
        "seed",
        lambda v: boostax.generate_freeze_index_sequence(
            10, 1, 0.5, 10, seed=v
        ),
        BAD_COUNTS,
    ),
    (
        "split_parameters_groups",
        "groups_number",
        lambda v: boostax.split_parameters_groups(PARAMS, v),
        BAD_COUNTS + (("zero", 0, ValueError),),
    ),
    (
        "GradientFreeze",
        "param_groups",
        lambda v: boost.GradientFreeze(v),
        BAD_COUNTS,
    ),
    (
        "GradientFreeze",
        "freeze_type",
        lambda v: boost.GradientFreeze(10, v),
        BAD_COUNTS,
    ),
    (
        "GradientFreeze",
        "total_steps",
        lambda v: boost.GradientFreeze(10, 1, 0.7, v),
        BAD_COUNTS,
    ),
    (
        "GradientFreeze.freeze_generate",
        "seed",
        lambda v: boost.GradientFreeze(2).freeze_generate(
            models.MLP(), SGD, sample_inputs=X, seed=v
        ),
        BAD_COUNTS,
    ),
    (
        "FreezeOpt",
        "train_strategy",
        lambda v: boost.FreezeOpt(SGD, [["w"]], [v]),
        BAD_COUNTS + (("out_of_range", 1, ValueError),),
    ),
    (
        "Freezing",
        "micro_steps",
        lambda v: boostax.Freezing(
            ((("w",),),), np.zeros(3, int), micro_steps=v
        ),
        BAD_COUNTS,
    ),
    (
        "centralize_gradients",
        "fan_in_multiple",
        lambda v: boostax.centralize_gradients(fan_in_multiple=v),
        BAD_COUNTS,
    ),
    (
        "gradient_centralization_mask",
        "fan_in_multiple",
        lambda v: boostax.gradient_centralization_mask(
            PARAMS, fan_in_multiple=v
        ),
        BAD_COUNTS,
    ),
    (
        "with_gradient_centralization",
        "fan_in_multiple",
        lambda v: boostax.with_gradient_centralization(SGD, fan_in_multiple=v),
        BAD_COUNTS,
    ),
    (
        "centralize_gradients",
        "axes",
        lambda v: boostax.centralize_gradients(axes=v),
        BAD_AXES,
    ),
    (
        "gradient_centralization_mask",
        "axes",
        lambda v: boostax.gradient_centralization_mask(PARAMS, axes=v),
        BAD_AXES + BAD_AXES_VALUES,
    ),
    (
        "with_gradient_centralization",
        "axes",
        lambda v: boostax.with_gradient_centralization(SGD, axes=v),
        BAD_AXES,
    ),
    (
        "gradient_centralization_axes",
        "model",
        lambda v: boostax.gradient_centralization_axes(v, X),
        (("optimizer", SGD, TypeError), ("none", None, TypeError)),
    ),
    (
        "DynamicLossScale",
        "scale_window",
        lambda v: boostax.DynamicLossScale(scale_window=v),
        BAD_COUNTS,
    ),
    (
        "enhanced_amp",
        "layer1",
        lambda v: boostax.enhanced_amp(X, v, 1),
        BAD_COUNTS,
    ),
    (
        "enhanced_amp",
        "layer2",
        lambda v: boostax.enhanced_amp(X, 0, v),
        BAD_COUNTS,
    ),
    (
        "interleaved_timings",
        "repetitions",
        lambda v: boostax.measure.interleaved_timings(
            {"a": lambda: None}, repetitions=v, steps=1
        ),
        BAD_COUNTS,
    ),
    (
        "interleaved_timings",
        "steps",
        lambda v: boostax.measure.interleaved_timings(
            {"a": lambda: None}, repetitions=1, steps=v
        ),
        BAD_COUNTS,
    ),
    ("node_mesh", "device_number", lambda v: boostax.node_mesh(v), BAD_COUNTS),
    ("AdaSum", "rank", lambda v: boost.AdaSum(v, 1, 1, {}), BAD_COUNTS),
    (
        "AdaSum",
        "device_number",
        lambda v: boost.AdaSum(1, v, 1, {}),
        BAD_COUNTS,
    ),
    (
        "AdaSum",
        "group_number",
        lambda v: boost.AdaSum(1, 1, v, {}),
        BAD_COUNTS,
    ),
    (
        "GradientAccumulation",
        "max_accumulation_step",
        lambda v: boost.GradientAccumulation(v, SGD),
        BAD_COUNTS,
    ),
    (
        "freeze_cell",
        "max_accumulation_step",
        lambda v: boost.freeze_cell(
            False, models.MLP(), _freeze_opt(), max_accumulation_step=v, loss=CE
        ),
        BAD_COUNTS,
    ),
    (
        "freeze_cell",
        "degree",
        lambda v: boost.freeze_cell(
            False, models.MLP(), _freeze_opt(), degree=v, loss=CE
        ),
        BAD_COUNTS,
    ),
    (
        "BoostTrainOneStepCell",
        "device_number",
        lambda v: boost.BoostTrainOneStepCell(
            models.MLP(), SGD, loss=CE, device_number=v
        ),
        BAD_COUNTS,
    ),
    (
        "DimReduce",
        "n_components",
        lambda v: boost.DimReduce(
            models.MLP(),
            SGD,
            PARAMS,
            np.eye(1, 3),
            v,
            0.5,
            0.5,
            0.5,
            0.5,
            0,
            1,
            loss=CE,
        ),
        BAD_COUNTS,
    ),
    (
        "DimReduce",
        "rank",
        lambda v: boost.DimReduce(
            models.MLP(),
            SGD,
            PARAMS,
            np.eye(1, 3),
            1,
            0.5,
            0.5,
            0.5,
            0.5,
            v,
            1,
            loss=CE,
        ),
        BAD_COUNTS,
    ),
    (
        "DimReduce",
        "rank_size",
        lambda v: boost.DimReduce(
            models.MLP(),
            SGD,
            PARAMS,
            np.eye(1, 3),
            1,
            0.5,
            0.5,
            0.5,
            0.5,
            0,
            v,
            loss=CE,
        ),
        BAD_COUNTS,
    ),
    (
        "GroupLossScaleManager.set_loss_scale_status",
        "loss_scale_number",
        lambda v: boost.GroupLossScaleManager(
            1.0, [["a"]]
        ).set_loss_scale_status(v, 1.0),
        BAD_COUNTS,
    ),
    (
        "GroupLossScaleManager.update_loss_scale_status",
        "layer",
        lambda v: boost.GroupLossScaleManager(
            1.0, [["a"]]
        ).update_loss_scale_status(v, 2.0),
        BAD_COUNTS,
    ),
    (
        "ParameterProcess.assign_parameter_group",
        "split_point",
        lambda v: boost.ParameterProcess().assign_parameter_group(PARAMS, [v]),
        BAD_COUNTS,
    ),
    ("FNHead", "features", lambda v: boostax.FNHead(v), BAD_COUNTS),
    (
        "NNXFNHead",
        "in_features",
        lambda v: boostax.NNXFNHead(v, 2, kernel=np.ones((1, 2))),
        BAD_COUNTS,
    ),
    (
        "NNXFNHead",
        "out_features",
        lambda v: boostax.NNXFNHead(1, v, kernel=np.ones((1, 2))),
        BAD_COUNTS,
    ),
    (
        "RemovedBatchNorm",
        "pattern",
        lambda v: boostax.RemovedBatchNorm("a", "b", "c", v),
        BAD_COUNTS,
    ),
    # --- numbers ----------------------------------------------------------
    (
        "adasum_pair",
        "eps",
        lambda v: boostax.adasum_pair(np.ones(2), np.ones(2), eps=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "adasum_reduce",
        "eps",
        lambda v: boostax.adasum_reduce(np.ones(2), "data", eps=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "hierarchical_adasum_reduce",
        "eps",
        lambda v: boostax.hierarchical_adasum_reduce(
            np.ones(2), local_axis="local", node_axis="node", eps=v
        ),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "adasum",
        "eps",
        lambda v: boostax.adasum(SGD, "data", eps=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "adasum_gradients",
        "eps",
        lambda v: boostax.adasum_gradients("data", eps=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "DataParallel",
        "eps",
        lambda v: boostax.DataParallel(_mesh(), "adasum", eps=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "StaticLossScale",
        "loss_scale_value",
        lambda v: boostax.StaticLossScale(v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "DynamicLossScale",
        "scale_factor",
        lambda v: boostax.DynamicLossScale(scale_factor=v),
        BAD_POSITIVE_NUMBERS + (("one", 1.0, ValueError),),
    ),
    (
        "DynamicLossScale",
        "min_loss_scale",
        lambda v: boostax.DynamicLossScale(min_loss_scale=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "DynamicLossScale",
        "max_loss_scale",
        lambda v: boostax.DynamicLossScale(max_loss_scale=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScale",
        "init_loss_scale",
        lambda v: boostax.GroupLossScale(v, [["a"]]),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScale",
        "init_loss_scale_list",
        lambda v: boostax.GroupLossScale([1.0, v], [["a"], ["b"]]),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScale",
        "backoff",
        lambda v: boostax.GroupLossScale(1.0, [["a"]], backoff=v),
        BAD_POSITIVE_NUMBERS + (("above_one", 2.0, ValueError),),
    ),
    (
        "GroupLossScale",
        "growth",
        lambda v: boostax.GroupLossScale(1.0, [["a"]], growth=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScale",
        "min_loss_scale",
        lambda v: boostax.GroupLossScale(1.0, [["a"]], min_loss_scale=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScale",
        "max_loss_scale",
        lambda v: boostax.GroupLossScale(1.0, [["a"]], max_loss_scale=v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScaleManager",
        "init_loss_scale",
        lambda v: boost.GroupLossScaleManager(v, [["a"]]),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "GroupLossScaleManager.update_loss_scale_status",
        "update_ratio",
        lambda v: boost.GroupLossScaleManager(
            1.0, [["a"]]
        ).update_loss_scale_status(0, v),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "with_gradient_centralization",
        "weight_decay",
        lambda v: boostax.with_gradient_centralization(SGD, weight_decay=v),
        BAD_NUMBERS + (("negative", -1.0, ValueError),),
    ),
    (
        "OptimizerProcess",
        "weight_decay",
        lambda v: boost.OptimizerProcess(SGD, weight_decay=v),
        BAD_NUMBERS + (("negative", -1.0, ValueError),),
    ),
    (
        "generate_freeze_index_sequence",
        "freeze_p",
        lambda v: boostax.generate_freeze_index_sequence(10, 1, v, 10),
        BAD_NUMBERS + (("above_one", 1.5, ValueError),),
    ),
    (
        "GradientFreeze",
        "freeze_p",
        lambda v: boost.GradientFreeze(10, 1, v),
        BAD_NUMBERS,
    ),
    (
        "BoostTrainOneStepCell",
        "sens",
        lambda v: boost.BoostTrainOneStepCell(models.MLP(), SGD, v, loss=CE),
        tuple(c for c in BAD_POSITIVE_NUMBERS if c[1] is not None),
    ),
    (
        "BoostTrainOneStepWithLossScaleCell",
        "scale_sense",
        lambda v: boost.BoostTrainOneStepWithLossScaleCell(
            models.MLP(), SGD, v, loss=CE
        ),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "freeze_cell",
        "sens",
        lambda v: boost.freeze_cell(
            False, models.MLP(), _freeze_opt(), v, loss=CE
        ),
        tuple(c for c in BAD_POSITIVE_NUMBERS if c[1] is not None),
    ),
    (
        "Accelerator",
        "peak_flops",
        lambda v: boostax.measure.Accelerator("chip", v, 1e9, "made up"),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "Accelerator",
        "peak_bytes_per_second",
        lambda v: boostax.measure.Accelerator("chip", 1e12, v, "made up"),
        BAD_POSITIVE_NUMBERS,
    ),
    (
        "paired_ratio",
        "numerator",
        lambda v: boostax.measure.paired_ratio([1.0, v], [1.0, 1.0]),
        tuple(c for c in BAD_NUMBERS if c[1] is not None),
    ),
    (
        "paired_ratio",
        "denominator",
        lambda v: boostax.measure.paired_ratio([1.0, 1.0], [1.0, v]),
        tuple(c for c in BAD_POSITIVE_NUMBERS if c[1] is not None),
    ),
    (
        "FreezeOpt",
        "learning_rate",
        lambda v: boost.FreezeOpt(
            optax.sgd, [["w"]], [0], learning_rate=[0.1, v]
        ),
        tuple(c for c in BAD_NUMBERS if c[1] is not None),
    ),
    # --- other types ------------------------------------------------------
    (
        "adasum",
        "inner",
        lambda v: boostax.adasum(v, "data"),
        (("list", [SGD], TypeError), ("function", optax.sgd, TypeError)),
    ),
    (
        "with_gradient_centralization",
        "optimizer",
        lambda v: boostax.with_gradient_centralization(v),
        (("list", [SGD], TypeError),),
    ),
    (
        "centralize_gradients",
        "mask",
        lambda v: boostax.centralize_gradients(v),
        (
            ("str", "False", TypeError),
            ("str_leaves", {"w": "no"}, TypeError),
            ("int_leaves", {"w": 1}, TypeError),
        ),
    ),
    (
        "with_gradient_centralization",
        "weight_decay_mask",
        lambda v: boostax.with_gradient_centralization(
            SGD, weight_decay=0.1, weight_decay_mask=v
        ),
        (("str", "True", TypeError),),
    ),
    (
        "gradient_centralization_mask",
        "excluded_names",
        lambda v: boostax.gradient_centralization_mask(
            PARAMS, excluded_names=v
        ),
        (("str", "bias", TypeError), ("ints", [1], TypeError)),
    ),
    (
        "gradient_centralization_mask",
        "excluded_modules",
        lambda v: boostax.gradient_centralization_mask(
            PARAMS, excluded_modules=v
        ),
        (("str", "w", TypeError), ("strs", ["w"], TypeError)),
    ),
    (
        "gradient_centralization_mask",
        "layout",
        lambda v: boostax.gradient_centralization_mask(PARAMS, layout=v),
        (("unknown", "nchw", ValueError), ("bool", True, TypeError)),
    ),
    (
        "interleaved_timings",
        "runs",
        lambda v: boostax.measure.interleaved_timings(
            v, repetitions=1, steps=1
        ),
        (
            ("list", [lambda: None], TypeError),
            ("not_callable", {"a": 1}, TypeError),
        ),
    ),
    (
        "FNHead",
        "kernel_init",
        lambda v: boostax.FNHead(2, kernel_init=v),
        (("list", [1], TypeError),),
    ),
    (
        "collective_bytes",
        "hlo",
        lambda v: boostax.measure.collective_bytes(v),
        (("int", 1, TypeError), ("bytes", b"hlo", TypeError)),
    ),
    (
        "kernel_counts",
        "hlo",
        lambda v: boostax.measure.kernel_counts(v),
        (("int", 1, TypeError), ("no_entry", "HloModule m", ValueError)),
    ),
    (
        "executable_cost",
        "compiled",
        lambda v: boostax.measure.executable_cost(v),
        (("str", "hlo", TypeError),),
    ),
    (
        "cost_report",
        "train_step",
        lambda v: boostax.measure.cost_report(v, None, None),
        (("int", 1, TypeError),),
    ),
    (
        "ExecutableCost",
        "temp_bytes",
        lambda v: boostax.measure.ExecutableCost(
            1.0, 1.0, v, 0, 0, 0.0, {}, 0, {}
        ),
        BAD_TYPES_FOR_INTS,
    ),
    (
        "DataParallel",
        "mesh",
        lambda v: boostax.DataParallel(v),
        (("str", "data", TypeError),),
    ),
    (
        "DataParallel",
        "reduction",
        lambda v: boostax.DataParallel(_mesh(), reduction=v),
        (("unknown", "sum", ValueError), ("bool", True, TypeError)),
    ),
    (
        "DataParallel",
        "local_axis",
        lambda v: boostax.DataParallel(_mesh(), "adasum", local_axis=v),
        (("int", 1, TypeError), ("unknown", "x", ValueError)),
    ),
    (
        "node_mesh",
        "axis_names",
        lambda v: boostax.node_mesh(1, axis_names=v),
        (
            ("str", "ab", TypeError),
            ("one", ("a",), TypeError),
            ("same", ("a", "a"), ValueError),
        ),
    ),
    (
        "node_mesh",
        "devices",
        lambda v: boostax.node_mesh(1, v),
        (("strs", ["cpu"], TypeError),),
    ),
    (
        "GroupLossScale",
        "groups",
        lambda v: boostax.GroupLossScale(1.0, v),
        (
            ("str", "abc", TypeError),
            ("empty", [], ValueError),
            ("str_group", ["a"], TypeError),
            ("negative", {"a": -1}, ValueError),
        ),
    ),
    (
        "GroupLossScaleManager",
        "loss_scale_groups",
        lambda v: boost.GroupLossScaleManager(1.0, v),
        (("str", "abc", TypeError), ("empty", [], ValueError)),
    ),
    (
        "Freezing",
        "sequence",
        lambda v: boostax.Freezing(((("w",),),), v),
        (("floats", np.array([0.5]), TypeError), ("int", 0, TypeError)),
    ),
    (
        "Freezing",
        "settings",
        lambda v: boostax.Freezing(((("w",),),), np.zeros(3, int), settings=v),
        (("tuple", (3, 1, 0.7, 20, 0), TypeError),),
    ),
    (
        "LinenLessBN",
        "network",
        lambda v: boostax.LinenLessBN(v),
        (("str", "net", TypeError),),
    ),
    (
        "adasum_pair",
        "b",
        lambda v: boostax.adasum_pair({"w": np.ones(2)}, v),
        (("other_tree", {"v": np.ones(2)}, ValueError),),
    ),
    (
        "freeze_cell",
        "grad",
        lambda v: boost.freeze_cell(
            False, models.MLP(), _freeze_opt(), grad=v, loss=CE
        ),
        (("function", np.gradient, ValueError),),
    ),
    (
        "DimReduce",
        "pca_mat_local",
        lambda v: boost.DimReduce(
            models.MLP(), SGD, PARAMS, v, 1, 0.5, 0.5, 0.5, 0.5, 0, 1, loss=CE
        ),
        (
            ("strs", np.array([["a", "b"]]), TypeError),
            ("bools", np.ones((1, 3), bool), TypeError),
        ),
    ),
    (
        "LessBNReport",
        "removed_parameters",
        lambda v: boostax.LessBNReport((), (), None, v),
        BAD_TYPES_FOR_INTS,
    ),
]

CASES = [
    dict(
        testcase_name=f"{call}__{argument}__{label}",
        call=fn,
        argument=argument,
        value=value,
        error=error,
    )
    for call, argument, fn, bad in _TABLE
    for label, value, error in bad
]


class ArgumentsTest(parameterized.TestCase):
    @parameterized.named_parameters(*CASES)
    def test_bad_argument_is_named(self, call, argument, value, error):
        # `init_loss_scale_list` is `init_loss_scale`, given as a list.
        name = argument.removesuffix("_list")
        with self.assertRaises(error) as raised:
            call(value)
        # Exactly the expected type: a ValueError where a TypeError is due
        # (or the reverse) is a failure too.
        self.assertIs(type(raised.exception), error, str(raised.exception))
        self.assertIn(f"`{name}`", str(raised.exception))

    def test_table_covers_each_kind(self):
        arguments = {(call, argument) for call, argument, _, _ in _TABLE}
        self.assertGreater(len(arguments), 80)
        self.assertLen({c["testcase_name"] for c in CASES}, len(CASES))

    def test_good_arguments_still_accepted(self):
        # The checks refuse nothing the API promised: NumPy scalars for
        # counts and numbers, arrays for per-group scales.
        boostax.StaticLossScale(np.float32(2.0))
        boostax.DynamicLossScale(scale_window=np.int64(10))
        boostax.GroupLossScale(np.array([1.0, 2.0]), [["a"], ["b"]])
        boostax.GroupLossScale(np.float32(4.0), {"a": 0, "b": np.int32(1)})
        boostax.generate_freeze_index_sequence(np.int64(4), 1, 0.5, 10)
        boostax.measure.paired_ratio(np.array([1.0, 2.0]), (1.0, 1.0))
        boostax.centralize_gradients({"w": True, "b": np.bool_(False)})
        boost.FreezeOpt(SGD, [["w"], ["b"]], np.array([0, 1, 1]))
        self.assertEqual(
            boostax.measure.Accelerator("chip", 1, 2, "").peak_flops, 1.0
        )


class ValidationTest(parameterized.TestCase):
    """The shared checks: message format and the bool/int/number lines."""

    @parameterized.named_parameters(
        (
            "bool",
            validation.check_bool,
            ("flag", "False"),
            TypeError,
            "`flag` must be a bool (True or False), got str ('False').",
        ),
        (
            "int",
            lambda n, v: validation.check_int(n, v, minimum=1),
            ("count", True),
            TypeError,
            "`count` must be an int >= 1, got bool (True).",
        ),
        (
            "int_value",
            lambda n, v: validation.check_int(n, v, minimum=1),
            ("count", 0),
            ValueError,
            "`count` must be an int >= 1, got 0.",
        ),
        (
            "number",
            lambda n, v: validation.check_number(n, v, minimum=0),
            ("rate", math.nan),
            ValueError,
            "`rate` must be a finite number >= 0, got nan.",
        ),
        (
            "one_of_type",
            lambda n, v: validation.check_one_of(n, v, ("a",)),
            ("mode", 1),
            TypeError,
            "`mode` must be one of ['a'], got int (1).",
        ),
        (
            "one_of_value",
            lambda n, v: validation.check_one_of(n, v, ("a",)),
            ("mode", "b"),
            ValueError,
            "`mode` must be one of ['a'], got 'b'.",
        ),
        (
            "numbers",
            lambda n, v: validation.check_numbers(n, v, minimum=0),
            ("rates", [1.0, -1.0]),
            ValueError,
            "`rates` must hold finite numbers >= 0 only, got -1.0 at index 1.",
        ),
        (
            "optional_number",
            lambda n, v: validation.check_optional_number(
                n, v, none_means="off", minimum=0, open_minimum=True
            ),
            ("scale", math.inf),
            ValueError,
            "`scale` must be a finite number > 0 or None (off), got inf.",
        ),
    )
    def test_message(self, check, args, error, message):
        with self.assertRaises(error) as raised:
            check(*args)
        self.assertEqual(str(raised.exception), message)

    def test_long_values_are_shortened(self):
        with self.assertRaises(TypeError) as raised:
            validation.check_bool("flag", "x" * 1000)
        self.assertLess(len(str(raised.exception)), 200)

    def test_canonical_values(self):
        self.assertIs(type(validation.check_int("n", np.int64(3))), int)
        self.assertIs(type(validation.check_number("x", np.float32(2))), float)
        self.assertIsNone(
            validation.check_optional_int("n", None, none_means="all")
        )
        self.assertEqual(validation.check_one_of("k", np.int64(1), (0, 1)), 1)


if __name__ == "__main__":
    absltest.main()
