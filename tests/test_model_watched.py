"""The pipeline model fitted to one watched run with workers on a saturated machine: the step it
timed was stretched by the workers, and the model predicts every other config from the step's own
cost (issue #50)."""

from __future__ import annotations

import pytest

from loadtune.model.evidence import evidence_of
from loadtune.model.model import fit, own_step
from tests.test_model import BATCH, DATASET_LEN, TRUTH, first_round, made_up, varied

# A CPU step on two threads that keeps both cores busy, its fetch pure-Python work (tokenizing).
SATURATED = varied(TRUTH, fetch_cpu_ms_per_sample=0.3, fetch_wait_ms_per_sample=0.05, main_fetch_ms_per_sample=0.35,
                   step_ms_per_sample=1.2, step_cpu_ms_per_sample=1.2, step_threads=2)
BASELINE = {"num_workers": 0, "batch_size": BATCH}


@pytest.mark.parametrize("workers", [2, 4])
def test_a_watched_run_with_workers_predicts_the_baseline_from_the_unstretched_step(workers: int) -> None:
    """Watched with workers only, the step as timed holds the workers' crowding; the model takes
    it for the step's own cost no more: num_workers=0 is predicted within 5% of the truth, the
    step alone as the truth's."""
    watched = made_up(SATURATED, workers, name="watched")
    truth_step = SATURATED.costs.step_ms_per_sample * BATCH
    assert float(watched.figures.step_ms or 0.0) > 1.05 * truth_step  # the workers stretched it
    fitted = fit([watched], DATASET_LEN, min_trials=1)
    assert fitted is not None and fitted.step_threads == 2
    assert fitted.predict(BASELINE).step_ms == pytest.approx(truth_step, rel=0.05)
    assert fitted.predict(BASELINE).throughput == pytest.approx(SATURATED.predict(BASELINE).throughput, rel=0.05)
    assert fitted.predict({**BASELINE, "num_workers": workers, "prefetch_factor": 2}).step_ms == \
        pytest.approx(float(watched.figures.step_ms or 0.0), rel=1e-2)


def test_a_sweep_that_timed_the_step_without_workers_keeps_that_step() -> None:
    """A trial without workers times the step uncrowded: the fit reads the step from it, and
    separating the crowding (own_step) leaves such a model as it is."""
    records = first_round(SATURATED)
    fitted = fit(records, DATASET_LEN)
    assert fitted is not None and fitted.step_threads == 2
    assert fitted.costs.step_ms_per_sample == pytest.approx(SATURATED.costs.step_ms_per_sample, rel=1e-9)
    evidence = [e for r in records if (e := evidence_of(r)) is not None]
    assert own_step(fitted, evidence) is fitted
