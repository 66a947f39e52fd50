# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`BoostConfig`: levels, modes and hyper-parameters of boostax's algorithms.

The dictionary format is the one of MindSpore's ``AutoBoost``
(``boost_config_dict``): top-level *sections* (``boost``, ``common``,
``less_bn``, ``grad_freeze``, ``grad_accumulation``, ``dim_reduce``) holding
*keys*. Unlike MindSpore, every section and key is validated (unknown names,
wrong types and out-of-range values raise), configurations are immutable
values (no process-wide singleton) and an unknown level is an error.
The sections and their keys are `config_sections`'; this module reads a
configuration into them and resolves the level's and mode's switches.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
from collections.abc import Mapping
from typing import Any

from boostax._src import user_warnings, validation
from boostax._src.config.fields import coerce as _coerce
from boostax._src.config.sections import (
    ALGORITHMS,
    SECTIONS,
    BoostSection,
    CommonSection,
    DataParallelSection,
    DimReduceSection,
    GradAccumulationSection,
    GradFreezeSection,
    LabelSmoothingSection,
    LessBNSection,
    ProgressiveResizingSection,
    SeqLenWarmupSection,
    TestTimeFlipsSection,
    WeightAveragingSection,
)

#: The boost levels, as MindSpore names them: ``"O0"`` (no algorithm),
#: ``"O1"`` (LessBN and gradient freezing), ``"O2"`` (O1 and AdaSum).
LEVELS = ("O0", "O1", "O2")
# MindSpore's level table (`_boost_config_level`): the algorithms each level
# switches on in mode "auto".
LEVEL_ALGORITHMS: Mapping[str, frozenset[str]] = {
    "O0": frozenset(),
    "O1": frozenset({"less_bn", "grad_freeze"}),
    "O2": frozenset({"less_bn", "grad_freeze", "adasum"}),
}


def check_level(level: Any) -> str:
    """Returns `level` if it is one of `LEVELS`.

    Raises:
      TypeError: `level` is not a str.
      ValueError: `level` is a str but not one of `LEVELS`.
    """
    return validation.check_one_of("level", level, LEVELS)


def _closest(name: str, candidates) -> str:
    match = difflib.get_close_matches(str(name), list(candidates), n=1)
    return f" Did you mean {match[0]!r}?" if match else ""


def _check_names(config: Mapping) -> None:
    """Raises for an unknown section or key, naming the closest valid one."""
    for section, values in config.items():
        if section not in SECTIONS:
            raise ValueError(
                f"Unknown section {section!r} in the boost config."
                f"{_closest(section, SECTIONS)} Valid sections: "
                f"{list(SECTIONS)}."
            )
        if not isinstance(values, Mapping):
            raise TypeError(
                f"Section {section!r} must be a dict, {validation.got(values)}."
            )
        valid = [f.name for f in dataclasses.fields(SECTIONS[section])]
        for key in values:
            if key in valid:
                continue
            owner = [s for s, c in SECTIONS.items() if key in _field_names(c)]
            hint = (
                f" {key!r} belongs in section {owner[0]!r}."
                if owner
                else _closest(key, valid)
            )
            raise ValueError(
                f"Unknown key {key!r} in section {section!r}.{hint} "
                f"Valid keys of {section!r}: {valid}."
            )


def _has_to_dict(value) -> bool:
    return callable(getattr(value, "to_dict", None))


def _plain_dict(value, default=None) -> Any:
    """`value` as a plain dict: a Mapping, or what its ``to_dict()`` gives
    (ml_collections' ``ConfigDict``, which Flax's examples use, is not a
    Mapping); `default` for anything else."""
    if _has_to_dict(value) and not isinstance(value, BoostConfig):
        value = value.to_dict()
    return dict(value) if isinstance(value, Mapping) else default


def _field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _resolve_switches(level: str, boost: BoostSection) -> BoostSection:
    """Gives every switch the bool its level and mode imply.

    auto: the level's switches; manual: the given switches, the level's for
    the others; enable_all / disable_all: all on / all off. In the modes that
    do not read the switches, a given switch that disagrees is reported.
    """
    given = boost.switches()
    if boost.mode == "manual":
        resolved: dict[str, Any] = {
            name: (name in LEVEL_ALGORITHMS[level]) if value is None else value
            for name, value in given.items()
        }
        return dataclasses.replace(boost, **resolved)
    if boost.mode == "auto":
        resolved = {name: name in LEVEL_ALGORITHMS[level] for name in given}
        why = f"level {level!r} sets it to"
    else:
        on = boost.mode == "enable_all"
        resolved = {name: on for name in given}
        why = "this mode sets it to"
    for name, value in given.items():
        if value is not None and value != resolved[name]:
            user_warnings.warn(
                f"`boost.{name}={value}` is ignored in mode "
                f"{boost.mode!r}: {why} {resolved[name]}. Use mode 'manual' "
                "to choose the algorithms yourself.",
                UserWarning,
            )
    return dataclasses.replace(boost, **resolved)


