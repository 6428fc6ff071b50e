"""`loadtune predict` and its parts: the pipeline model asked about another machine, on made-up
rows drawn from a known model (exact), memory at scale, the sweep's travel line, compare
across machines, and the command line on a fixture CSV."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadtune.asked.trials import cost_of
from loadtune.comparison.checks import transfer_check
from loadtune.comparison.files import compare, load_results
from loadtune.core.errors import ResultsError
from loadtune.model.predict import TOLERANCE, Target, choose, config_text, forecast, forecast_file, space, travel
from loadtune.record.record import Record, ResultsFile
from tests.conftest import run_cli
from tests.test_model import BATCH, TRUTH, first_round, made_up

V1 = Path(__file__).parent / "fixtures" / "v1" / "sweep.csv"
STEP_MS = TRUTH.costs.step_ms_per_sample * BATCH


def truth(settings, cores=None, ranks=1, step_scale=1.0) -> float:
    return TRUTH.predict(settings, cores=cores, ranks=ranks, step_scale=step_scale).throughput


def test_the_space_is_every_combination_of_the_values_measured():
    configs = space(first_round(TRUTH))
    # num_workers 0, 1, 2, 4; prefetch_factor 1, 2, 4; persistent or not: 3 x 3 x 2 with workers, 1 without.
    assert len(configs) == 1 + 3 * 3 * 2
    assert configs[0]["num_workers"] == 0 and configs[0]["persistent_workers"] is False
    assert configs == sorted(configs, key=cost_of)


@pytest.mark.parametrize("target, cores, ranks, step_scale", [
    (Target(cores=1), 1, 1, 1.0),
    (Target(ranks=2), 2, 2, 1.0),
    (Target(cores=8, ranks=4), 8, 4, 1.0),
    (Target(step_ms=STEP_MS / 2), 2, 1, 0.5),
])
def test_forecast_is_the_known_model_on_the_target(target, cores, ranks, step_scale):
    f = forecast(first_round(TRUTH), target)
    assert f.target.cores == cores and f.target.ranks == ranks
    for row in f.rows:
        expected = truth(row.settings, cores, ranks, step_scale)
        assert row.predicted_throughput == pytest.approx(expected, rel=1e-9), row.config
        assert row.predicted_throughput_per_rank == pytest.approx(expected / ranks, rel=1e-9)
    assert [r.predicted_throughput for r in f.rows] == sorted((r.predicted_throughput for r in f.rows), reverse=True)
    # The recommendation: the cheapest config within the tolerance of the best, by the truth.
    scored = [(s, truth(s, cores, ranks, step_scale)) for s in space(first_round(TRUTH))]
    best = max(t for _, t in scored)
    cheapest = min((s for s, t in scored if t >= (1 - TOLERANCE) * best), key=cost_of)
    assert f.recommended is not None and f.recommended.settings == cheapest
    assert sum(r.recommended for r in f.rows) == 1


def test_choose_takes_the_cheapest_within_the_tolerance():
    one = {"num_workers": 1, "batch_size": BATCH}
    four = {"num_workers": 4, "batch_size": BATCH}
    assert choose([(four, 100.0), (one, 97.5)], 0.03) == 1
    assert choose([(four, 100.0), (one, 96.0)], 0.03) == 0
    assert choose([], 0.03) is None


def test_the_sources_pick_is_predicted_for_the_target_and_its_share_said():
    records = [r.with_columns(tied_with_best=False) for r in first_round(TRUTH)]
    fastest = max(range(len(records)), key=lambda i: records[i].throughput)
    records[fastest] = records[fastest].with_columns(tied_with_best=True)
    f = forecast(records, Target(cores=1))
    carried = f.choice.source_pick
    assert carried is not None
    assert carried.predicted_throughput == pytest.approx(truth(carried.settings, 1), rel=1e-9)
    assert f.carried_share == pytest.approx(carried.predicted_throughput / f.recommended.predicted_throughput)


def test_what_lies_beyond_the_measured_range_is_said_with_how_far():
    assert forecast(first_round(TRUTH), Target(cores=1)).extrapolated == ()
    many = forecast(first_round(TRUTH), Target(cores=8)).extrapolated
    assert len(many) == 1 and "8 cores per rank is 4.0x the 2 measured" in many[0]
    fast = forecast(first_round(TRUTH), Target(step_ms=STEP_MS / 2)).extrapolated
    assert len(fast) == 1 and "0.50x the shortest measured" in fast[0]
    slow = forecast(first_round(TRUTH), Target(step_ms=STEP_MS * 3)).extrapolated
    assert len(slow) == 1 and "3.00x the longest measured" in slow[0]


def with_memory(record: Record) -> Record:
    """The record with memory figures: a 100 MB training process, 50 MB per worker growing 0.2 MB
    a batch over a 10-batch window, batches of 1 MB per sample... in /dev/shm."""
    w = record.settings.num_workers or 0
    return record.with_columns(peak_pss_mb=100.0 + 50.0 * w, worker_pss_mb=50.0 if w else None,
                               pss_growth_mb=0.2 * 10 * w if w else None, batches=10,
                               shm_need_mb=1.0 * BATCH * w * ((record.settings.prefetch_factor or 2) + 1) if w else 0.0,
                               ram_gb=64.0, shm_free_gb=8.0, scale=1.0)


def test_memory_at_scale_is_predicted_and_configs_that_do_not_fit_are_never_recommended():
    records = [with_memory(r) for r in first_round(TRUTH)]
    f = forecast(records, Target(scale=4.0, ram_gb=0.5, shm_gb=0.25))
    epoch_batches = 800 * 4 / BATCH  # the dataset, 4x, in batches of 16
    for row in f.rows:
        w, p = row.settings["num_workers"], row.settings["prefetch_factor"] or 0
        ram_mb = 100.0 + w * (50.0 + 0.2 * epoch_batches)
        assert row.memory.ram_gb == pytest.approx(ram_mb / 1024)
        assert row.memory.shm_gb == pytest.approx(BATCH * w * (p + 1) / 1024 if w else 0.0)
        fits = ram_mb <= 0.8 * 512 and row.memory.shm_gb * 1.5 <= 0.25
        assert row.memory.fits is fits, row.config
        assert row.memory.why is None if fits else "needs" in row.memory.why
    assert f.recommended is not None and f.recommended.memory.fits
    assert any(not r.memory.fits for r in f.rows)
    # Two ranks: two training processes and two sets of workers, each reading half the data.
    for row in forecast(records, Target(ranks=2, scale=4.0)).rows:
        w, p = row.settings["num_workers"], row.settings["prefetch_factor"] or 0
        assert row.memory.ram_gb == pytest.approx(2 * (100.0 + w * (50.0 + 0.2 * epoch_batches / 2)) / 1024)
        assert row.memory.shm_gb == pytest.approx(2 * BATCH * w * (p + 1) / 1024 if w else 0.0)


def test_travel_names_the_common_targets_where_the_pick_moves():
    records = first_round(TRUTH)
    pick = forecast(records).recommended.settings
    moved, same = travel(records, pick)
    assert {t.label for t in moved} | set(same) == {"half the cores", "2 ranks sharing these cores",
                                                      "a step twice as fast"}
    for t in moved:
        target = {"half the cores": Target(cores=1), "2 ranks sharing these cores": Target(ranks=2),
                  "a step twice as fast": Target(step_ms=STEP_MS / 2)}[t.label]
        there = forecast(records, target)
        assert t.config == there.recommended.config
        ours = next(r for r in there.rows if r.settings == pick)
        assert t.share == pytest.approx(ours.predicted_throughput / there.recommended.predicted_throughput)
        assert t.share < 1 - TOLERANCE
    assert moved, "the truth's pick moves on some common target"
    assert travel(records, None) == ([], [])


def write(path: Path, records: list[Record]) -> Path:
    out = ResultsFile(path)
    out.start(records)
    return path


def test_compare_sets_what_the_first_files_model_predicted_beside_what_the_other_machine_measured(tmp_path):
    """B measured on 1 core what the truth does there: A's model predicts it exactly."""
    one_core = dataclasses.replace(TRUTH, cores=1.0)
    a = write(tmp_path / "a.csv", first_round(TRUTH))
    b_rows = [made_up(one_core, w, p, pw, name=f"t{i}") for i, (w, p, pw) in
              enumerate([(0, None, False), (1, 2, False), (2, 2, True), (4, 1, False), (1, 4, True)])]
    b = write(tmp_path / "b.csv", [r.with_columns(cpu_count=1) for r in b_rows])
    check = transfer_check(first_round(TRUTH), [r.with_columns(cpu_count=1) for r in b_rows])
    assert check is not None and check.target.cores == 1
    assert check.median_error == pytest.approx(0.0, abs=1e-9) and check.compared == len(b_rows)
    best = max(b_rows, key=lambda r: r.throughput)
    assert check.measured_best == config_text(best.to_dict(), ("num_workers", "prefetch_factor", "persistent_workers"))
    comparison = compare(load_results([a, b]))
    assert comparison.checked.transfers["b"].median_error == pytest.approx(0.0, abs=1e-9)
    column = comparison.table["predicted_from_first@b"].tolist()
    assert column[comparison.table["trial"].tolist().index("t1")] == pytest.approx(b_rows[1].throughput)
    # The same machine: nothing to predict.
    assert transfer_check(first_round(TRUTH), first_round(TRUTH)) is None
    assert compare(load_results([a, a])).checked.transfers == {}


