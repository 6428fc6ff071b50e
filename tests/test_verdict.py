"""Verdicts on crafted evidence: each case, the precedence, and the thresholds' edges."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass, replace

import pytest

from loadtune.decide.stats import summarize
from loadtune.measure.verdict import (
    BASE_WORKER_THREADS,
    COMPUTE_BOUND,
    COMPUTE_BOUND_WAIT_RATIO,
    CPU_SATURATED_UTIL,
    DATA_BOUND_CPU,
    DATA_BOUND_HANDOVER,
    DATA_BOUND_IO,
    DATA_BOUND_START_UP,
    DATA_BOUND_STARVED,
    HANDOVER_MAIN_SHARE,
    MEMORY_RISK,
    MEMORY_RISK_GROWTH_MB,
    START_UP_WAIT_SHARE,
    VERDICTS,
    Evidence,
    MemoryGrowth,
    Waits,
    epoch_starts_per_batch,
    epoch_wait_share,
    oversubscription_warning,
    suggestions,
    verdict,
)
from loadtune.record.measurement import Measurement, TrialStart, Window

BASE = Evidence(
    wait_ratio=0.62,
    cpu_util=0.97,
    usable_cores=2,
    num_workers=2,
    waits=Waits(wait_ms=40.0, epoch_start_ms=math.nan, epoch_wait_share=0.0),
    memory=MemoryGrowth(worker_pss_growth_mb=3.0, pss_growth_mb=6.0),
    threads_per_worker=3.0,
)


def changed(e: Evidence, **figures) -> Evidence:
    """`e` with `figures` changed, each where Evidence holds it (at its top or in one of its groups)."""
    groups = {}
    for name in (f.name for f in fields(e)):
        group = getattr(e, name)
        if is_dataclass(group):
            own = {f.name: figures.pop(f.name) for f in fields(group) if f.name in figures}
            if own:
                groups[name] = replace(group, **own)
    return replace(e, **groups, **figures)


def judge(**changes):
    return verdict(changed(BASE, **changes))


def test_cpu_bound_advice_has_the_figures():
    name, advice = judge()
    assert name == DATA_BOUND_CPU
    assert "waiting 62% of the time while the 2 usable cores are 97% busy" in advice
    assert "more workers will not help" in advice


def test_io_bound_when_the_cores_idle():
    name, advice = judge(cpu_util=0.30, num_workers=4)
    assert name == DATA_BOUND_IO
    assert "2 usable cores are only 30% busy" in advice
    assert "now 4; try num_workers=8" in advice


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
    assert "__iter__" in advice and "persistent_workers=True" in advice
    # The settings the advice names, so that they are measured (or said untested), not just advised.
    assert suggestions(changed(BASE, epoch_start_ms=300.0, epoch_wait_share=0.9, num_workers=0)) == \
        [{"num_workers": 2, "persistent_workers": True}]


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


def evidence(**figures) -> Evidence:
    """Evidence of a quiet, steady loader (no start-up wait, no growth) with `figures` changed."""
    quiet = Evidence(wait_ratio=0.5, cpu_util=0.5, usable_cores=4, num_workers=2,
                     waits=Waits(wait_ms=20.0, epoch_start_ms=math.nan, epoch_wait_share=0.0),
                     memory=MemoryGrowth(worker_pss_growth_mb=0.0, pss_growth_mb=0.0), threads_per_worker=3.0)
    return changed(quiet, **figures)


# Each verdict with evidence that shows that limit and nothing else.
EVIDENCE_FOR = {
    # The loader keeps up: almost no wait, whatever the cores do.
    COMPUTE_BOUND: evidence(wait_ratio=0.02, cpu_util=0.3),
    # Waiting while all usable cores are busy.
    DATA_BOUND_CPU: evidence(wait_ratio=0.7, cpu_util=0.99),
    # Waiting while the cores and the workers idle.
    DATA_BOUND_IO: evidence(wait_ratio=0.7, cpu_util=0.1, loader_busy=0.1),
    # Nearly all the wait in epoch starts of 900 ms.
    DATA_BOUND_START_UP: evidence(wait_ratio=0.7, cpu_util=0.2, epoch_start_ms=900.0, epoch_wait_share=0.9),
    # Each worker grew by 200 MB within the window.
    MEMORY_RISK: evidence(wait_ratio=0.3, worker_pss_growth_mb=200.0, pss_growth_mb=400.0),
    # Most of the wait is the training thread receiving batches from the workers.
    DATA_BOUND_HANDOVER: evidence(wait_ratio=0.5, cpu_util=0.4, machine_busy=0.4, handover_share=0.8,
                                  fetch_cpu_share=0.9),
    # The workers sit idle while the loop waits, and the cores are not busy.
    DATA_BOUND_STARVED: evidence(wait_ratio=0.4, cpu_util=0.5, machine_busy=0.5, worker_idle_share=0.6,
                                 handover_share=0.05, fetch_cpu_share=0.9, prefetch_factor=1),
}


def test_every_verdict_is_one_of_the_names():
    assert set(VERDICTS) == {"compute-bound", "data-bound: cpu", "data-bound: io/latency", "data-bound: hand-over",
                             "data-bound: starved workers", "data-bound: start-up", "memory risk"}
    reached = {}
    for intended, figures in EVIDENCE_FOR.items():
        name, advice = verdict(figures)
        assert name == intended, f"evidence for {intended!r} gave {name!r}"
        assert advice.strip()
        reached[name] = figures
    assert set(reached) == set(VERDICTS)


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
    m = Measurement(TrialStart(first_batch_s=1.0), windows=(w1, w2))
    stats = summarize(m)
    per_batch = epoch_starts_per_batch(m)
    assert per_batch == pytest.approx(3 / 8)
    share = epoch_wait_share(stats.times.wait_ms, stats.times.epoch_start_ms, per_batch)
    assert share == pytest.approx((0.30 + 0.20 + 0.25) / 0.80)


def test_oversubscription_warning():
    # 2 workers each running 1 extra pool thread (4 threads: 3 base + 1): 2 × 2 = 4 > 2 cores.
    found = oversubscription_warning(2, BASE_WORKER_THREADS + 1, 2, "num_workers=2")
    assert found is not None and found.asks and (found.num_workers, found.computing_threads) == (2, 2)
    warning = str(found)
    assert warning.startswith("num_workers=2: ")
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
    e = changed(BASE, wait_ratio=0.6, cpu_util=0.5, usable_cores=4, num_workers=2, loader_busy=0.97)
    name, advice = verdict(e)
    assert name == DATA_BOUND_CPU
    assert "97% busy" in advice and "num_workers=4" in advice


def test_loading_in_the_training_process_is_cpu_bound_and_asked_for_workers():
    e = changed(BASE, wait_ratio=0.6, cpu_util=0.45, usable_cores=2, num_workers=0, loader_busy=0.9)
    name, advice = verdict(e)
    assert name == DATA_BOUND_CPU and "use workers (num_workers=2)" in advice


def test_idle_workers_stay_io_bound():
    e = changed(BASE, wait_ratio=0.6, cpu_util=0.2, usable_cores=2, num_workers=2, loader_busy=0.2)
    assert verdict(e)[0] == DATA_BOUND_IO


def test_evidence_from_inside_decides_cpu_against_io_whatever_the_trees_share():
    # The tree reads 0.8 of the cores, but the kernel counts them 97% busy: saturated, so cpu.
    assert judge(cpu_util=0.8, machine_busy=0.97, fetch_cpu_share=0.5, num_workers=4)[0] == DATA_BOUND_CPU
    # Busy cores, but the fetch itself sleeps or reads: not a CPU bottleneck of this loader.
    assert judge(cpu_util=0.1, machine_busy=0.97, fetch_cpu_share=0.05, num_workers=4,
                 outside_cpu=0.87)[0] == DATA_BOUND_IO
    # Cores not busy: a fetch that is mostly CPU is cpu (add workers), one that waits is io/latency.
    name, advice = judge(cpu_util=0.5, machine_busy=0.5, fetch_cpu_share=0.95, num_workers=1)
    assert name == DATA_BOUND_CPU and "add workers up to the cores" in advice
    name, advice = judge(cpu_util=0.1, machine_busy=0.12, fetch_cpu_share=0.05, num_workers=4)
    assert name == DATA_BOUND_IO and "only 5% of each fetch is CPU work" in advice


def test_mixed_evidence_is_said_with_its_figures():
    name, advice = judge(cpu_util=0.97, machine_busy=0.97, fetch_cpu_share=0.9, handover_share=0.35,
                         num_workers=2)
    assert name == DATA_BOUND_CPU
    assert advice.startswith("mostly cpu, partly hand-over (35% of the wait is receiving batches")


def test_starved_workers_get_a_deeper_prefetch_and_out_of_order_advice():
    name, advice = judge(cpu_util=0.4, machine_busy=0.4, worker_idle_share=0.5, fetch_cpu_share=0.9,
                         prefetch_factor=1, num_workers=2)
    assert name == DATA_BOUND_STARVED
    assert "prefetch_factor=4" in advice and "in_order=False" in advice
    assert "in_order=False" not in judge(cpu_util=0.4, machine_busy=0.4, worker_idle_share=0.5,
                                         fetch_cpu_share=0.9, prefetch_factor=1, in_order=False,
                                         num_workers=2)[1]


def test_the_hand_over_is_the_verdict_from_its_main_share_on():
    at = dict(cpu_util=0.4, machine_busy=0.4, fetch_cpu_share=0.9, num_workers=2)
    assert judge(**at, handover_share=HANDOVER_MAIN_SHARE)[0] == DATA_BOUND_HANDOVER
    name, advice = judge(**at, handover_share=HANDOVER_MAIN_SHARE - 0.01)
    assert name != DATA_BOUND_HANDOVER and "partly hand-over (39%" in advice
