"""`loadtune predict` on the sweep's own machine goes by what the sweep measured there, and reads
persistent workers' effect from the configs measured with and without them.

The sweep: TRUTH's rows with a costly worker start at each epoch (so persistent workers measure
about 12% faster than their twin without), written without the epoch-start column, so that no row
shows the start figures themselves (model.unshown_figures), as a sweep of LOADER writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadtune.cli import app
from loadtune.core.kinds import TOLERANCE
from loadtune.model.model import RUN_RESTARTING_WORKERS
from loadtune.model.predict import JUDGED_BY, Target, forecast, forecast_file, settings_key, settings_of
from loadtune.present.predict_text import forecast_lines
from loadtune.record.record import Record
from tests.test_model import TRUTH, made_up, varied
from tests.test_readers_voice import as_swept, write_sweep

WORKER_START_MS = 60.0
STARTING = varied(TRUTH, worker_start_ms=WORKER_START_MS)
# (num_workers, prefetch_factor, persistent_workers) measured
MEASURED = ((1, 2, False), (0, None, False), (2, 2, False), (2, 2, True), (4, 2, False))
PERSISTENT = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
TWIN = {**PERSISTENT, "persistent_workers": False}
# How near the model, with persistence read from the rows, puts the twins to their measured ratio.
READ_WITHIN = 0.01


def rows(measured=MEASURED) -> list[Record]:
    return [made_up(STARTING, w, p, pw).with_columns(epoch_start_ms=None) for w, p, pw in measured]


def by_settings(records: list[Record], settings: dict) -> Record:
    wanted = settings_key({**settings_of(records[0]), **settings})
    return next(r for r in records if settings_key(settings_of(r)) == wanted)


def sweep(tmp_path: Path, pick: dict, measured=MEASURED) -> tuple[Path, list[Record]]:
    made = rows(measured)
    records = as_swept(made, settings_of(by_settings(made, pick)))
    return write_sweep(tmp_path / "sweep.csv", records), records


def measured_share(records: list[Record], one: dict, other: dict) -> float:
    return by_settings(records, one).throughput / by_settings(records, other).throughput


def test_the_fixture_measures_persistent_workers_clearly_faster(tmp_path):
    _, records = sweep(tmp_path, PERSISTENT)
    assert measured_share(records, TWIN, PERSISTENT) < 1 - 2 * TOLERANCE


def test_on_its_own_machine_the_twin_is_not_said_to_do_as_well(tmp_path):
    """The sweep's pick has persistent workers; its twin without them measured ~11% slower there."""
    path, records = sweep(tmp_path, PERSISTENT)
    f = forecast_file(path)
    assert f.recommended is not None and f.recommended.settings == settings_of(by_settings(records, PERSISTENT))
    assert f.recommended.measured and f.recommended.figure == pytest.approx(by_settings(records, PERSISTENT).throughput)
    lines = forecast_lines(f)
    assert not any("would do as well" in line for line in lines), lines
    assert "The sweep's own pick is the same: it travels." in lines
    recommended = next(line for line in lines if line.startswith("Recommended for"))
    assert f"{f.recommended.measured_throughput:.1f} samples/s as measured on this machine" in recommended
    # Each config measured here stands in the rows by its measurement.
    for r in f.rows:
        if r.measured:
            assert r.figure == r.measured_throughput
    assert [r.figure for r in f.rows] == sorted((r.figure for r in f.rows), reverse=True)


def test_a_pick_that_measured_slower_is_said_so_as_measured(tmp_path):
    """The sweep's pick is the twin without persistent workers: predict says what the sweep measured of it."""
    path, records = sweep(tmp_path, TWIN)
    f = forecast_file(path)
    assert f.recommended is not None and f.recommended.settings == settings_of(by_settings(records, PERSISTENT))
    share = measured_share(records, TWIN, PERSISTENT)
    assert f.carried_share == pytest.approx(share)
    lines = forecast_lines(f)
    assert f"The sweep's own pick (num_workers=2) would run {share:.2f} of that there (as measured on this " \
           "machine)." in lines
    assert not any("would do as well" in line for line in lines)


def test_another_machine_is_still_predicted(tmp_path):
    path, _ = sweep(tmp_path, PERSISTENT)
    f = forecast_file(path, Target(cores=1))
    assert all(not r.measured and r.figure == r.predicted_throughput for r in f.rows)
    assert not any("as measured on this machine" in line for line in forecast_lines(f))


def test_persistence_is_read_from_the_configs_measured_both_ways(tmp_path):
    path, records = sweep(tmp_path, PERSISTENT)
    f = forecast_file(path)
    assert f.fit.read == "worker_start_ms"
    assert not {name for name, _ in f.fit.neutral} & set(JUDGED_BY["persistent_workers"])
    lines = forecast_lines(f)
    assert any(line.startswith("Persistent workers' effect read from the configs measured with and without them: "
                               "the workers' start at each epoch (worker_start_ms) set to ") for line in lines)
    kept = [line for line in lines if line.startswith("Kept neutral")]
    assert not any("persistent_resume_ms" in line or "(worker_start_ms" in line for line in kept), kept
    # The model now puts the twins as far apart as they measured, here and on another machine.
    predicted = {settings_key(r.settings): r.predicted_throughput for r in f.rows}
    twin, pick = (settings_key(settings_of(by_settings(records, s))) for s in (TWIN, PERSISTENT))
    assert predicted[twin] / predicted[pick] == pytest.approx(measured_share(records, TWIN, PERSISTENT),
                                                             abs=READ_WITHIN)
    there = {settings_key(r.settings): r.predicted_throughput for r in forecast_file(path, Target(cores=4)).rows}
    assert there[twin] < (1 - TOLERANCE) * there[pick]


def test_without_a_persistent_row_measured_the_start_stays_neutral():
    """Nothing measured with persistent workers: nothing to read their effect from."""
    measured = tuple(m for m in MEASURED if not m[2])
    f = forecast(as_swept(rows(measured)))
    assert f.fit.read is None
    assert ("worker_start_ms", RUN_RESTARTING_WORKERS) in f.fit.neutral
    assert f.fit.model.costs.worker_start_ms == 0


def test_predict_in_a_terminal_says_what_was_measured(tmp_path):
    path, _ = sweep(tmp_path, PERSISTENT)
    result = CliRunner().invoke(app, ["predict", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "would do as well" not in result.output and "as measured on this machine" in result.output
    assert "persistent workers' resume" not in result.output