# The section of each algorithm's hyper-parameters, and the `common` keys
# only one algorithm reads.
_SECTION_OF = {
    "less_bn": "less_bn",
    "grad_freeze": "grad_freeze",
    "grad_accumulation": "grad_accumulation",
    "dim_reduce": "dim_reduce",
}
_COMMON_KEY_OF = {"device_number": "adasum"}


def _changed_keys(section) -> list[str]:
    """The keys of `section` that differ from their defaults."""
    default = type(section)()
    return [
        f"{section.NAME}.{f.name}={getattr(section, f.name)!r}"
        for f in dataclasses.fields(section)
        if getattr(section, f.name) != getattr(default, f.name)
    ]


def _warn_ignored_settings(config: BoostConfig) -> None:
    """Warns about settings that change nothing in `config`.

    MindSpore silently drops the sections of algorithms that are off; a
    value that would change training is worth a word (a value left at its
    default changes nothing, so MindSpore's full example dict stays quiet).
    """
    where = f"at level {config.level!r} in mode {config.mode!r}"
    for algorithm in _SECTION_OF:
        changed = ignored_settings(config, algorithm)
        if changed and not config.is_enabled(algorithm):
            user_warnings.warn(
                f"{', '.join(f'`{c}`' for c in changed)} is ignored: "
                f"`{algorithm}` is off {where}. Switch it on with "
                f"{{'boost': {{'mode': 'manual', '{algorithm}': True}}}}, or "
                "drop the setting.",
                UserWarning,
            )
    common = config.common
    for key, algorithm in _COMMON_KEY_OF.items():
        default = getattr(CommonSection(), key)
        if getattr(common, key) != default and not config.is_enabled(algorithm):
            user_warnings.warn(
                f"`common.{key}={getattr(common, key)!r}` is ignored: only "
                f"`{algorithm}` reads it, and it is off {where}.",
                UserWarning,
            )
    if common.gradient_split_groups != CommonSection().gradient_split_groups:
        user_warnings.warn(
            "`common.gradient_split_groups` has no effect in boostax: it "
            "places MindSpore's gradient all-reduce fusion points, and XLA "
            "schedules and fuses collectives itself.",
            UserWarning,
        )
    for section in (
        config.seq_len_warmup,
        config.progressive_resizing,
        config.weight_averaging,
        config.test_time_flips,
    ):
        changed = [c for c in _changed_keys(section) if "enabled" not in c]
        if changed and not section.enabled:
            user_warnings.warn(
                f"{', '.join(f'`{c}`' for c in changed)} is ignored: "
                f"`{section.NAME}.enabled` is False. Set it True, or drop "
                "the setting.",
                UserWarning,
            )
    if (
        config.mode == "manual"  # the user switched it on (no level does)
        and config.is_enabled("grad_accumulation")
        and config.grad_accumulation.grad_accumulation_step == 1
    ):
        user_warnings.warn(
            "`grad_accumulation` is on with `grad_accumulation."
            "grad_accumulation_step` 1: there is nothing to accumulate, and "
            "every step updates (set the micro-steps per update, e.g. 4).",
            UserWarning,
        )
    smoothing = config.label_smoothing
    if (
        smoothing.alpha != LabelSmoothingSection().alpha
        and not smoothing.enabled
    ):
        user_warnings.warn(
            f"`label_smoothing.alpha={smoothing.alpha!r}` is ignored: "
            "`label_smoothing.enabled` is False. Set it True, or drop the "
            "setting.",
            UserWarning,
        )


