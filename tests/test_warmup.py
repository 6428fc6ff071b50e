"""The warm-up: measure.warmup_batches, and measure.warmup_batches_per_worker more for each
worker (whose first batches come slower), before a trial's windows are counted."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from loadtune.asked.config import MeasureSpec, load_config
from loadtune.asked.plan import trial_for
from loadtune.measure.loop import measure_loop
from loadtune.parts.loader import epoch_length
from loadtune.trial_process.channel import SweepChannel
from loadtune.trial_process.execute import measure_here
from loadtune.trial_process.jobs import TrialJob
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


def test_workers_started_every_epoch_get_no_more_warm_up_when_an_epoch_fits_a_window():
    m = MeasureSpec(batches=50)
    assert m.extra_warmup_for(3, persistent_workers=False, epoch_length=50) == 0
    assert m.extra_warmup_for(3, persistent_workers=False, epoch_length=20) == 0
    assert m.extra_warmup_for(3, persistent_workers=False, epoch_length=51) == 15, "a window may miss a restart"
    assert m.extra_warmup_for(3, persistent_workers=False, epoch_length=None) == 15, "length unknown"
    assert m.extra_warmup_for(3, persistent_workers=True, epoch_length=50) == 15, "persistent: started once"
    assert m.extra_warmup_for(3, persistent_workers=False, epoch_length=50, window_batches=40) == 15


def test_epoch_length_is_the_loaders_cut_at_epoch_batches():
    from torch.utils.data import DataLoader, IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert epoch_length(DataLoader(list(range(100)), batch_size=4), None) == 25
    assert epoch_length(DataLoader(list(range(100)), batch_size=4), 10) == 10
    assert epoch_length(DataLoader(list(range(100)), batch_size=4), 40) == 25
    assert epoch_length(DataLoader(Stream(), batch_size=4), None) is None
    assert epoch_length(DataLoader(Stream(), batch_size=4), 7) == 7


def _warmed(extra: int, max_s: float, fetch_s: float = 0.01) -> int:
    """Batches the loop ran before its window (2 to warm up, `extra` more within `max_s`), with
    a fake clock: each batch costs `fetch_s` to fetch and as much to step."""
    clock = FakeClock()
    m = measure_loop(FakeLoader(clock, 1000, fetch_s, batch=1), stepper(clock, fetch_s), warmup_batches=2,
                     batches=3, repeats=1, clock=clock, extra_warmup_batches=extra, extra_warmup_max_s=max_s,
                     fingerprint=False)
    # After the first batch's fetch (timed apart): its step, then a fetch and a step per batch.
    assert round((m.start.warmup_s / fetch_s + 1) / 2) == m.start.warmup_batches
    return m.start.warmup_batches


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


@pytest.mark.slow  # a real DataLoader with 2 worker processes
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


@pytest.mark.slow  # a real DataLoader with 2 worker processes
@pytest.mark.parametrize("persistent, warmup", [(False, 3), (True, 3 + 2 * 4)])
def test_a_trial_with_an_epoch_of_one_window_warms_up_persistent_workers_only(write_config, persistent, warmup):
    """Epochs of 6 batches of one sample, windows of 6: workers started every epoch get the
    base warm-up alone, persistent ones 4 batches more each (labels repeat every epoch)."""
    config = tiny_config(loader={"batch_size": 1, "num_workers": 2, "prefetch_factor": 2},
                         measure={"warmup_batches": 3, "warmup_batches_per_worker": 4, "epoch_batches": 6,
                                  "warmup_per_worker_max_s": 120, "batches": 6, "repeats": 1, "timeout_s": 60})
    config["dataset"]["kwargs"]["cost_s"] = 0.0005
    spec = load_config(write_config(config))
    cfg = spec.config
    trial = trial_for(cfg, {"num_workers": 2, "persistent_workers": persistent}, False)
    job = TrialJob(trial, cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir), os.getpid(),
                   multiprocessing.get_all_start_methods()[0])
    measurement = measure_here(job, None, SweepChannel())
    assert measurement.start.warmup_batches == warmup
    assert measurement.windows[0].labels == tuple((warmup + i) % 6 for i in range(6))