def test_compare_predicts_nothing_from_a_file_without_the_models_columns(tmp_path):
    """A format-1 file has no fetch figures: no transfer, whatever machine the other ran on."""
    other = tmp_path / "other.csv"
    other.write_text(V1.read_text().replace(",vm,AMD EPYC,2,", ",box,AMD EPYC,1,"))
    comparison = compare(load_results([V1, other]))
    assert "cpu_count" in comparison.files.differences
    assert comparison.checked.transfers == {}
    assert not any(c.startswith("predicted_from_first") for c in comparison.table.columns)


def test_bad_targets_and_tolerances_are_refused():
    records = first_round(TRUTH)
    for target in (Target(cores=0), Target(cores=-2), Target(step_ms=0.0), Target(scale=0.0)):
        with pytest.raises(ResultsError, match="must be above 0"):
            forecast(records, target)
    with pytest.raises(ResultsError, match="tolerance"):
        forecast(records, Target(), tolerance=-0.01)


def test_a_file_from_before_the_model_is_one_clear_error():
    with pytest.raises(ResultsError, match=r"sweep\.csv: cannot predict from this file: it lacks the columns "
                                           r"fetch_ms, fetch_cpu_share, handover_ms.*rerun the sweep"):
        forecast_file(V1)


@pytest.mark.slow
def test_predict_command_on_a_fixture_csv(tmp_path):
    source = write(tmp_path / "sweep.csv", first_round(TRUTH))
    out = tmp_path / "predicted.csv"
    result = run_cli("predict", str(source), "--cores", "1", "--json", "--out", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    expected = forecast(first_round(TRUTH), Target(cores=1))
    assert data["recommended"]["config"] == expected.recommended.config
    assert data["recommended"]["predicted_throughput"] == pytest.approx(expected.recommended.predicted_throughput,
                                                                        abs=0.01)
    assert set(data["recommended"]) >= {"settings", "predicted_throughput", "predicted_wait_ratio"}
    assert len(data["rows"]) == len(expected.rows) and data["target"]["cores"] == 1
    assert "Recommended for 1 usable core" in result.stderr
    import pandas as pd

    frame = pd.read_csv(out)
    assert len(frame) == len(expected.rows) and frame["recommended"].sum() == 1
    old = run_cli("predict", str(V1))
    assert old.returncode == 1
    assert old.stderr.strip().count("\n") == 0 and "rerun the sweep with this version" in old.stderr
    for bad in (["--cores", "0"], ["--step-ms", "0"], ["--tolerance", "-0.1"], ["--cores", "nan"]):
        refused = run_cli("predict", str(source), *bad)
        assert refused.returncode == 2 and bad[0] in refused.stderr, bad


def test_the_python_api_predicts_as_the_command_does(tmp_path):
    import loadtune

    source = write(tmp_path / "sweep.csv", first_round(TRUTH))
    got = loadtune.predict(source, cores=1, ranks=1)
    expected = forecast(first_round(TRUTH), Target(cores=1))
    assert got.recommended.config == expected.recommended.config
    assert got.to_json()["recommended"]["predicted_throughput"] == \
        pytest.approx(expected.recommended.predicted_throughput, abs=0.01)
