"""Real training setups as the factory: a loader builder with a custom collate_fn and
sampler, a data module; their settings are the baseline, their parts run in every trial."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import run_cli, tiny_config

pytestmark = pytest.mark.slow
MEASURE = {"warmup_batches": 1, "batches": 6, "repeats": 1, "timeout_s": 60}


def sweep(write_config, tmp_path, marker, dataset, loader=None, sweep_keys=None):
    config = tiny_config(dataset=dataset, sweep=sweep_keys or {"num_workers": [0, 2]}, measure=MEASURE)
    config.pop("loader")
    if loader:
        config["loader"] = loader
    out = tmp_path / "s.csv"
    done = run_cli("sweep", str(write_config(config)), "--out", str(out), "--json", marker=marker)
    assert done.returncode == 0, done.stderr
    return pd.read_csv(out).set_index("trial"), json.loads(done.stdout)


def test_a_loader_builder_is_the_baseline_and_keeps_its_collate_and_sampler(write_config, tmp_path, marker):
    folder = tmp_path / "notes"
    folder.mkdir()
    rows, info = sweep(write_config, tmp_path, marker,
                       {"factory": "tests.loader_factories:make_loader", "kwargs": {"folder": str(folder)}})
    base = rows.loc["baseline"]
    assert (base.num_workers, base.prefetch_factor, base.batch_size) == (1, 3, 16), "read back from the loader"
    assert bool(base.persistent_workers) is False
    assert set(rows["status"]) == {"ok"}, rows[["status", "reason"]]
    assert {"num_workers=0", "num_workers=2"} <= set(rows.index)
    # The custom collate ran in every trial: in the training process (no workers) and in workers.
    assert len(list(folder.glob("collate-*"))) >= 4
    assert info["source"] == "dataloader"
    assert info["loader_kwargs"]["batch_size"] == 16 and "batch_size" not in info["change"]
    # What to change in the builder: only what the sweep moved (the worker count and what goes with it).
    assert set(info["change"]) <= {"num_workers", "prefetch_factor", "persistent_workers", "multiprocessing_context",
                                   "in_order", "worker_threads"}


def test_the_loader_block_overrides_the_builders_settings(write_config, tmp_path, marker):
    folder = tmp_path / "notes"
    folder.mkdir()
    rows, info = sweep(write_config, tmp_path, marker,
                       {"factory": "tests.loader_factories:make_loader", "kwargs": {"folder": str(folder)}},
                       loader={"batch_size": 8, "num_workers": 0}, sweep_keys={"num_workers": [1]})
    base = rows.loc["baseline"]
    assert (base.batch_size, base.num_workers) == (8, 0)
    assert pd.isna(base.prefetch_factor), "prefetch goes with the workers the config removed"
    assert rows.loc["num_workers=1", "status"] == "ok"


def test_a_data_module_is_set_up_and_its_training_loader_used(write_config, tmp_path, marker):
    folder = tmp_path / "notes"
    folder.mkdir()
    rows, info = sweep(write_config, tmp_path, marker,
                       {"factory": "tests.loader_factories:make_module", "kwargs": {"folder": str(folder)}},
                       sweep_keys={"num_workers": [1]})
    assert (folder / "prepared").exists() and (folder / "setup-fit").exists()
    base = rows.loc["baseline"]
    assert (base.batch_size, base.num_workers) == (12, 2)
    assert info["source"] == "data module"
    assert set(rows["status"]) == {"ok"}


def test_a_loader_with_a_distributed_sampler_works_on_ranks(write_config, tmp_path, marker):
    config = tiny_config(dataset={"factory": "tests.loader_factories:make_distributed_loader",
                                  "kwargs": {"folder": str(tmp_path)}}, sweep={}, measure=MEASURE)
    config.pop("loader")
    out = tmp_path / "r.csv"
    done = run_cli("sweep", str(write_config(config)), "--out", str(out), "--ranks", "2", marker=marker)
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(out).set_index("trial")
    assert rows.loc["baseline", "status"] == "ok" and rows.loc["baseline", "ranks"] == 2
    ranks = pd.read_csv(tmp_path / "r.ranks.csv")
    assert sorted(ranks[ranks.trial == "baseline"].dist_rank) == [0, 1]
