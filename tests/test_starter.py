from __future__ import annotations

import re

import pytest
import yaml

from loadtune.asked.config import LOADER_KEYS, Config, DatasetSpec, MeasureSpec, StepSpec, load_config
from loadtune.core.errors import LoadtuneError
from loadtune.present.starter import STARTER_CONFIG, write_starter


def test_written_starter_loads_and_points_at_the_demo(tmp_path):
    path = write_starter(tmp_path / "configs" / "mine.yaml")
    assert path.read_text() == STARTER_CONFIG
    spec = load_config(path)
    cfg = spec.config
    assert spec.name == "mine"  # name is left to default to the file's name
    assert cfg.dataset.factory == "loadtune.demo:synthetic_images"
    assert cfg.dataset.kwargs == {"num_images": 1000}
    assert cfg.dataset.scale_kwarg == "num_images"
    assert cfg.step.sleep_s is not None
    # Short enough for a first look in about a minute.
    m = cfg.measure
    assert m.repeats * m.batches + m.warmup_batches <= 30
    load_config(path, scale=0.5)  # --scale works with it


def test_every_config_key_is_documented():
    keys = {"name", "dataset", "loader", "sweep", "step", "measure", "device", "output"}
    for model in (Config, DatasetSpec, StepSpec, MeasureSpec):
        keys |= set(model.model_fields)
    keys |= set(LOADER_KEYS)
    for key in keys:
        assert re.search(rf"^\s*#?\s*{key}:", STARTER_CONFIG, re.M), f"{key} is not documented"
    assert "Default" in STARTER_CONFIG


def test_commented_keys_are_valid_when_uncommented(tmp_path):
    text = re.sub(r"^  # (drop_last|timeout|worker_init_fn|multiprocessing_context|in_order):",
                  r"  \1:", STARTER_CONFIG, flags=re.M)
    path = tmp_path / "loader.yaml"
    path.write_text(text)
    loader = load_config(path).config.loader
    assert loader.timeout == 0.0 and loader.in_order is True
    # The other steps are alternatives to sleep_s: each one valid on its own.
    data = yaml.safe_load(STARTER_CONFIG)
    for step in ({"busy_s": 0.05}, {"factory": "train.py:make_step", "kwargs": {}}):
        Config.model_validate({**data, "step": step})


def test_refuses_to_overwrite(tmp_path):
    path = tmp_path / "loadtune.yaml"
    path.write_text("mine: keep\n")
    with pytest.raises(LoadtuneError, match=re.escape(str(path))):
        write_starter(path)
    assert path.read_text() == "mine: keep\n"
    write_starter(tmp_path / "new.yaml")
    with pytest.raises(LoadtuneError, match="already exists"):
        write_starter(tmp_path / "new.yaml")