@dataclasses.dataclass(frozen=True)
class BoostConfig:
    """An immutable, validated boostax configuration.

    A configuration is a `level` (``"O0"``, ``"O1"`` or ``"O2"``) and the
    sections of MindSpore's ``boost_config_dict``. The ``boost`` section's
    `mode` decides which algorithms run:

    =========== =========================================================
    mode        algorithms switched on
    =========== =========================================================
    auto        the level's: O0 none; O1 less_bn, grad_freeze; O2 O1 + adasum
                (`auto_boost`: less_bn and grad_freeze only on a model
                with BatchNorm)
    manual      the switches given in ``boost``; the others keep the level's
    enable_all  all of them
    disable_all none
    =========== =========================================================

    Every key has MindSpore's default. Unknown sections or keys raise
    `ValueError` (naming the closest valid name), wrong types `TypeError`,
    out-of-range values `ValueError`. Two configurations can live side by side:
    nothing is global.

    Args:
      level: ``"O0"``, ``"O1"`` or ``"O2"``.
      boost, common, less_bn, grad_freeze, grad_accumulation, dim_reduce: the
        sections, each a frozen dataclass with MindSpore's defaults.
      progressive_resizing: boostax's progressive image resizing (off by
        default; not with `seq_len_warmup`).
      seq_len_warmup: boostax's sequence-length warm-up (off by default).
      weight_averaging: boostax's moving average of the params (off by
        default).
      data_parallel: boostax's: how a data-parallel step spreads its state
        (``shard_optimizer_state``, off by default; ``shard_params``,
        decided when the step is built by default).
      label_smoothing: boostax's label smoothing of the class targets (off
        by default).
      test_time_flips: boostax's averaging of `TrainStep.predict` over
        flipped images (off by default).

    Example:
      >>> import boostax
      >>> config = boostax.BoostConfig.from_dict(
      ...     {"boost": {"mode": "manual", "grad_freeze": False},
      ...      "less_bn": {"fn_flag": False}},
      ...     level="O1")
      >>> config.enabled_algorithms
      ('less_bn',)
      >>> config.less_bn.fn_flag
      False

    A setting of an algorithm that is off changes nothing, and warns (with
    values other than the defaults; MindSpore drops it silently).
    """

    level: str = "O0"
    boost: BoostSection = BoostSection()
    common: CommonSection = CommonSection()
    less_bn: LessBNSection = LessBNSection()
    grad_freeze: GradFreezeSection = GradFreezeSection()
    grad_accumulation: GradAccumulationSection = GradAccumulationSection()
    dim_reduce: DimReduceSection = DimReduceSection()
    progressive_resizing: ProgressiveResizingSection = (
        ProgressiveResizingSection()
    )
    seq_len_warmup: SeqLenWarmupSection = SeqLenWarmupSection()
    weight_averaging: WeightAveragingSection = WeightAveragingSection()
    data_parallel: DataParallelSection = DataParallelSection()
    label_smoothing: LabelSmoothingSection = LabelSmoothingSection()
    test_time_flips: TestTimeFlipsSection = TestTimeFlipsSection()

    def __post_init__(self):
        check_level(self.level)
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise TypeError(
                    f"`{name}` must be a {cls.__name__}, got "
                    f"{type(getattr(self, name)).__name__}."
                )
        object.__setattr__(
            self, "boost", _resolve_switches(self.level, self.boost)
        )
        _warn_ignored_settings(self)

    @classmethod
    def from_dict(
        cls, config: Mapping[str, Mapping[str, Any]] | None, *, level="O0"
    ) -> BoostConfig:
        """Builds a configuration from a MindSpore-style dict.

        Args:
          config: ``{section: {key: value}}``, as dicts, other Mappings or
            objects with a ``to_dict()`` (an ml_collections ``ConfigDict``);
            ``None`` or ``{}`` gives the level's defaults. Keys left out
            keep their defaults.
          level: ``"O0"``, ``"O1"`` or ``"O2"``.

        Returns:
          The validated `BoostConfig`.
        """
        check_level(level)
        if config is None:
            config = {}
        given, config = config, _plain_dict(config)
        if config is None:
            raise TypeError(
                "The boost config must be a dict of sections, "
                f"{validation.got(given)}."
            )
        # Sections as dicts too; what is none `_check_names` refuses.
        config = {k: _plain_dict(v, default=v) for k, v in config.items()}
        _check_names(config)
        sections: dict[str, Any] = {
            name: SECTIONS[name](**values) for name, values in config.items()
        }
        return cls(level=level, **sections)

    @classmethod
    def from_json(cls, path: str | os.PathLike, *, level="O0") -> BoostConfig:
        """Reads a MindSpore-style config dict from the JSON file `path`.

        Raises:
          FileNotFoundError: if there is no file `path`.
          ValueError: if the file is not valid JSON (naming the file and the
            line and column), or holds an invalid config.
        """
        with open(path, encoding="utf-8") as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"The boost config file {os.fspath(path)!r} is not valid "
                    f"JSON: {e.msg} at line {e.lineno}, column {e.colno} "
                    f"(character {e.pos})."
                ) from e
        return cls.from_dict(config, level=level)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Returns the config as a JSON-serializable dict (without `level`).

        ``BoostConfig.from_dict(c.to_dict(), level=c.level) == c``.
        """
        return {name: getattr(self, name).to_dict() for name in SECTIONS}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """Returns `to_dict()` as JSON text, written to `path` if given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    @property
    def mode(self) -> str:
        return self.boost.mode

    @property
    def enabled_algorithms(self) -> tuple[str, ...]:
        """The algorithms switched on, in `ALGORITHMS` order."""
        return tuple(name for name in ALGORITHMS if getattr(self.boost, name))

    def is_enabled(self, algorithm: str) -> bool:
        """Whether `algorithm` (one of `ALGORITHMS`) is switched on."""
        if algorithm not in ALGORITHMS:
            raise ValueError(
                f"`algorithm` must be one of {list(ALGORITHMS)}, got "
                f"{algorithm!r}.{_closest(algorithm, ALGORITHMS)}"
            )
        return getattr(self.boost, algorithm)


