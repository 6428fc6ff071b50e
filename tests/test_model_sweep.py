"""The model strategy end to end: real DataLoaders with real worker processes, real files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import loadtune
from loadtune.core.kinds import Status
from loadtune.record.record import read_records
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

SWEEP = {"num_workers": [0, 1, 2, 4], "prefetch_factor": [1, 2], "persistent_workers": [False, True]}


@pytest.mark.serial  # a measured throughput against the model's prediction
def test_model_sweep_predicts_a_config_it_held_back(tmp_path):
    """The sweep measures the first round, then only what the model cannot rule out; every other
    config of the space is a predicted row. One of those, measured on its own afterwards, runs
    near its prediction (loosely: the model is judged by benchmarks/model_error.py)."""
    config = tiny_config(figures=True, sweep=SWEEP)  # the model is fitted to its figures
    config["measure"].update(repeats=2, batches=12)
    out = tmp_path / "model.csv"
    result = loadtune.sweep(config, out=out)
    rows = read_records(out)
    measured = [r for r in rows if r.ran and r.trial != "ideal"]
    predicted = [r for r in rows if r.status == Status.PREDICTED]
    assert {r.run.strategy for r in measured} == {"model"}
    assert predicted, "configs of the space not measured are predicted rows"
    assert all(r.rank is None and r.throughput is None and r.assessment.predicted_throughput for r in predicted)
    assert all(r.assessment.predicted_throughput is not None for r in measured if (r.run.round or 1) > 1), \
        "a follow-up is predicted before it runs"
    assert result.recommended is not None and result.recommended.status == "ok"
    grid = 1 + 3 * 2 * 2  # num_workers=0 collapses prefetch and persistence
    in_space = [r for r in measured if not r.assessment.asked_by]  # the rest: advice the model expected to gain
    # Left out before they ran: their workers' measured fetch time bounds them below the leader.
    bounded = [r for r in rows if r.status == Status.SKIPPED and "it would need to contend" in (r.reason or "")]
    assert len(in_space) + len(predicted) + len(bounded) == grid
    assert result.summary.found.model is not None
    info = result.summary.to_json()
    assert info["model"]["fetch_wait_ms_per_sample"] > 0 and "error" in info["model"]
    json.dumps(info, default=str)

    held = max(predicted, key=lambda r: r.assessment.predicted_throughput)
    alone = dict(config)
    alone["loader"] = {**config["loader"], "num_workers": held.settings.num_workers,
                       "prefetch_factor": held.settings.prefetch_factor,
                       "persistent_workers": bool(held.settings.persistent_workers)}
    alone["sweep"] = {}
    check = loadtune.sweep(alone, out=tmp_path / "held.csv", strategy="ofat")
    frame = pd.read_csv(tmp_path / "held.csv")
    base = frame[frame.trial == "baseline"].iloc[0]
    assert base.status == "ok" and check.recommended is not None
    assert 0.5 < held.assessment.predicted_throughput / base.throughput < 2.0
