"""The warm-up: measure.warmup_batches, and measure.warmup_batches_per_worker more for each
worker (whose first batches come slower), before a trial's windows are counted."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from loadtune.config import MeasureSpec, load_config
from loadtune.sweep_process.plan import trial_for
from loadtune.trial_process.channel import SweepChannel
from loadtune.trial_process.execute import measure_here
from loadtune.trial_process.jobs import TrialJob
from loadtune.trial_process.measure import measure_loop
from tests.conftest import tiny_config
from tests.test_measure import FakeClock, FakeLoader, stepper


def test_the_warm_up_grows_with_the_workers():
    assert MeasureSpec().warmup_batches_per_worker == 5 and MeasureSpec().warmup_per_worker_max_s == 0.3
    assert MeasureSpec(warmup_batches=2).extra_warmup_for(0) == 0
    assert MeasureSpec(warmup_batches=2).extra_warmup_for(3) == 15
    assert MeasureSpec(warmup_batches_per_worker=0).extra_warmup_for(6) == 0
    with pytest.raises(ValueError, match="warmup_batches_per_worker"):
        MeasureSpec(warmup_batches_per_worker=-1)
    with pytest.raises(ValueError, match="warmup_per_worker_max_s"):
        MeasureSpec(warmup_per_worker_max_s=-0.1)


def _warmed(extra: int, max_s: float, fetch_s: float = 0.01) -> int:
    """Batches the loop ran before its window (2 to warm up, `extra` more within `max_s`), with
    a fake clock: each batch costs `fetch_s` to fetch and as much to step."""
    clock = FakeClock()
    m = measure_loop(FakeLoader(clock, 1000, fetch_s, batch=1), stepper(clock, fetch_s), warmup_batches=2,
                     batches=3, repeats=1, clock=clock, extra_warmup_batches=extra, extra_warmup_max_s=max_s,
                     fingerprint=False)
    # After the first batch's fetch (timed apart): its step, then a fetch and a step per batch.
    assert round((m.warmup_s / fetch_s + 1) / 2) == m.warmup_batches
    return m.warmup_batches


def test_the_extra_warm_up_stops_at_its_batches_or_its_time():
    assert _warmed(0, 10.0) == 2
    assert _warmed(6, 10.0) == 8, "all six within the time"
    assert _warmed(6, 0.05) == 5, "0.02 s a batch: three fit in 0.05 s"
    assert _warmed(6, 0.0) == 2


def test_the_default_per_worker_warm_up_leaves_the_config_hash_alone(write_config):
    config = tiny_config()
    config["measure"].pop("warmup_batches_per_worker")
    plain = load_config(write_config(config, "a.yaml")).sha
    config["measure"]["warmup_batches_per_worker"] = 5
    assert load_config(write_config(config, "b.yaml")).sha == plain
    config["measure"]["warmup_per_worker_max_s"] = 0.3
    assert load_config(write_config(config, "c.yaml")).sha == plain
    config["measure"]["warmup_batches_per_worker"] = 0
    assert load_config(write_config(config, "d.yaml")).sha != plain, "another warm-up measures something else"


@pytest.mark.parametrize("per_worker", [0, 4])
def test_a_trial_counts_its_windows_after_each_workers_first_batches(write_config, per_worker):
    """In this process, with a channel that answers at once: the labels of the counted samples
    (batch 1, in order) start right after the warm-up."""
    config = tiny_config(loader={"batch_size": 1, "num_workers": 2, "prefetch_factor": 2},
                         measure={"warmup_batches": 3, "warmup_batches_per_worker": per_worker,
                                  "warmup_per_worker_max_s": 120, "batches": 6, "repeats": 1, "timeout_s": 60})
    config["dataset"]["kwargs"]["cost_s"] = 0.0005
    spec = load_config(write_config(config))
    cfg = spec.config
    trial = trial_for(cfg, {"num_workers": 2}, False)
    job = TrialJob(trial, cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir), os.getpid(),
                   multiprocessing.get_all_start_methods()[0])
    measurement = measure_here(job, None, SweepChannel())
    warmup = 3 + 2 * per_worker
    assert measurement.windows[0].labels == tuple(range(warmup, warmup + 6))