def with_switches(config: BoostConfig, **switches: bool) -> BoostConfig:
    """`config` in mode ``"manual"``, with `switches` changed.

    For a choice made when the step is built (`auto_boost` on a model
    without BatchNorm; `boostax.mindspore.AutoBoost` keeping the level's
    switches whatever the model): the result records what runs. The config
    was checked (and warned about) when it was made; nothing is re-checked.

    Args:
      config: a validated configuration.
      **switches: ``algorithm=bool`` for algorithms of `ALGORITHMS`.

    Returns:
      A `BoostConfig` whose switches are `config`'s, updated by `switches`.
    """
    for name, value in switches.items():
        config.is_enabled(name)  # raises on an unknown name
        _coerce(f"boost.{name}", "bool", value)
    boost = dataclasses.replace(config.boost, mode="manual", **switches)
    # Every switch is already a bool, which mode "manual" keeps: building
    # anew would only repeat the warnings `config` gave when it was made.
    result = copy.copy(config)
    object.__setattr__(result, "boost", boost)
    return result


def ignored_settings(config: BoostConfig, algorithm: str) -> list[str]:
    """The keys of `algorithm`'s section that differ from their defaults:
    what would go unused with `algorithm` off."""
    section = _SECTION_OF.get(algorithm)
    return [] if section is None else _changed_keys(getattr(config, section))


def boost_config(
    level: str = "O0",
    config: BoostConfig | Mapping | str | os.PathLike | None = None,
    *,
    argument: str = "config",
) -> BoostConfig:
    """Turns any accepted form of configuration into a `BoostConfig`.

    Args:
      level: ``"O0"``, ``"O1"`` or ``"O2"``.
      config: ``None`` or ``""`` (the level's defaults), a MindSpore-style
        dict (or Mapping, or ml_collections ``ConfigDict``), the path of
        a JSON file holding one, or a `BoostConfig` (whose level must equal
        `level`).
      argument: the caller's name for `config`, for error messages.

    Returns:
      A validated `BoostConfig`.

    Raises:
      ValueError: for an invalid level or config, a level string given as
        the config, or a config file that is not valid JSON.
      FileNotFoundError: for a config path naming no file.
    """
    check_level(level)
    accepted = (
        "a boost config dict, a BoostConfig, the path of a JSON file holding "
        "one, or None for the level's defaults"
    )
    if isinstance(config, str) and config.upper() in LEVELS:
        # auto_boost("O1", "O1"): the level given twice, read as a path.
        raise ValueError(
            f"`{argument}` must be {accepted}; got the level string "
            f"{config!r}. The level is the first argument "
            f"({level!r} here): pass the config second, or leave it out."
        )
    if isinstance(config, (str, os.PathLike)) and config != "":
        if not os.path.isfile(config):
            raise FileNotFoundError(
                f"`{argument}` must be {accepted}; got {os.fspath(config)!r},"
                " which names no file."
            )
    if isinstance(config, BoostConfig):
        if config.level != level:
            raise ValueError(
                f"`{argument}` was built for level {config.level!r} but "
                f"`level` is {level!r}; pass the same level or a dict."
            )
        return config
    if config is None or (isinstance(config, str) and config == ""):
        return BoostConfig(level=level)
    if isinstance(config, (str, os.PathLike)):
        return BoostConfig.from_json(config, level=level)
    if not (isinstance(config, Mapping) or _has_to_dict(config)):
        raise TypeError(
            f"`{argument}` must be {accepted}; {validation.got(config)}."
        )
    return BoostConfig.from_dict(config, level=level)
