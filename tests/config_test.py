# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.config.boost_config`."""

import collections.abc
import contextlib
import dataclasses
import json
import os
import re
import tempfile
import warnings

from absl.testing import absltest, parameterized
from hypothesis import given, settings
from hypothesis import strategies as st

import boostax
from boostax import mindspore as boost
from boostax._src.config import boost_config as config_lib

# MindSpore's `boost_config_dict` with every default,
# plus `grad_accumulation.grad_accumulation_step` and `boost.loss_scale_group`.
SEED_DEFAULTS = {
    "boost": {
        "mode": "auto",
        "less_bn": False,
        "grad_freeze": False,
        "adasum": False,
        "grad_accumulation": False,
        "dim_reduce": False,
        "loss_scale_group": False,
    },
    "common": {"gradient_split_groups": [50, 100], "device_number": 8},
    "less_bn": {"fn_flag": True, "gc_flag": True},
    "grad_freeze": {
        "param_groups": 10,
        "freeze_type": 1,
        "freeze_p": 0.7,
        "total_steps": 65536,
    },
    "grad_accumulation": {"grad_accumulation_step": 1},
    "dim_reduce": {
        "rho": 0.55,
        "gamma": 0.9,
        "alpha": 0.001,
        "sigma": 0.4,
        "n_components": 32,
        "pca_mat_path": None,
        "weight_load_dir": None,
        "timeout": 1800,
    },
}

# Settings of algorithms that are off warn (they change nothing); these
# tests build such configs on purpose.
IGNORED_SETTINGS = r".*(is ignored: |has no effect|nothing to accumulate)"


@contextlib.contextmanager
def quiet_ignored_settings():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", IGNORED_SETTINGS, UserWarning)
        yield


LEVEL_TABLE = {
    "O0": (),
    "O1": ("less_bn", "grad_freeze"),
    "O2": ("less_bn", "grad_freeze", "adasum"),
}


class DefaultsTest(parameterized.TestCase):
    def test_every_default_equals_the_seeds(self):
        # boostax's own keys keep MindSpore's behaviour by default.
        defaults = boostax.BoostConfig().to_dict()
        extras = {"fn_scale": 1.0, "fn_log_scale": False}
        extras["zero_init_residual"] = False
        for key, value in extras.items():
            self.assertEqual(defaults["less_bn"].pop(key), value)
        # boostax's own sections (sequence-length warm-up, the sharded
        # optimizer state) are off.
        self.assertFalse(defaults.pop("seq_len_warmup")["enabled"])
        self.assertFalse(defaults.pop("progressive_resizing")["enabled"])
        self.assertFalse(defaults.pop("weight_averaging")["enabled"])
        self.assertEqual(
            defaults.pop("label_smoothing"), {"enabled": False, "alpha": 0.1}
        )
        self.assertEqual(
            defaults.pop("test_time_flips"),
            {"enabled": False, "flips": ["horizontal"], "translate": 0},
        )
        self.assertEqual(
            defaults.pop("data_parallel"),
            {
                "shard_optimizer_state": False,
                "shard_params": None,
                "engine": "shard_map",
                "logical_axis_rules": None,
            },
        )
        # fn_flag None: MindSpore's True where the FN head can work (a
        # classifier's logits), off on per-position outputs.
        self.assertIsNone(defaults["less_bn"]["fn_flag"])
        defaults["less_bn"]["fn_flag"] = True
        self.assertEqual(defaults, SEED_DEFAULTS)

    def test_empty_dict_none_and_empty_string_give_defaults(self):
        for config in (None, {}, ""):
            self.assertEqual(
                boostax.boost_config("O0", config), boostax.BoostConfig()
            )

    @parameterized.parameters("O0", "O1", "O2")
    def test_level_table(self, level):
        config = boostax.BoostConfig(level=level)
        self.assertEqual(config.enabled_algorithms, LEVEL_TABLE[level])
        for name in boostax.ALGORITHMS:
            self.assertEqual(
                config.is_enabled(name), name in LEVEL_TABLE[level]
            )

    def test_missing_keys_keep_defaults(self):
        config = boostax.BoostConfig.from_dict(
            {"grad_freeze": {"total_steps": 1000}}, level="O1"
        )
        self.assertEqual(config.grad_freeze.total_steps, 1000)
        self.assertEqual(config.grad_freeze.param_groups, 10)
        self.assertEqual(config.grad_freeze.freeze_p, 0.7)


