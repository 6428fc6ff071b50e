"""Real datasets, each chosen so the bottleneck is certain: the CSV's verdict must name it."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import run_cli, tiny_config

pytestmark = pytest.mark.slow

BASE = {"sweep": {}, "device": "cpu"}


def verdict_of(write_config, tmp_path, marker, dataset, loader, step_s, measure):
    config = tiny_config(dataset=dataset, loader=loader, step={"sleep_s": step_s}, measure=measure, **BASE)
    out = tmp_path / "v.csv"
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "ok", row.reason
    return row, result


SHORT = {"warmup_batches": 2, "batches": 12, "repeats": 1, "timeout_s": 60}


def test_sleeping_loader_with_a_fast_step_is_io_bound(write_config, tmp_path, marker):
    row, _ = verdict_of(write_config, tmp_path, marker,
                        {"factory": "loadtune.synthetic:sleep_cost", "kwargs": {"num_samples": 400, "cost_s": 0.005}},
                        {"batch_size": 8, "num_workers": 1}, 0.001, SHORT)
    assert row.verdict == "data-bound: io/latency", row.advice
    assert row.cpu_util < 0.5 and row.wait_ratio > 0.5


def test_cpu_bound_loader_on_more_workers_than_cores_is_cpu_bound(write_config, tmp_path, marker):
    row, _ = verdict_of(write_config, tmp_path, marker,
                        {"factory": "loadtune.synthetic:cpu_cost", "kwargs": {"num_samples": 800, "cost_s": 0.004}},
                        {"batch_size": 8, "num_workers": 3}, 0.002,
                        {"warmup_batches": 3, "batches": 50, "repeats": 1, "timeout_s": 60})
    assert row.verdict == "data-bound: cpu", row.advice
    assert row.cpu_util > 0.8 and row.workers_cpu_util > row.main_cpu_util


def test_cheap_loader_with_a_long_step_is_compute_bound(write_config, tmp_path, marker):
    row, result = verdict_of(write_config, tmp_path, marker,
                             {"factory": "loadtune.synthetic:sleep_cost",
                              "kwargs": {"num_samples": 400, "cost_s": 0.0001}},
                             {"batch_size": 8, "num_workers": 1}, 0.03, SHORT)
    assert row.verdict == "compute-bound", row.advice
    assert "Bottleneck (baseline, baseline): compute-bound" in result.stdout


def test_python_list_read_by_every_worker_is_a_memory_risk(write_config, tmp_path, marker):
    row, _ = verdict_of(write_config, tmp_path, marker,
                        {"factory": "tests.fault_datasets:make_python_objects"},
                        {"batch_size": 8, "num_workers": 2}, 0.005,
                        {"warmup_batches": 1, "batches": 16, "repeats": 1, "timeout_s": 120})
    assert row.pss_growth_mb > 50, row
    assert row.verdict == "memory risk", row.advice
    assert "numpy" in row.advice


def test_trials_that_would_not_fit_in_dev_shm_are_skipped_with_the_figures(write_config, tmp_path, marker):
    """Against a faked free /dev/shm of 0.01 MB: every trial with workers is skipped, with the
    figures in its reason; the trial without workers (no shared memory) still runs."""
    from loadtune.config import load_config
    from loadtune.sweep import run_sweep

    config = tiny_config(dataset={"factory": "loadtune.synthetic:sleep_cost",
                                  "kwargs": {"num_samples": 200, "cost_s": 0.0005, "sample_shape": [256]}},
                         sweep={"num_workers": [0, 2]}, measure={"warmup_batches": 1, "batches": 4, "repeats": 1})
    result = run_sweep(load_config(write_config(config)), tmp_path / "shm.csv", shm_free_mb=0.01)
    rows = {r["trial"]: r for r in result.rows}
    for trial in ("baseline", "num_workers=2"):
        assert rows[trial]["status"] == "skipped"
        assert "/dev/shm too small" in rows[trial]["reason"] and "0 MB is free" in rows[trial]["reason"]
    assert rows["num_workers=0"]["status"] == "ok"
    assert rows["baseline"]["shm_need_mb"] is None
