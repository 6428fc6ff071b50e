"""Verdicts on crafted evidence: each case, the precedence, and the thresholds' edges."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from loadtune.measure import Measurement, Window
from loadtune.stats import summarize
from loadtune.verdict import (
    BASE_WORKER_THREADS,
    COMPUTE_BOUND,
    COMPUTE_BOUND_WAIT_RATIO,
    CPU_SATURATED_UTIL,
    DATA_BOUND_CPU,
    DATA_BOUND_IO,
    DATA_BOUND_START_UP,
    MEMORY_RISK,
    MEMORY_RISK_GROWTH_MB,
    START_UP_WAIT_SHARE,
    VERDICTS,
    Evidence,
    epoch_starts_per_batch,
    epoch_wait_share,
    oversubscription_warning,
    verdict,
)

BASE = Evidence(
    wait_ratio=0.62,
    cpu_util=0.97,
    usable_cores=2,
    num_workers=2,
    wait_ms=40.0,
    epoch_start_ms=math.nan,
    epoch_wait_share=0.0,
    worker_pss_growth_mb=3.0,
    pss_growth_mb=6.0,
    threads_per_worker=3.0,
)


def judge(**changes):
    return verdict(replace(BASE, **changes))


def test_cpu_bound_advice_has_the_figures():
    name, advice = judge()
    assert name == DATA_BOUND_CPU
    assert "waiting 62% of the time while the 2 usable cores are 97% busy" in advice
    assert "more workers will not help" in advice


def test_io_bound_when_the_cores_idle():
    name, advice = judge(cpu_util=0.30, num_workers=4)
    assert name == DATA_BOUND_IO
    assert "2 usable cores are only 30% busy" in advice
    assert "now 4; try num_workers=8" in advice and "prefetch_factor" in advice


def test_io_bound_without_workers_suggests_some():
    name, advice = judge(cpu_util=0.30, num_workers=0)
    assert name == DATA_BOUND_IO
    assert "loading in the main process; try num_workers=2" in advice


def test_compute_bound():
    name, advice = judge(wait_ratio=0.03)
    assert name == COMPUTE_BOUND
    assert "waiting 3% of the time" in advice and "model" in advice


def test_start_up():
    name, advice = judge(epoch_start_ms=850.0, epoch_wait_share=0.8, cpu_util=0.3)
    assert name == DATA_BOUND_START_UP
    assert "80% of the wait is at epoch starts (850 ms each)" in advice
    assert "persistent_workers=True" in advice


def test_start_up_with_persistent_workers_already_on():
    name, advice = judge(epoch_start_ms=850.0, epoch_wait_share=0.8, persistent_workers=True)
    assert name == DATA_BOUND_START_UP
    assert "even with persistent_workers=True" in advice


def test_start_up_without_workers():
    name, advice = judge(epoch_start_ms=300.0, epoch_wait_share=0.9, num_workers=0)
    assert name == DATA_BOUND_START_UP
    assert "__iter__" in advice


def test_memory_risk_takes_precedence():
    for other in ({}, {"wait_ratio": 0.01}, {"epoch_wait_share": 0.9, "epoch_start_ms": 500.0}, {"cpu_util": 0.1}):
        name, advice = judge(worker_pss_growth_mb=120.0, num_workers=4, **other)
        assert name == MEMORY_RISK
    assert "each of the 4 workers grew by 120 MB" in advice and "480 MB in all" in advice
    assert "13246" in advice and "numpy" in advice


def test_memory_risk_from_tree_growth_when_per_worker_is_missing():
    assert judge(worker_pss_growth_mb=None, pss_growth_mb=4 * 60.0, num_workers=4)[0] == MEMORY_RISK
    assert judge(worker_pss_growth_mb=None, pss_growth_mb=4 * 40.0, num_workers=4)[0] == DATA_BOUND_CPU
    assert judge(worker_pss_growth_mb=None, pss_growth_mb=None)[0] == DATA_BOUND_CPU


def test_no_memory_risk_without_workers():
    # Growth in the main process alone is not copy-on-read (a cache, perhaps): no verdict on it.
    assert judge(num_workers=0, worker_pss_growth_mb=None, pss_growth_mb=500.0)[0] == DATA_BOUND_CPU


def test_batches_in_flight_are_allowed_for():
    assert judge(worker_pss_growth_mb=70.0)[0] == MEMORY_RISK
    assert judge(worker_pss_growth_mb=70.0, inflight_mb_per_worker=30.0)[0] == DATA_BOUND_CPU


def test_threshold_edges():
    t = COMPUTE_BOUND_WAIT_RATIO
    assert judge(wait_ratio=t - 1e-9)[0] == COMPUTE_BOUND
    assert judge(wait_ratio=t)[0] == DATA_BOUND_CPU  # "below" the threshold only
    c = CPU_SATURATED_UTIL
    assert judge(cpu_util=c)[0] == DATA_BOUND_CPU  # at the threshold counts as saturated
    assert judge(cpu_util=c - 1e-9)[0] == DATA_BOUND_IO
    s = START_UP_WAIT_SHARE
    assert judge(epoch_wait_share=s, epoch_start_ms=100.0)[0] == DATA_BOUND_CPU  # "most": above half
    assert judge(epoch_wait_share=s + 1e-9, epoch_start_ms=100.0)[0] == DATA_BOUND_START_UP
    m = MEMORY_RISK_GROWTH_MB
    assert judge(worker_pss_growth_mb=m)[0] == DATA_BOUND_CPU
    assert judge(worker_pss_growth_mb=m + 1e-9)[0] == MEMORY_RISK


def test_every_verdict_is_one_of_the_names():
    assert set(VERDICTS) == {"compute-bound", "data-bound: cpu", "data-bound: io/latency",
                             "data-bound: start-up", "memory risk"}


def test_epoch_wait_share_formula_and_edges():
    # 1 epoch start every 10 batches, 500 ms each, mean wait 100 ms: 50 of 100 ms per batch.
    assert epoch_wait_share(100.0, 500.0, 0.1) == pytest.approx(0.5)
    assert epoch_wait_share(100.0, math.nan, 0.0) == 0.0
    assert epoch_wait_share(0.0, 5.0, 0.1) == 0.0
    assert epoch_wait_share(10.0, 500.0, 0.1) == 1.0  # clamped


def test_epoch_wait_share_from_a_measurement_is_exact():
    # Two windows of 4 batches; epoch starts on batches 0 and 2 of the first, 1 of the second.
    w1 = Window((0.30, 0.01, 0.20, 0.01), (0.0,) * 4, (0.05,) * 4, (8,) * 4, (True, False, True, False))
    w2 = Window((0.01, 0.25, 0.01, 0.01), (0.0,) * 4, (0.05,) * 4, (8,) * 4, (False, True, False, False))
    m = Measurement(first_batch_s=1.0, windows=(w1, w2))
    stats = summarize(m)
    per_batch = epoch_starts_per_batch(m)
    assert per_batch == pytest.approx(3 / 8)
    share = epoch_wait_share(stats.wait_ms, stats.epoch_start_ms, per_batch)
    assert share == pytest.approx((0.30 + 0.20 + 0.25) / 0.80)


def test_oversubscription_warning():
    # 2 workers each running 1 extra pool thread (4 threads: 3 base + 1): 2 × 2 = 4 > 2 cores.
    warning = oversubscription_warning(2, BASE_WORKER_THREADS + 1, 2)
    assert warning is not None
    assert "2 workers × 2 computing threads = 4 threads on 2 usable cores" in warning
    assert "OMP_NUM_THREADS=1" in warning and "cv2.setNumThreads(0)" in warning
    assert "worker_init_fn" in warning


def test_no_oversubscription_warning_cases():
    assert oversubscription_warning(8, BASE_WORKER_THREADS, 2) is None  # no library pool in the workers
    assert oversubscription_warning(8, BASE_WORKER_THREADS + 0.4, 2) is None  # a transient helper thread
    assert oversubscription_warning(2, BASE_WORKER_THREADS + 1, 4) is None  # 4 threads on 4 cores: fits
    assert oversubscription_warning(2, BASE_WORKER_THREADS + 1, 3) is not None
    assert oversubscription_warning(0, 20, 2) is None
    assert oversubscription_warning(2, None, 2) is None


def test_busy_workers_with_idle_cores_are_cpu_bound_and_asked_for_more_workers():
    e = replace(BASE, wait_ratio=0.6, cpu_util=0.5, usable_cores=4, num_workers=2, loader_busy=0.97)
    name, advice = verdict(e)
    assert name == DATA_BOUND_CPU
    assert "97% busy" in advice and "num_workers=4" in advice


def test_loading_in_the_training_process_is_cpu_bound_and_asked_for_workers():
    e = replace(BASE, wait_ratio=0.6, cpu_util=0.45, usable_cores=2, num_workers=0, loader_busy=0.9)
    name, advice = verdict(e)
    assert name == DATA_BOUND_CPU and "use workers (num_workers=2)" in advice


def test_idle_workers_stay_io_bound():
    e = replace(BASE, wait_ratio=0.6, cpu_util=0.2, usable_cores=2, num_workers=2, loader_busy=0.2)
    assert verdict(e)[0] == DATA_BOUND_IO