class ModeTest(parameterized.TestCase):
    @parameterized.parameters("O0", "O1", "O2")
    def test_auto_follows_the_level(self, level):
        config = boostax.BoostConfig.from_dict(
            {"boost": {"mode": "auto"}}, level=level
        )
        self.assertEqual(config.enabled_algorithms, LEVEL_TABLE[level])

    def test_auto_warns_about_a_switch_it_ignores(self):
        with self.assertWarnsRegex(
            UserWarning, r"`boost.adasum=True` is ignored in mode 'auto'"
        ):
            config = boostax.BoostConfig.from_dict(
                {"boost": {"adasum": True}}, level="O1"
            )
        self.assertFalse(config.is_enabled("adasum"))

    def test_manual_keeps_the_levels_value_for_keys_not_given(self):
        # The seed's semantics: manual {"adasum": True} at O1 keeps less_bn
        # and grad_freeze on.
        config = boostax.BoostConfig.from_dict(
            {"boost": {"mode": "manual", "adasum": True}}, level="O1"
        )
        self.assertEqual(
            config.enabled_algorithms, ("less_bn", "grad_freeze", "adasum")
        )

    def test_manual_switches_off(self):
        config = boostax.BoostConfig.from_dict(
            {
                "boost": {
                    "mode": "manual",
                    "less_bn": False,
                    "grad_freeze": False,
                    "dim_reduce": True,
                }
            },
            level="O2",
        )
        self.assertEqual(config.enabled_algorithms, ("adasum", "dim_reduce"))

    @parameterized.parameters("O0", "O1", "O2")
    def test_enable_all_and_disable_all(self, level):
        self.enter_context(quiet_ignored_settings())
        on = boostax.BoostConfig.from_dict(
            {"boost": {"mode": "enable_all"}}, level=level
        )
        off = boostax.BoostConfig.from_dict(
            {"boost": {"mode": "disable_all"}}, level=level
        )
        self.assertEqual(on.enabled_algorithms, boostax.ALGORITHMS)
        self.assertEqual(off.enabled_algorithms, ())

    def test_direct_construction_resolves_switches(self):
        config = boostax.BoostConfig(
            level="O2",
            boost=boostax.config.BoostSection(mode="manual", adasum=False),
        )
        self.assertEqual(config.enabled_algorithms, ("less_bn", "grad_freeze"))


class WithSwitchesTest(absltest.TestCase):
    def test_manual_with_the_switches_changed_and_no_warning(self):
        with self.assertWarnsRegex(UserWarning, "is ignored"):
            config = boostax.BoostConfig.from_dict(
                {"grad_accumulation": {"grad_accumulation_step": 4}},
                level="O1",
            )
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once, when it was made
            changed = config_lib.with_switches(config, grad_freeze=False)
            kept = config_lib.with_switches(config)
        self.assertEqual(changed.mode, "manual")
        self.assertEqual(changed.enabled_algorithms, ("less_bn",))
        self.assertEqual(kept.enabled_algorithms, config.enabled_algorithms)
        self.assertEqual(changed.grad_accumulation, config.grad_accumulation)
        self.assertEqual(config.mode, "auto")  # `config` is unchanged
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertEqual(
                boostax.BoostConfig.from_dict(changed.to_dict(), level="O1"),
                changed,
            )

    def test_bad_switches(self):
        config = boostax.BoostConfig(level="O1")
        with self.assertRaisesRegex(ValueError, "`algorithm` must be one of"):
            config_lib.with_switches(config, less_b=False)
        with self.assertRaisesRegex(
            TypeError, "`boost.less_bn` must be a bool"
        ):
            config_lib.with_switches(config, less_bn=0)


