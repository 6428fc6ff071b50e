from __future__ import annotations

import pytest

from loadtune.asked.config import apply_override, load_config
from loadtune.core.errors import ConfigError
from tests.conftest import tiny_config


def error_of(write_config, config, overrides=(), scale=1.0) -> str:
    path = write_config(config)
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides, scale)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_valid_config_loads_with_defaults(write_config):
    spec = load_config(write_config(tiny_config()))
    assert spec.config.loader.batch_size == 8
    assert spec.config.loader.shuffle is False
    assert spec.config.measure.epoch_batches is None
    assert spec.name == "tiny"
    assert len(spec.sha) == 12


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"loader": {"num_workers": -1}}, "loader.num_workers = -1"),
        ({"loader": {"num_workers": "2"}}, "loader.num_workers = '2'"),
        ({"loader": {"batch_size": 0}}, "loader.batch_size = 0"),
        ({"loader": {"bogus": 1}}, "loader.bogus: unknown key"),
        ({"measure": {"batches": 0}}, "measure.batches = 0"),
        ({"measure": {"timeout_s": 0}}, "measure.timeout_s = 0"),
        ({"device": "gpu"}, "device = 'gpu'"),
        ({"step": {}}, "step: give exactly one of sleep_s, busy_s, factory"),
        ({"step": {"sleep_s": 0.1, "busy_s": 0.1}}, "step: give exactly one"),
        ({"loader": {"num_workers": 0, "prefetch_factor": 2}}, "prefetch_factor needs num_workers > 0"),
        ({"sweep": {"num_workers": [0, -2]}}, "sweep.num_workers[1] = -2"),
        ({"sweep": {"pin_memory": ["yes"]}}, "sweep.pin_memory[0] = 'yes'"),
        ({"sweep": {"threads": [1]}}, "sweep.threads: unknown key"),
        ({"sweep": {"collate_fn": ["a:b"]}}, "sweep.collate_fn: unknown key"),
        ({"sweep": {"num_workers": []}}, "sweep.num_workers: give at least one value"),
        ({"sweep": {"num_workers": [True]}}, "sweep.num_workers[0] = True"),
        ({"dataset": {"factory": "no_colon"}}, "dataset.factory = 'no_colon'"),
        ({"dataset": {"factory": "m:f", "scale_kwarg": "n"}}, "scale_kwarg 'n' is not a key"),
    ],
)
def test_bad_values_name_their_key(write_config, changes, expected):
    config = tiny_config()
    for key, value in changes.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and key != "step" else value
    assert expected in error_of(write_config, config)


def test_unknown_top_level_key(write_config):
    assert "stepp: unknown key" in error_of(write_config, {**tiny_config(), "stepp": {}})


def test_missing_required_block(write_config):
    config = tiny_config()
    del config["dataset"]
    assert "dataset: required key is missing" in error_of(write_config, config)


def test_yaml_syntax_error_names_line_and_column(write_config):
    message = error_of(write_config, "name: x\nloader: {batch_size: 4\nstep: {sleep_s: 1}\n")
    assert "could not parse YAML" in message
    assert "config.yaml:3:" in message


def test_empty_and_non_mapping_files(write_config):
    assert "empty" in error_of(write_config, "")
    assert "mapping" in error_of(write_config, "- 1\n- 2\n")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_overrides_are_parsed_as_yaml(write_config):
    spec = load_config(write_config(tiny_config()),
                       ["loader.batch_size=16", "measure.repeats=5", "sweep.num_workers=[0, 4]",
                        "loader.pin_memory=true", "measure.epoch_batches=null"])
    assert spec.config.loader.batch_size == 16
    assert spec.config.measure.repeats == 5
    assert spec.config.sweep["num_workers"] == [0, 4]
    assert spec.config.loader.pin_memory is True


def test_override_errors(write_config):
    path = write_config(tiny_config())
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(path, ["loader.batch_size"])
    with pytest.raises(ConfigError, match=r"loader.batch_size = 'big'"):
        load_config(path, ["loader.batch_size=big"])
    with pytest.raises(ConfigError, match="name is not a mapping"):
        load_config(path, ["name.sub=1"])


def test_apply_override_creates_missing_levels():
    assert apply_override({}, "a.b.c=3") == {"a": {"b": {"c": 3}}}


def test_scale_multiplies_and_rounds(write_config):
    path = write_config(tiny_config())
    assert load_config(path, scale=4).config.dataset.kwargs["num_samples"] == 1600
    assert load_config(path, scale=0.5).config.dataset.kwargs["num_samples"] == 200
    assert load_config(path, scale=0.001).config.dataset.kwargs["num_samples"] == 1
    assert load_config(path, scale=4).sha == load_config(path).sha, "scale is its own column"
    assert load_config(path, ["loader.batch_size=2"]).sha != load_config(path).sha


def test_scale_needs_scale_kwarg(write_config):
    config = tiny_config()
    del config["dataset"]["scale_kwarg"]
    assert "--scale needs dataset.scale_kwarg" in error_of(write_config, config, scale=2)


def test_sha_ignores_output_path(write_config):
    a = load_config(write_config({**tiny_config(), "output": "a.csv"}, "a.yaml"))
    b = load_config(write_config({**tiny_config(), "output": "b.csv"}, "b.yaml"))
    assert a.sha == b.sha
