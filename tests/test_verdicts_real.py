"""Real datasets, each chosen so the bottleneck is certain: the CSV's verdict must name it."""

from __future__ import annotations

import pandas as pd
import pytest

from loadtune.machine import usable_cores
from loadtune.sweep.verdict import CPU_SATURATED_UTIL, DATA_BOUND_CPU, DATA_BOUND_IO
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
    # One worker more than the usable cores, each sample burning 2 ms × cores of CPU, so a
    # batch takes the same wall time on any machine (16 ms on saturated cores) against a 2 ms
    # step: the loader is the limit whatever the core count, by a wide margin.
    cores = usable_cores()
    workers, batch, batches = cores + 1, 8, 40 + 4 * (cores + 1)
    cost_s = 0.002 * cores
    row, _ = verdict_of(write_config, tmp_path, marker,
                        {"factory": "loadtune.synthetic:cpu_cost",
                         "kwargs": {"num_samples": batch * (batches + 20), "cost_s": cost_s}},
                        {"batch_size": batch, "num_workers": workers}, 0.002,
                        {"warmup_batches": 3, "batches": batches, "repeats": 1, "timeout_s": 120})
    assert row.cpu_count == cores and row.num_workers == workers
    # Data-bound in the steady state: not the step, not epoch starts (one epoch), not memory.
    assert row.wait_ratio > 0.5, row
    assert row.verdict in (DATA_BOUND_CPU, DATA_BOUND_IO), row.advice
    # The CPU did the loading: the workers, not the main process, used the cores, and at
    # least the CPU the delivered samples cost, less what they may have done before the
    # window (per worker, a batch still queued and one begun) and a wide allowance.
    assert row.workers_cpu_util > 2 * row.main_cpu_util, row
    needed_cores = row.throughput * cost_s * (batches - 2 * workers) / batches
    assert row.workers_cpu_util * cores >= 0.7 * needed_cores, row
    # Cores clearly saturated must read as CPU-bound; between the threshold and this margin,
    # and below it (other processes taking cores), either data-bound verdict may come out.
    if row.cpu_util >= CPU_SATURATED_UTIL + 0.05:
        assert row.verdict == DATA_BOUND_CPU, row.advice


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
    from loadtune.sweep.runner import run_sweep

    config = tiny_config(dataset={"factory": "loadtune.synthetic:sleep_cost",
                                  "kwargs": {"num_samples": 200, "cost_s": 0.0005, "sample_shape": [256]}},
                         sweep={"num_workers": [0, 2]}, measure={"warmup_batches": 1, "batches": 4, "repeats": 1})
    result = run_sweep(load_config(write_config(config)), tmp_path / "shm.csv", shm_free_mb=0.01)
    rows = {r.trial: r for r in result.records}
    for trial in ("baseline", "num_workers=2"):
        assert rows[trial].status == "skipped"
        assert "/dev/shm too small" in rows[trial].reason and "0 MB is free" in rows[trial].reason
    assert rows["num_workers=0"].status == "ok"
    assert rows["baseline"].shm_need_mb is None