class RoundTripTest(parameterized.TestCase):
    @parameterized.product(
        level=("O0", "O1", "O2"),
        mode=("auto", "manual", "enable_all", "disable_all"),
    )
    def test_dict_and_json_round_trip(self, level, mode):
        self.enter_context(quiet_ignored_settings())
        config = boostax.BoostConfig.from_dict(
            {
                "boost": {"mode": mode},
                "common": {"gradient_split_groups": [3], "device_number": 4},
                "grad_freeze": {"freeze_p": 0.5, "freeze_type": 0},
                "dim_reduce": {"pca_mat_path": "/tmp/pca.npy", "rho": 0.5},
            },
            level=level,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a clean round trip never warns
            warnings.filterwarnings("ignore", IGNORED_SETTINGS, UserWarning)
            self.assertEqual(
                boostax.BoostConfig.from_dict(config.to_dict(), level=level),
                config,
            )
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "boost.json")
                text = config.to_json(path)
                self.assertEqual(json.loads(text), config.to_dict())
                self.assertEqual(
                    boostax.BoostConfig.from_json(path, level=level), config
                )
                self.assertEqual(boostax.boost_config(level, path), config)
                self.assertEqual(boost.AutoBoost(level, path).config, config)

    @settings(max_examples=50, deadline=None)
    @given(
        level=st.sampled_from(boostax.LEVELS),
        switches=st.fixed_dictionaries(
            {}, optional={n: st.booleans() for n in boostax.ALGORITHMS}
        ),
        freeze_p=st.floats(0, 1),
        groups=st.lists(st.integers(0, 1000), max_size=4),
        rho=st.floats(0.01, 0.99),
        steps=st.integers(1, 2**24),
    )
    def test_round_trip_property(
        self, level, switches, freeze_p, groups, rho, steps
    ):
        self.enter_context(quiet_ignored_settings())
        config = boostax.BoostConfig.from_dict(
            {
                "boost": {"mode": "manual", **switches},
                "common": {"gradient_split_groups": groups},
                "grad_freeze": {"freeze_p": freeze_p, "total_steps": steps},
                "dim_reduce": {"rho": rho},
            },
            level=level,
        )
        again = boostax.BoostConfig.from_dict(
            json.loads(config.to_json()), level=level
        )
        self.assertEqual(again, config)
        for name, value in switches.items():
            self.assertEqual(config.is_enabled(name), value)


class ImmutabilityTest(absltest.TestCase):
    def test_frozen(self):
        config = boostax.BoostConfig()
        with self.assertRaises(dataclasses.FrozenInstanceError):
            config.level = "O1"
        with self.assertRaises(dataclasses.FrozenInstanceError):
            config.grad_freeze.freeze_p = 0.1

    def test_two_configs_side_by_side(self):
        # MindSpore's AutoBoost is a process singleton; ours are values.
        first = boost.AutoBoost("O1", {"grad_freeze": {"total_steps": 10}})
        second = boost.AutoBoost(
            "O0", {"boost": {"mode": "manual", "adasum": True}}
        )
        self.assertEqual(first.config.grad_freeze.total_steps, 10)
        self.assertEqual(second.config.grad_freeze.total_steps, 65536)
        self.assertEqual(
            first.config.enabled_algorithms, ("less_bn", "grad_freeze")
        )
        self.assertEqual(second.config.enabled_algorithms, ("adasum",))
        self.assertEqual(boostax.BoostConfig(level="O0").enabled_algorithms, ())

    def test_gradient_split_groups_normalized(self):
        with self.assertWarnsRegex(UserWarning, "has no effect in boostax"):
            config = boostax.BoostConfig.from_dict(
                {"common": {"gradient_split_groups": 7}}
            )
        self.assertEqual(config.common.gradient_split_groups, (7,))
        self.assertEqual(
            config.to_dict()["common"]["gradient_split_groups"], [7]
        )


