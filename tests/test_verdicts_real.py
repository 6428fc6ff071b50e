"""Real datasets, each chosen so the bottleneck is certain: the CSV's verdict must name it."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from loadtune.measure.machine import usable_cores
from loadtune.measure.verdict import (
    DATA_BOUND_CPU,
    DATA_BOUND_HANDOVER,
    DATA_BOUND_IO,
    DATA_BOUND_STARVED,
    FETCH_CPU_CONTENDED_SHARE,
    HANDOVER_MAIN_SHARE,
)
from tests.conftest import MARKER_VAR, run_cli, tiny_config
from tests.quiet_machine import measured_quietly, wait_for_quiet

# Real sweeps, each a few seconds. The verdicts read CPU and time figures that another test's load
# would move: those tests run alone (serial), on a quiet machine, and measure again when other
# processes disturbed every repeat; the memory verdict and the /dev/shm check do not.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def quiet_machine(request):
    """Before a serial test: wait for other processes to leave the cores (fails if they never do)."""
    if request.node.get_closest_marker("serial"):
        wait_for_quiet()


BASE = {"sweep": {}, "device": "cpu"}


def verdict_of(write_config, tmp_path, marker, dataset, loader, step_s, measure, *options, figures=True,
               out_name="v.csv"):
    config = tiny_config(figures, dataset=dataset, loader=loader, step={"sleep_s": step_s}, measure=measure, **BASE)
    out = tmp_path / out_name
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), *options, marker=marker)
    assert result.returncode == 0, result.stderr
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "ok", row.reason
    return row, result


def quiet_verdict_of(write_config, tmp_path, marker, *args):
    """verdict_of, measured again on a quiet machine while other processes disturbed every repeat."""
    return measured_quietly(
        lambda attempt: verdict_of(write_config, tmp_path, marker, *args, out_name=f"v{attempt}.csv"),
        lambda measured: measured[0].outside_cpu)


SHORT = {"warmup_batches": 2, "batches": 12, "repeats": 1, "timeout_s": 60}


@pytest.mark.serial
def test_sleeping_loader_with_a_fast_step_is_io_bound(write_config, tmp_path, marker):
    row, _ = quiet_verdict_of(write_config, tmp_path, marker,
                              {"factory": "loadtune.synthetic:sleep_cost",
                               "kwargs": {"num_samples": 400, "cost_s": 0.005}},
                              {"batch_size": 8, "num_workers": 1}, 0.001, SHORT)
    assert row.verdict == DATA_BOUND_IO, row.advice
    assert row.cpu_util < 0.5 and row.wait_ratio > 0.5
    assert row.fetch_cpu_share < FETCH_CPU_CONTENDED_SHARE, "a fetch that sleeps is not CPU work"


@pytest.mark.serial
def test_cpu_bound_loader_on_more_workers_than_cores_is_cpu_bound(write_config, tmp_path, marker):
    # One worker more than the usable cores, each sample burning 2 ms x cores of CPU, against a
    # 2 ms step: the loader is the limit whatever the core count, and the kernel counts the
    # cores busy (the verdict reads that, and the fetches' CPU share, not one tree figure).
    cores = usable_cores()
    workers, batch, batches = cores + 1, 8, 40 + 4 * (cores + 1)
    cost_s = 0.002 * cores
    row, _ = quiet_verdict_of(write_config, tmp_path, marker,
                              {"factory": "loadtune.synthetic:cpu_cost",
                               "kwargs": {"num_samples": batch * (batches + 20), "cost_s": cost_s}},
                              {"batch_size": batch, "num_workers": workers}, 0.002,
                              {"warmup_batches": 3, "batches": batches, "repeats": 1, "timeout_s": 120})
    assert row.cpu_count == cores and row.num_workers == workers
    assert row.wait_ratio > 0.5, row
    assert row.verdict == DATA_BOUND_CPU, row.advice
    assert row.workers_cpu_util > 2 * row.main_cpu_util, row
    assert row.fetch_cpu_share >= FETCH_CPU_CONTENDED_SHARE, row


def _pinned_to(cpus: set[int]):
    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


@pytest.mark.serial
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable cores to pin to")
def test_a_cpu_saturating_pipeline_reads_its_cores_busy(write_config, tmp_path, marker):
    """2 workers burning CPU on 2 usable cores, no I/O, a short step: the CPU figure shows the
    cores clearly busy, nearly all of it the workers', and the verdict names the CPU.

    How busy exactly (about 0.9 on a quiet machine, less while other processes take their part)
    is a figure, not a bound to test: it is checked against half the cores, which the workers
    cannot miss while other processes take a quarter at most (measured_quietly). A figure that
    left the workers out would read the training process alone, a few percent."""
    two = set(sorted(os.sched_getaffinity(0))[:2])
    config = tiny_config(figures=True, dataset={"factory": "loadtune.synthetic:cpu_cost",
                                                "kwargs": {"num_samples": 2000, "cost_s": 0.003}},
                         loader={"batch_size": 8, "num_workers": 2, "prefetch_factor": 4}, step={"sleep_s": 0.0005},
                         measure={"warmup_batches": 3, "batches": 60, "repeats": 1, "timeout_s": 120}, **BASE)
    path = write_config(config)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", MARKER_VAR: marker}

    def pinned_sweep(attempt: int):
        out = tmp_path / f"cpu{attempt}.csv"
        done = subprocess.run([sys.executable, "-m", "loadtune", "sweep", str(path), "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=240, preexec_fn=_pinned_to(two))
        assert done.returncode == 0, done.stderr
        return pd.read_csv(out).set_index("trial").loc["baseline"]

    row = measured_quietly(pinned_sweep, lambda row: row.outside_cpu)  # what the others take, the tree cannot have
    assert row.cpu_count == 2
    assert row.cpu_util > 0.5, row
    assert row.workers_cpu_util > 2 * row.main_cpu_util, row
    assert row.verdict == DATA_BOUND_CPU, row.advice


@pytest.mark.serial
def test_many_small_tensors_per_batch_are_a_hand_over_bottleneck(write_config, tmp_path, marker):
    """Cheap samples of 200 tensors each: the workers keep up, the training thread spends the
    wait rebuilding 200 shared-memory tensors per batch."""
    row, _ = quiet_verdict_of(write_config, tmp_path, marker,
                              {"factory": "loadtune.synthetic:many_tensors",
                               "kwargs": {"num_samples": 2000, "parts": 200}},
                              {"batch_size": 8, "num_workers": 2}, 0.001,
                              {"warmup_batches": 3, "batches": 30, "repeats": 1, "timeout_s": 120})
    assert row.verdict == DATA_BOUND_HANDOVER, row.advice
    assert row.handover_ms >= HANDOVER_MAIN_SHARE * row.wait_ms, row


@pytest.mark.serial
def test_uneven_batches_with_a_shallow_prefetch_starve_the_workers(write_config, tmp_path, marker):
    """One batch in four sleeps 16 times longer; with prefetch_factor=1 and batches taken in
    order, the worker that finished a fast batch waits for an index behind the slow one."""
    row, _ = quiet_verdict_of(write_config, tmp_path, marker,
                              {"factory": "loadtune.synthetic:uneven_batches",
                               "kwargs": {"num_samples": 2000, "fast_s": 0.0005, "slow_s": 0.008, "slow_every": 4}},
                              {"batch_size": 8, "num_workers": 2, "prefetch_factor": 1}, 0.002,
                              {"warmup_batches": 3, "batches": 40, "repeats": 1, "timeout_s": 120})
    assert row.verdict == DATA_BOUND_STARVED, row.advice
    assert row.worker_idle_share >= 0.3 and row.fetch_cpu_share < 0.5, row
    assert "prefetch_factor=4" in row.advice and "in_order=False" in row.advice


@pytest.mark.serial
def test_cheap_loader_with_a_long_step_is_compute_bound(write_config, tmp_path, marker):
    row, result = quiet_verdict_of(write_config, tmp_path, marker,
                                   {"factory": "loadtune.synthetic:sleep_cost",
                                    "kwargs": {"num_samples": 400, "cost_s": 0.0001}},
                                   {"batch_size": 8, "num_workers": 1}, 0.05, {**SHORT, "batches": 30}, "--verbose")
    assert row.verdict == "compute-bound", row.advice
    assert "Bottleneck (baseline, baseline): compute-bound" in result.stdout  # --verbose names each bottleneck


def test_python_list_read_by_every_worker_is_a_memory_risk(write_config, tmp_path, marker):
    """Memory risk comes first among the verdicts and reads the workers' memory growth alone:
    no other test's CPU load moves it, so its repeats count as they come (figures=False)."""
    row, _ = verdict_of(write_config, tmp_path, marker,
                        # 40 batches an epoch: the window (however long the warm-up runs on until
                        # the first memory reading) never reaches the epoch's end, where the
                        # workers that copied the list exit and the tree's memory drops.
                        {"factory": "tests.fault_datasets:make_python_objects",
                         "kwargs": {"num_items": 16_000_000, "num_samples": 320}},
                        {"batch_size": 8, "num_workers": 2}, 0.005,
                        {"warmup_batches": 1, "batches": 16, "repeats": 1, "timeout_s": 120}, figures=False)
    assert row.pss_growth_mb > 50, row
    assert row.verdict == "memory risk", row.advice
    assert "numpy" in row.advice


def test_trials_that_would_not_fit_in_dev_shm_are_skipped_with_the_figures(write_config, tmp_path, marker):
    """Against a faked free /dev/shm of 0.01 MB: every trial with workers is skipped, with the
    figures in its reason; the trial without workers (no shared memory) still runs."""
    from loadtune.asked.options import SweepOptions
    from loadtune.sweep_process.pipeline import run_sweep

    config = tiny_config(dataset={"factory": "loadtune.synthetic:sleep_cost",
                                  "kwargs": {"num_samples": 200, "cost_s": 0.0005, "sample_shape": [256]}},
                         sweep={"num_workers": [0, 2]}, measure={"warmup_batches": 1, "batches": 4, "repeats": 1})
    result = run_sweep(SweepOptions.of(write_config(config), out=tmp_path / "shm.csv"), shm_free_mb=0.01)
    rows = {r.trial: r for r in result.records}
    for trial in ("baseline", "num_workers=2"):
        assert rows[trial].status == "skipped"
        assert "/dev/shm too small" in rows[trial].reason and "0 MB is free" in rows[trial].reason
    assert rows["num_workers=0"].status == "ok"
    assert rows["baseline"].resources.shm_need_mb is None
