# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A `BoostConfig`'s sections: one frozen dataclass per section of keys.

Each section (``boost``, ``common``, ``less_bn``, ``grad_freeze``, ...,
boostax's own ``progressive_resizing`` to ``test_time_flips``) holds its
keys with MindSpore's defaults, and checks them when built
(`config_fields`: kinds, ranges); `SECTIONS` maps the dictionary format's
section names to them. `config.BoostConfig` holds one of each.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import ClassVar

from boostax._src import validation
from boostax._src.config.fields import Range as _Range
from boostax._src.config.fields import Section as _Section
from boostax._src.config.fields import at_least as _at_least
from boostax._src.config.fields import coerce as _coerce
from boostax._src.config.fields import interval as _interval
from boostax._src.config.fields import key as _key
from boostax._src.config.fields import one_of as _one_of
from boostax._src.distributed import data_parallel as data_parallel_lib
from boostax._src.freezing import sequence as freeze_sequence
from boostax._src.methods import (
    progressive_resizing as progressive_resizing_lib,
)
from boostax._src.methods import seq_len_warmup as seq_len_warmup_lib
from boostax._src.methods import test_time_flips as test_time_flips_lib

#: The values of ``boost.mode``: which algorithms a configuration switches on.
MODES = ("auto", "manual", "enable_all", "disable_all")
#: The algorithm switches of the ``boost`` section, in MindSpore's order.
ALGORITHMS = (
    "less_bn",
    "grad_freeze",
    "adasum",
    "grad_accumulation",
    "dim_reduce",
    "loss_scale_group",
)


# ---------------------------------------------------------------------------
# Sections. Defaults are MindSpore's (`AutoBoost.__init__`).
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BoostSection(_Section):
    """Section ``boost``: the mode and one switch per algorithm.

    A switch left as ``None`` takes the value the level and mode give it;
    `BoostConfig` resolves every switch to a bool.
    """

    NAME: ClassVar[str] = "boost"
    mode: str = "auto"
    less_bn: bool | None = None
    grad_freeze: bool | None = None
    adasum: bool | None = None
    grad_accumulation: bool | None = None
    dim_reduce: bool | None = None
    loss_scale_group: bool | None = None

    def __post_init__(self):
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise ValueError(
                f"`boost.mode` must be one of {list(MODES)}, got {self.mode!r}."
            )
        for name in ALGORITHMS:
            value = getattr(self, name)
            if value is not None:
                _coerce(f"boost.{name}", "bool", value)

    def switches(self) -> dict[str, bool | None]:
        return {name: getattr(self, name) for name in ALGORITHMS}


@dataclasses.dataclass(frozen=True)
class CommonSection(_Section):
    """Section ``common``: gradient split points and devices per node."""

    NAME: ClassVar[str] = "common"
    gradient_split_groups: tuple[int, ...] = _key(
        (50, 100), "int_list", _at_least(0)
    )
    device_number: int = _key(8, "int", _at_least(1))


@dataclasses.dataclass(frozen=True)
class LessBNSection(_Section):
    """Section ``less_bn``: the FN head and gradient centralization flags.

    MindSpore's keys are ``fn_flag`` and ``gc_flag``. boostax adds, with
    defaults that keep MindSpore's behaviour: ``fn_scale`` (the FN head's
    initial scale; MindSpore's is 1), ``fn_log_scale`` (train its log) and
    ``zero_init_residual`` (each thinned residual branch starts at zero).

    ``fn_flag`` left as ``None`` is MindSpore's ``True`` where the FN head
    can work (a classifier's class logits) and off elsewhere (a language
    model's per-position logits), the LessBN report saying why; an
    explicit ``True`` where it cannot work is refused (`boostax.less_bn`).
    """

    NAME: ClassVar[str] = "less_bn"
    # Not a `_key`: None (the level's choice) is checked in __post_init__.
    fn_flag: bool | None = None
    gc_flag: bool = _key(True, "bool")
    # boostax's options (MindSpore's behaviour by default): the FN head's
    # initial scale and its parametrisation, and blocks that start as the
    # identity. See `boostax.less_bn`.
    fn_scale: float = _key(1.0, "float", _interval(0, math.inf, open_low=True))
    fn_log_scale: bool = _key(False, "bool")
    zero_init_residual: bool = _key(False, "bool")

    def __post_init__(self):
        super().__post_init__()
        if self.fn_flag is not None:
            _coerce("less_bn.fn_flag", "bool", self.fn_flag)


@dataclasses.dataclass(frozen=True)
class GradFreezeSection(_Section):
    """Section ``grad_freeze``: groups, strategy, probability, total steps."""

    NAME: ClassVar[str] = "grad_freeze"
    param_groups: int = _key(10, "int", _at_least(1))
    # 0 continuous, 1 interval (MindSpore's); 2 progressive (boostax's:
    # FreezeOut, the earliest groups frozen first and for good).
    freeze_type: int = _key(1, "int", _one_of(0, 1, 2))
    freeze_p: float = _key(0.7, "float", _interval(0, 1))
    total_steps: int = _key(
        65536,
        "int",
        _Range(
            f"in [1, {freeze_sequence.MAX_TOTAL_STEPS}] "
            f"({freeze_sequence.TOTAL_STEPS_BOUND})",
            lambda v: 1 <= v <= freeze_sequence.MAX_TOTAL_STEPS,
        ),
    )


@dataclasses.dataclass(frozen=True)
class GradAccumulationSection(_Section):
    """Section ``grad_accumulation``: micro-steps per optimizer update."""

    NAME: ClassVar[str] = "grad_accumulation"
    grad_accumulation_step: int = _key(1, "int", _at_least(1))


_OPEN_UNIT = _interval(0, 1, open_low=True, open_high=True)
# gamma = 0 is valid (no residual momentum), as `boostax.dim_reduce` takes it.
_HALF_OPEN_UNIT = _interval(0, 1, open_high=True)


@dataclasses.dataclass(frozen=True)
class DimReduceSection(_Section):
    """Section ``dim_reduce``: DimReduce's hyper-parameters and PCA files."""

    NAME: ClassVar[str] = "dim_reduce"
    rho: float = _key(0.55, "float", _OPEN_UNIT)
    gamma: float = _key(0.9, "float", _HALF_OPEN_UNIT)
    alpha: float = _key(0.001, "float", _at_least(0))
    sigma: float = _key(0.4, "float", _OPEN_UNIT)
    n_components: int = _key(32, "int", _at_least(1))
    pca_mat_path: str | None = _key(None, "path")
    weight_load_dir: str | None = _key(None, "path")
    timeout: float = _key(1800.0, "seconds", _at_least(0))


@dataclasses.dataclass(frozen=True)
class ProgressiveResizingSection(_Section):
    """Section ``progressive_resizing`` (boostax's; not MindSpore's):
    progressive image resizing (`boostax.progressive_resizing`, Composer's
    ``ProgressiveResizing``, with its defaults).

    Off unless ``enabled`` (no level or mode switches it on: it needs a
    model of NHWC images that pools globally); not with ``seq_len_warmup``
    (both schedule the batch's shape). ``total_steps`` (the run's
    optimizer updates) is then required; ``mode`` is ``"resize"`` or
    ``"crop"``; ``keys`` names the batch entries that hold images
    (``None``: the rank-4 leaves of the step's inputs, or of the batch).
    """

    NAME: ClassVar[str] = "progressive_resizing"
    enabled: bool = _key(False, "bool")
    total_steps: int | None = _key(None, "optional_int", _at_least(1))
    initial_scale: float = _key(0.5, "float", _interval(0, 1, open_low=True))
    finetune_fraction: float = _key(0.2, "float", _interval(0, 1))
    delay_fraction: float = _key(0.5, "float", _interval(0, 1))
    size_increment: int = _key(4, "int", _at_least(1))
    # A str, and dict keys or tuple indices: checked below.
    mode: str = "resize"
    keys: tuple[str | int, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        name = "progressive_resizing."
        progressive_resizing_lib.check_mode(self.mode, name + "mode")
        object.__setattr__(
            self,
            "keys",
            seq_len_warmup_lib.check_keys(self.keys, name + "keys"),
        )
        progressive_resizing_lib.check_fractions(
            self.delay_fraction, self.finetune_fraction, name
        )
        if self.enabled and self.total_steps is None:
            raise ValueError(
                "`progressive_resizing.total_steps` (the run's length in "
                "optimizer updates, over which the images grow) is needed "
                "when `progressive_resizing.enabled` is True."
            )


@dataclasses.dataclass(frozen=True)
class SeqLenWarmupSection(_Section):
    """Section ``seq_len_warmup`` (boostax's; not MindSpore's): sequence-length
    warm-up (`boostax.seq_len_warmup`, Composer's ``SeqLengthWarmup``).

    Off unless ``enabled`` (no level or mode switches it on: it needs
    batches of sequences). ``total_steps`` (the run's optimizer updates) is
    then required; ``max_seq_length`` ``None`` takes the batch's length;
    ``keys`` names the batch entries that hold sequences (``None``: the
    step's ``batch_keys`` entries, or the whole batch).
    """

    NAME: ClassVar[str] = "seq_len_warmup"
    enabled: bool = _key(False, "bool")
    total_steps: int | None = _key(None, "optional_int", _at_least(1))
    duration: float = _key(0.3, "float", _interval(0, 1, open_low=True))
    min_seq_length: int = _key(8, "int", _at_least(1))
    max_seq_length: int | None = _key(None, "optional_int", _at_least(1))
    step_size: int = _key(8, "int", _at_least(1))
    seq_axis: int = _key(1, "int", _at_least(1))
    # Dict keys or tuple indices: checked below, by the warm-up's own check.
    keys: tuple[str | int, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(
            self,
            "keys",
            seq_len_warmup_lib.check_keys(self.keys, "seq_len_warmup.keys"),
        )
        if self.enabled and self.total_steps is None:
            raise ValueError(
                "`seq_len_warmup.total_steps` (the run's length in optimizer "
                "updates, over whose `duration` the lengths grow) is needed "
                "when `seq_len_warmup.enabled` is True."
            )
        if (
            self.max_seq_length is not None
            and self.max_seq_length <= self.min_seq_length
        ):
            raise ValueError(
                "`seq_len_warmup.max_seq_length` must be above "
                f"`seq_len_warmup.min_seq_length` ({self.min_seq_length}), "
                f"got {self.max_seq_length}."
            )


@dataclasses.dataclass(frozen=True)
class WeightAveragingSection(_Section):
    """Section ``weight_averaging`` (boostax's; not MindSpore's): an
    exponential moving average of the params in the optimizer state
    (`boostax.average_params`, Composer's ``EMA``), which
    `TrainStep.predict` evaluates.

    Off unless ``enabled`` (no level or mode switches it on); then at any
    level. ``decay`` in [0, 1) (`boostax.half_life_decay` converts a
    half-life), ``start_step`` the update it starts from, ``debias`` its
    bias correction.
    """

    NAME: ClassVar[str] = "weight_averaging"
    enabled: bool = _key(False, "bool")
    decay: float = _key(0.999, "float", _interval(0, 1, open_high=True))
    start_step: int = _key(0, "int", _at_least(0))
    debias: bool = _key(True, "bool")


@dataclasses.dataclass(frozen=True)
class DataParallelSection(_Section):
    """Section ``data_parallel`` (boostax's; not MindSpore's): how a step
    given a ``mesh`` spreads its state.

    ``shard_optimizer_state``: split the optimizer state over the data
    axes (ZeRO-1, `DataParallel`); the same as
    ``auto_boost(..., shard_optimizer_state=True)``. Off by default: it
    takes elementwise optimizers only.

    ``shard_params``: with the optimizer state split, whether the float32
    params are stored split too and gathered at the start of each step
    (`DataParallel`'s ``shard_params``); the same as
    ``auto_boost(..., shard_params=...)``. ``None`` (default): decided when
    the step is built, split only under a half-precision policy without
    gradient freezing or accumulation.

    ``engine``: ``"shard_map"`` (default: the step runs per device, its
    collectives written out) or ``"jit"`` (the one-device step jitted over
    the global batch, XLA inserting the collectives; any Optax optimizer
    sharded, FSDP with ``shard_params``): `DataParallel`'s ``engine``.
    ``logical_axis_rules``: with ``"jit"``, Flax's logical axis rules, by
    which annotated params are placed (`DataParallel`'s).
    """

    NAME: ClassVar[str] = "data_parallel"
    shard_optimizer_state: bool = _key(False, "bool")
    shard_params: bool | None = _key(None, "optional_bool")
    # A str: checked below.
    engine: str = "shard_map"
    # (logical name, mesh axes) pairs: checked by DataParallel.
    logical_axis_rules: tuple | None = None

    def __post_init__(self):
        super().__post_init__()
        validation.check_one_of(
            "data_parallel.engine", self.engine, data_parallel_lib.ENGINES
        )
        rules = self.logical_axis_rules
        if rules is not None and not isinstance(rules, str):
            # JSON's lists as tuples (a frozen, hashable config); their
            # contents are checked by DataParallel with the mesh.
            object.__setattr__(
                self,
                "logical_axis_rules",
                tuple(
                    tuple(r) if isinstance(r, list | tuple) else r
                    for r in rules
                ),
            )


@dataclasses.dataclass(frozen=True)
class LabelSmoothingSection(_Section):
    """Section ``label_smoothing`` (boostax's; not MindSpore's): the step
    trains on smoothed class targets ``(1 - alpha) * onehot(y, K) + alpha
    / K`` (`boostax.label_smoothing_loss`, Composer's ``LabelSmoothing``).

    Off unless ``enabled`` (no level or mode switches it on: it changes
    the objective); then at any level. ``alpha`` in [0, 1) (Composer's
    default 0.1).
    """

    NAME: ClassVar[str] = "label_smoothing"
    enabled: bool = _key(False, "bool")
    alpha: float = _key(0.1, "float", _interval(0, 1, open_high=True))


@dataclasses.dataclass(frozen=True)
class TestTimeFlipsSection(_Section):
    """Section ``test_time_flips`` (boostax's; not MindSpore's):
    `TrainStep.predict` averages the model's outputs over the images and
    their ``flips`` (``"horizontal"``, ``"vertical"`` or both;
    `boostax.predict_with_flips`, airbench's test-time augmentation), and
    with ``translate`` pixels (0: none; airbench's 1) over each of those
    moved by ``+translate`` and ``-translate`` pixels too.

    Off unless ``enabled`` (no level or mode switches it on: a flip must
    keep the label); training is unchanged. ``flips`` may be empty only
    with a translation.
    """

    NAME: ClassVar[str] = "test_time_flips"
    enabled: bool = _key(False, "bool")
    # A str or a sequence of them: checked below.
    flips: tuple[str, ...] = ("horizontal",)
    translate: int = _key(0, "int", _at_least(0))

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(
            self,
            "flips",
            test_time_flips_lib.check_flips(
                self.flips,
                "test_time_flips.flips",
                allow_empty=self.translate > 0,
            ),
        )


SECTIONS: Mapping[str, type[_Section]] = {
    cls.NAME: cls
    for cls in (
        BoostSection,
        CommonSection,
        LessBNSection,
        GradFreezeSection,
        GradAccumulationSection,
        DimReduceSection,
        ProgressiveResizingSection,
        SeqLenWarmupSection,
        WeightAveragingSection,
        DataParallelSection,
        LabelSmoothingSection,
        TestTimeFlipsSection,
    )
}