class _ConfigDict:
    """What ml_collections' ``ConfigDict`` offers a reader: attributes and a
    recursive ``to_dict()``, but no Mapping interface (ml_collections is
    not a dependency)."""

    def __init__(self, values):
        for key, value in values.items():
            if isinstance(value, dict):
                value = _ConfigDict(value)
            setattr(self, key, value)

    def to_dict(self):
        return {
            k: v.to_dict() if isinstance(v, _ConfigDict) else v
            for k, v in vars(self).items()
        }


class _Sections(collections.abc.Mapping):
    """A read-only Mapping that is not a dict."""

    def __init__(self, values):
        self._values = values

    def __getitem__(self, key):
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


class ConfigDictTest(absltest.TestCase):
    CONFIG = {
        "boost": {"mode": "manual", "grad_accumulation": True},
        "grad_accumulation": {"grad_accumulation_step": 4},
    }

    def test_config_dict_and_mappings_read_as_the_dict(self):
        # A ConfigDict (Flax's examples' config) was refused: "must be a
        # boost config dict ..., got ConfigDict".
        expected = boostax.boost_config("O1", self.CONFIG)
        given = {
            "ConfigDict": _ConfigDict(self.CONFIG),
            "Mapping": _Sections(self.CONFIG),
            "Mapping of ConfigDicts": _Sections(
                {k: _ConfigDict(v) for k, v in self.CONFIG.items()}
            ),
        }
        for name, config in given.items():
            with self.subTest(name):
                self.assertEqual(boostax.boost_config("O1", config), expected)
                self.assertEqual(
                    boostax.BoostConfig.from_dict(config, level="O1"),
                    expected,
                )
        # Its keys are still checked.
        with self.assertRaisesRegex(
            ValueError, "Unknown key 'grad_accumulation_steps'"
        ):
            boostax.boost_config(
                "O0",
                _ConfigDict(
                    {"grad_accumulation": {"grad_accumulation_steps": 2}}
                ),
            )

    def test_a_boost_config_is_no_dict_of_sections(self):
        # BoostConfig has a to_dict() too, without its level: from_dict
        # must not read it at another level.
        with self.assertRaisesRegex(
            TypeError, "must be a dict of sections, got BoostConfig"
        ):
            boostax.BoostConfig.from_dict(
                boostax.BoostConfig(level="O1"), level="O0"
            )


