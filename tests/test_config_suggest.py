"""An unknown config key is refused with the known key nearest to it, in every block (dataset,
loader, sweep, step, measure, the top level) and from --set, and with none when none is near."""

from __future__ import annotations

import pytest

from loadtune.asked.config import load_config
from loadtune.asked.config_yaml import did_you_mean
from loadtune.core.errors import ConfigError
from tests.conftest import run_cli, tiny_config


def error_of(write_config, config, overrides=()) -> str:
    path = write_config(config)
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message


@pytest.mark.parametrize(
    ("block", "key", "expected"),
    [
        ("loader", "num_wokers", "loader.num_wokers: unknown key; did you mean num_workers?"),
        ("loader", "Batch_Size", "loader.Batch_Size: unknown key; did you mean batch_size?"),
        ("loader", "colate_fn", "loader.colate_fn: unknown key; did you mean collate_fn?"),
        ("loader", "worker_thread", "loader.worker_thread: unknown key; did you mean worker_threads?"),
        ("dataset", "kwarg", "dataset.kwarg: unknown key; did you mean kwargs?"),
        ("step", "sleep", "step.sleep: unknown key; did you mean sleep_s?"),
        ("measure", "batchs", "measure.batchs: unknown key; did you mean batches?"),
        (None, "devise", "devise: unknown key; did you mean device?"),
        (None, "loder", "loder: unknown key; did you mean loader?"),
    ],
)
def test_an_unknown_key_names_the_nearest_known_one(write_config, block, key, expected):
    config = tiny_config()
    if block is None:
        config[key] = "x"
    else:
        config[block] = {**config[block], key: 1}
    assert expected in error_of(write_config, config)


def test_a_misspelt_sweep_key_names_the_sweepable_one(write_config):
    message = error_of(write_config, tiny_config(sweep={"num_wokers": [0, 2]}))
    assert "sweep.num_wokers: unknown key; did you mean num_workers? (not a DataLoader setting" in message


def test_a_spec_in_the_sweep_is_told_where_it_goes_not_what_it_is_near(write_config):
    message = error_of(write_config, tiny_config(sweep={"collate_fn": ["m:f"]}))
    assert "sweep.collate_fn: unknown key (a spec can be set in loader" in message
    assert "did you mean" not in message


@pytest.mark.parametrize(("block", "key"), [("loader", "bogus"), ("measure", "zzz"), (None, "frobnicate")])
def test_nothing_is_suggested_when_no_known_key_is_near(write_config, block, key):
    config = tiny_config()
    if block is None:
        config[key] = 1
    else:
        config[block] = {**config[block], key: 1}
    message = error_of(write_config, config)
    assert f"{key}: unknown key" in message and "did you mean" not in message


def test_a_misspelt_set_key_names_the_nearest_known_one(write_config):
    message = error_of(write_config, tiny_config(), ["loader.pin_memroy=true"])
    assert "loader.pin_memroy: unknown key; did you mean pin_memory?" in message


def test_each_unknown_key_gets_its_own_suggestion(write_config):
    config = tiny_config()
    config["loader"] = {**config["loader"], "shufle": True}
    config["measure"] = {**config["measure"], "repeat": 3}
    message = error_of(write_config, config)
    assert "loader.shufle: unknown key; did you mean shuffle?" in message
    assert "measure.repeat: unknown key; did you mean repeats?" in message


def test_an_odd_key_is_quoted_and_still_gets_a_suggestion(write_config):
    config = tiny_config()
    config["loader"] = {**config["loader"], "num workers\n": 2}
    message = error_of(write_config, config)
    assert "loader.'num workers\\n': unknown key; did you mean num_workers?" in message


def test_did_you_mean():
    assert did_you_mean("num_wokers", ["batch_size", "num_workers"]) == "; did you mean num_workers?"
    assert did_you_mean("NUM_WORKERS", ["num_workers"]) == "; did you mean num_workers?"
    assert did_you_mean("bogus", ["batch_size", "num_workers"]) == ""
    assert did_you_mean(None, ["name"]) == ""
    assert did_you_mean("x", []) == ""


@pytest.mark.slow
def test_the_cli_says_it_in_one_line(write_config):
    config = tiny_config()
    config["loader"] = {**config["loader"], "num_wokers": 2}
    path = write_config(config)
    result = run_cli("sweep", str(path), timeout=120)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1] == f"Error: {path}: loader.num_wokers: unknown key; did you mean num_workers?"