class ErrorTest(parameterized.TestCase):
    def _load(self, config, level="O0"):
        return boostax.BoostConfig.from_dict(config, level=level)

    @parameterized.parameters(
        ("O3", ValueError),
        ("o1", ValueError),
        ("", ValueError),
        (None, TypeError),
        (1, TypeError),
    )
    def test_bad_level(self, level, error):
        given = (
            repr(level) if error is ValueError else f"{type(level).__name__}"
        )
        with self.assertRaisesRegex(
            error,
            r"`level` must be one of \['O0', 'O1', 'O2'\].*got "
            + re.escape(given),
        ):
            boostax.BoostConfig(level=level)
        with self.assertRaisesRegex(error, "`level` must be one of"):
            self._load({}, level=level)
        with self.assertRaisesRegex(error, "`level` must be one of"):
            boost.AutoBoost(level)

    @parameterized.parameters("fast", "Auto", 1, None)
    def test_bad_mode(self, mode):
        with self.assertRaisesRegex(
            ValueError,
            r"`boost.mode` must be one of \['auto', 'manual', 'enable_all', "
            r"'disable_all'\], got " + repr(mode),
        ):
            self._load({"boost": {"mode": mode}})

    @parameterized.named_parameters(
        (
            "section_typo",
            {"grad_freez": {}},
            r"Unknown section 'grad_freez'"
            r".*Did you mean 'grad_freeze'\?.*Valid sections: \['boost'",
        ),
        (
            "section_unrelated",
            {"xyz": {}},
            r"Unknown section 'xyz' in the "
            r"boost config\. Valid sections",
        ),
        (
            "key_typo",
            {"dim_reduce": {"n_component": 8}},
            r"Unknown key "
            r"'n_component' in section 'dim_reduce'\. Did you mean "
            r"'n_components'\?.*Valid keys of 'dim_reduce': \['rho'",
        ),
        (
            "key_in_wrong_section",
            {"common": {"grad_accumulation_step": 4}},
            r"Unknown key 'grad_accumulation_step' in section 'common'\. "
            r"'grad_accumulation_step' belongs in section 'grad_accumulation'",
        ),
        (
            "mindspore_tutorial_key",
            {"common": {"device_num": 8}},
            r"Unknown key 'device_num'.*Did you mean 'device_number'\?",
        ),
        (
            "switch_typo",
            {"boost": {"lessbn": True}},
            r"Did you mean 'less_bn'\?",
        ),
    )
    def test_unknown_names(self, config, message):
        with self.assertRaisesRegex(ValueError, message):
            self._load(config)

    @parameterized.named_parameters(
        (
            "int_as_str",
            "grad_freeze",
            "param_groups",
            "10",
            r"`grad_freeze.param_groups` must be an int, got str \('10'\)",
        ),
        (
            "int_as_float",
            "grad_freeze",
            "total_steps",
            10.0,
            r"`grad_freeze.total_steps` must be an int, got float",
        ),
        (
            "int_as_bool",
            "common",
            "device_number",
            True,
            r"`common.device_number` must be an int, got bool",
        ),
        (
            "bool_as_int",
            "less_bn",
            "fn_flag",
            1,
            r"`less_bn.fn_flag` must be a bool, got int \(1\)",
        ),
        (
            "switch_as_str",
            "boost",
            "adasum",
            "yes",
            r"`boost.adasum` must be a bool, got str",
        ),
        (
            "float_as_str",
            "grad_freeze",
            "freeze_p",
            "0.5",
            r"`grad_freeze.freeze_p` must be a finite number, got str",
        ),
        (
            "list_as_str",
            "common",
            "gradient_split_groups",
            "50",
            r"`common.gradient_split_groups` must be a list of ints",
        ),
        (
            "list_of_floats",
            "common",
            "gradient_split_groups",
            [1.5],
            r"`common.gradient_split_groups` must be a list of ints",
        ),
        (
            "path_as_int",
            "dim_reduce",
            "pca_mat_path",
            3,
            r"`dim_reduce.pca_mat_path` must be a path",
        ),
    )
    def test_wrong_type(self, section, key, value, message):
        with self.assertRaisesRegex(TypeError, message):
            self._load({section: {key: value}})

    @parameterized.named_parameters(
        ("freeze_p_low", "grad_freeze", "freeze_p", -0.1, r"in \[0, 1\]"),
        ("freeze_p_high", "grad_freeze", "freeze_p", 1.5, r"in \[0, 1\]"),
        ("freeze_type", "grad_freeze", "freeze_type", 3, r"one of \[0, 1, 2\]"),
        ("param_groups", "grad_freeze", "param_groups", 0, ">= 1"),
        (
            "total_steps",
            "grad_freeze",
            "total_steps",
            -5,
            r"in \[1, 16777216\] \(.*\)",
        ),
        (
            "total_steps_high",
            "grad_freeze",
            "total_steps",
            10**12,
            r"in \[1, 16777216\] \(the freeze sequence holds one int32 per "
            r"step, computed before training\)",
        ),
        ("n_components", "dim_reduce", "n_components", 0, ">= 1"),
        ("device_number", "common", "device_number", 0, ">= 1"),
        ("timeout", "dim_reduce", "timeout", -1, ">= 0"),
        ("rho_zero", "dim_reduce", "rho", 0, r"in \(0, 1\)"),
        ("rho_one", "dim_reduce", "rho", 1.0, r"in \(0, 1\)"),
        ("gamma", "dim_reduce", "gamma", 1.2, r"in \[0, 1\)"),
        ("gamma_one", "dim_reduce", "gamma", 1.0, r"in \[0, 1\)"),
        ("gamma_negative", "dim_reduce", "gamma", -0.1, r"in \[0, 1\)"),
        ("sigma", "dim_reduce", "sigma", 0.0, r"in \(0, 1\)"),
        ("alpha", "dim_reduce", "alpha", -0.001, ">= 0"),
        (
            "accumulation",
            "grad_accumulation",
            "grad_accumulation_step",
            0,
            ">= 1",
        ),
        ("split_point", "common", "gradient_split_groups", [10, -1], ">= 0"),
    )
    def test_out_of_range(self, section, key, value, allowed):
        with self.assertRaisesRegex(
            ValueError,
            rf"`{section}.{key}` must be {allowed}, got "
            + repr(tuple(value) if isinstance(value, list) else value)
            .replace("(", r"\(")
            .replace(")", r"\)"),
        ):
            self._load({section: {key: value}})

    def test_bounds_are_allowed(self):
        self.enter_context(quiet_ignored_settings())
        config = self._load(
            {
                "grad_freeze": {"freeze_p": 0, "param_groups": 1},
                "dim_reduce": {"alpha": 0, "timeout": 0},
            }
        )
        self.assertEqual(config.grad_freeze.freeze_p, 0.0)
        # gamma = 0 (no residual momentum), as `boostax.dim_reduce` accepts.
        self.assertEqual(
            self._load({"dim_reduce": {"gamma": 0}}).dim_reduce.gamma, 0.0
        )
        self.assertEqual(
            self._load({"grad_freeze": {"freeze_p": 1}}).grad_freeze.freeze_p,
            1.0,
        )

    def test_section_not_a_dict(self):
        with self.assertRaisesRegex(
            TypeError, r"Section 'grad_freeze' must be a dict, got int"
        ):
            self._load({"grad_freeze": 3})

    def test_config_not_a_dict(self):
        with self.assertRaisesRegex(TypeError, "must be a dict of sections"):
            self._load([("boost", {})])

    def test_config_for_another_level(self):
        with self.assertRaisesRegex(
            ValueError, "was built for level 'O1' but `level` is 'O0'"
        ):
            boostax.boost_config("O0", boostax.BoostConfig(level="O1"))

    def test_unknown_algorithm_name(self):
        with self.assertRaisesRegex(
            ValueError, r"`algorithm` must be one of .*Did you mean 'adasum'"
        ):
            boostax.BoostConfig().is_enabled("adasun")

    def test_missing_json_file(self):
        with self.assertRaisesRegex(
            FileNotFoundError,
            "`config` must be a boost config dict.*'/nonexistent/boost.json',"
            " which names no file",
        ):
            boostax.boost_config("O0", "/nonexistent/boost.json")

    def test_malformed_json_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "boost.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write('{"boost": {"mode": "auto",}}\n')
            with self.assertRaisesRegex(
                ValueError,
                rf"The boost config file '{re.escape(path)}' is not valid "
                r"JSON: .* at line 1, column 27 \(character 26\)",
            ):
                boostax.boost_config("O0", path)

    def test_level_given_as_config(self):
        with self.assertRaisesRegex(
            ValueError,
            "`config` must be a boost config dict.*got the level string 'O1'."
            " The level is the first argument",
        ):
            boostax.boost_config("O1", "O1")
        with self.assertRaisesRegex(
            ValueError, "`boost_config_dict` must be .*level string 'O2'"
        ):
            boost.AutoBoost("O1", "O2")
        with self.assertRaisesRegex(TypeError, "`config` must be .*got int"):
            boostax.boost_config("O0", 3)


if __name__ == "__main__":
    absltest.main()
