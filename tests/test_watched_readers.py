"""The offline readers on a real training run's rows (status watched): a watched row is evidence,
never a ranked trial; per-rank rows combined as a sweep records ranks; `loadtune predict` from one
watched config over the default sweep around it, saying which figures it kept neutral; `compare`
of a sweep and a run; `init --from`; `report`. Made-up rows drawn from a known model: exact."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadtune.asked.config import load_config
from loadtune.asked.trials import effective_settings
from loadtune.cli import app
from loadtune.comparison.files import compare, load_results
from loadtune.core.errors import LoadtuneError, ResultsError
from loadtune.decide.choice import recommended
from loadtune.model.evidence import evidence_of
from loadtune.model.predict import fit_records, forecast, forecast_file, settings_key, settings_of, space
from loadtune.model.predict_values import MEASURED, PREDICTED
from loadtune.present.compare_text import comparison_lines, run_table, write_aligned
from loadtune.present.predict_text import forecast_lines
from loadtune.present.report import not_run_lines, results_table
from loadtune.present.starter import FACTORY_PLACEHOLDER, from_run, write_from_run
from loadtune.present.watched_run import watched_lines, watched_table
from loadtune.record.record import Record, ResultsFile, read_records
from loadtune.record.watched import combine_ranks, default_sweep, loader_file, loaders
from tests.test_model import BATCH, TRUTH, first_round, made_up

RUN_EPOCH_BATCHES = 50  # TRUTH's dataset of 800 samples in batches of 16
WORKERS_ON_TWO_CORES = [0, 1, 2, 3, 4, 6]  # up to 3 a core


def watched(record: Record, name: str = "train", rank: int = 0, ranks: int = 1, **changes) -> Record:
    """`record` as a watched run writes it: status watched, a row per rank with that rank's own
    throughput and CPU (`record`'s are all ranks'), strategy watch."""
    own = {k: record.column(k) / ranks for k in ("throughput", "main_cpu_util")
           if ranks > 1 and record.column(k) is not None}
    return record.with_columns(**{
        "trial": name if ranks == 1 else f"{name} rank {rank}", "status": "watched", "strategy": "watch",
        "dist_rank": rank, "ranks": ranks, "batches": 400, "run_epoch_batches": RUN_EPOCH_BATCHES,
        "config_name": "train.py", "host": "box", "device": "cpu", "scale": 1.0, **own, **changes})


def ranked_sweep() -> list[Record]:
    """TRUTH's first round as a sweep writes it: ranked, the fastest tied with the best."""
    rows = sorted(first_round(TRUTH), key=lambda r: -r.throughput)
    return [r.with_columns(rank=i + 1, tied_with_best=i == 0, ranks=1, host="box", device="cpu",
                                config_name="demo", scale=1.0) for i, r in enumerate(rows)]


def write(path: Path, records: list[Record], loader: dict | None = None) -> Path:
    ResultsFile(path).start(records)
    if loader is not None:
        loader_file(path).write_text(json.dumps(loader))
    return path


def default_space_keys(record: Record) -> set[tuple[str, ...]]:
    """The default sweep around `record`, every combination, as settings keys (written out here,
    not by the code under test)."""
    values = default_sweep(record)
    keys = set()
    for workers, prefetch, persistent, pin in itertools.product(*values.values()):
        s = effective_settings({"num_workers": workers, "prefetch_factor": prefetch, "persistent_workers": persistent,
                                "pin_memory": pin, "batch_size": record.settings.batch_size})
        s["persistent_workers"] = bool(s["persistent_workers"]) and workers > 0
        keys.add(settings_key(s))
    return keys


# --- a watched row is evidence, never a ranked trial ----------------------------------------------


def test_a_watched_row_ran_and_is_measured_but_is_never_ranked_or_listed_as_not_run():
    row = watched(made_up(TRUTH, 0))
    assert row.ran and row.watched and row.measured is not None
    assert row.measured.throughput.mean == row.throughput
    assert evidence_of(row) is not None
    sweep_row = made_up(TRUTH, 1)
    assert sweep_row.ran and not sweep_row.watched
    assert not_run_lines([row]) == []
    assert recommended([row]) is None, "a run measured one config: nothing to recommend from its rows alone"
    console = Console(file=io.StringIO(), width=200)
    console.print(results_table([row, sweep_row.with_columns(rank=1, tied_with_best=True)]))
    assert "train" not in console.file.getvalue(), "the ranked table holds the sweep's trials only"


def test_a_row_is_read_back_as_written_with_its_rank(tmp_path):
    row = watched(made_up(TRUTH, 2), rank=1, ranks=2)
    back = read_records(write(tmp_path / "run.csv", [row]))[0]
    assert back.watched and back.measuring.dist_rank == 1 and back.measuring.ranks == 2 and back.trial == "train rank 1"


# --- ranks ----------------------------------------------------------------------------------------


def test_per_rank_rows_combine_as_a_sweep_records_ranks():
    whole = made_up(TRUTH, 2)
    zero = watched(whole, rank=0, ranks=2, wait_ratio=0.2, main_cpu_util=0.1, peak_pss_mb=100.0, step_ms=10.0)
    one = watched(whole, rank=1, ranks=2, wait_ratio=0.4, main_cpu_util=0.3, peak_pss_mb=300.0, step_ms=12.0)
    alone = watched(made_up(TRUTH, 0), name="val")
    combined = combine_ranks([zero, alone, one])
    assert [r.trial for r in combined] == ["train", "val"], "in place of the first rank's row; others kept"
    train = combined[0]
    assert train.throughput == pytest.approx(whole.throughput, abs=0.01), "throughput summed over the ranks"
    assert train.wait_ratio == pytest.approx(0.3) and train.measuring.wait_ratio_max_rank == pytest.approx(0.4)
    assert train.resources.main_cpu_util == pytest.approx(0.4), "shares of one host's cores: summed"
    assert train.resources.peak_pss_mb == pytest.approx(400.0) and train.figures.step_ms == pytest.approx(11.0)
    assert (train.measuring.ranks, train.measuring.dist_rank, train.status) == (2, None, "watched")
    assert combined[1] is alone
    assert evidence_of(zero) is None, "one rank's own figures are no evidence until combined"
    assert evidence_of(train) is not None and evidence_of(train).ranks == 2
    # A rank whose row is missing counts as the mean of those present.
    assert combine_ranks([zero])[0].throughput == pytest.approx(2 * zero.throughput, abs=0.01)


def test_predict_from_per_rank_rows_is_predict_from_their_sum():
    whole = made_up(TRUTH, 2, 2, True)
    by_rank = [watched(whole, rank=k, ranks=2) for k in (0, 1)]
    summed = watched(whole, ranks=2, dist_rank=None, throughput=whole.throughput,
                     main_cpu_util=whole.resources.main_cpu_util)
    # (the combined row, as any row, rounded to its columns' digits)
    a, b = forecast(by_rank), forecast([Record.rounded(**summed.to_dict())])
    assert a.fit.model.ranks == 2 and a.fit.model.trials == 1
    assert {r.config: r.predicted_throughput for r in a.rows} == \
        pytest.approx({r.config: r.predicted_throughput for r in b.rows}, rel=1e-9)


# --- the default sweep around a run ---------------------------------------------------------------


@pytest.mark.parametrize("cores, ranks, workers", [
    (2, 1, WORKERS_ON_TWO_CORES),
    (1, 1, [0, 1, 2, 3, 4]),
    (8, 1, [0, 1, 2, 3, 4, 6, 8, 12, 16, 24]),
    (8, 4, WORKERS_ON_TWO_CORES),
    (128, 1, [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]),
])
def test_the_default_sweep_tries_workers_up_to_three_a_core_of_a_rank(cores, ranks, workers):
    row = watched(made_up(TRUTH, 0), ranks=ranks, cpu_count=cores)
    assert default_sweep(row) == {"num_workers": workers, "prefetch_factor": [1, 2, 4],
                                  "persistent_workers": [False, True], "pin_memory": [False]}


def test_the_default_sweep_holds_the_runs_own_values_and_pins_only_on_an_accelerator():
    row = watched(made_up(TRUTH, 5, 3), device="cuda:0")
    sweep = default_sweep(row)
    assert 5 in sweep["num_workers"] and sweep["prefetch_factor"] == [1, 2, 3, 4]
    assert sweep["pin_memory"] == [False, True]


# --- predict from one watched config ---------------------------------------------------------------


def test_one_watched_config_without_workers_predicts_the_whole_default_space_and_says_what_it_kept_neutral():
    run = watched(made_up(TRUTH, 0))
    f = forecast([run])
    assert {settings_key(r.settings) for r in f.rows} == default_space_keys(run)
    assert len(f.rows) == 1 + (len(WORKERS_ON_TWO_CORES) - 1) * 3 * 2
    assert {settings_key(s) for s in space([run])} == default_space_keys(run)
    assert f.fit.model.trials == 1 and f.source.run == "train"
    neutral = dict(f.fit.neutral)
    assert set(neutral) == {"handover_ms_per_sample", "worker_start_ms", "worker_start_per_worker_ms",
                            "persistent_resume_ms", "worker_put_ms", "core_share", "oversubscription"}
    assert neutral["handover_ms_per_sample"] == "num_workers > 0"
    model = f.fit.model
    assert (model.costs.handover_ms_per_sample, model.fitted.worker_put_ms, model.fitted.core_share) == (0.0, 0.0, 1.0)
    own = next(r for r in f.rows if r.settings["num_workers"] == 0)
    assert own.measured_throughput == pytest.approx(run.throughput)
    lines = forecast_lines(f)
    assert "fitted to 1 measured config: the model could not be checked against a second measured config" in lines[0]
    kept = next(line for line in lines if line.startswith("Kept neutral"))
    assert "handover_ms_per_sample" in kept and "shown by a run with num_workers > 0" in kept
    assert sum("Kept neutral" in line for line in lines) == 1, "one line"
    assert f.recommended is not None and f.recommended.settings["num_workers"] > 0
    assert any(line.startswith("The run's own settings (num_workers=0) would run") for line in lines)
    data = f.to_json()
    assert data["source"]["run"] == "train" and {n["figure"] for n in data["neutral"]} == set(neutral)


def test_a_run_with_persistent_workers_keeps_them_while_their_start_up_is_unknown():
    run = watched(made_up(TRUTH, 2, 2, True))
    f = forecast([run])
    assert {"worker_start_ms", "worker_start_per_worker_ms"} <= {name for name, _ in f.fit.neutral}
    assert "persistent_resume_ms" not in {name for name, _ in f.fit.neutral}, "the run shows the resume"
    assert f.recommended is not None and f.recommended.settings["persistent_workers"] is True, \
        "a start-up kept at no cost is no reason to drop persistent workers"


def test_a_sweep_predicts_as_before_with_nothing_kept_neutral():
    f = forecast(first_round(TRUTH))
    assert f.fit.neutral == () and f.source.run is None
    assert not any(line.startswith("Kept neutral") for line in forecast_lines(f))
    assert fit_records(first_round(TRUTH)[:1]).trials == 1, "predict fits one measured trial of a sweep too"


def test_predict_file_pastes_the_loaders_other_settings(tmp_path):
    run = watched(made_up(TRUTH, 0))
    path = write(tmp_path / "run.csv", [run], {"train": {
        "dataset": "mypkg.data:Photos", "script": "train.py", "argv": ["--lr", "3"],
        "loader_kwargs": {"batch_size": BATCH, "shuffle": True, "num_workers": 0, "drop_last": True,
                          "prefetch_factor": None, "sampler": "DistributedSampler", "timeout": 0.0}}})
    f = forecast_file(path)
    paste = forecast_lines(f)[-1]
    assert paste.startswith(f"Paste (each rank): DataLoader(dataset, batch_size={BATCH}, shuffle=True, num_workers=")
    assert "drop_last=True" in paste and "timeout" not in paste, "DataLoader's defaults left out"
    assert paste.endswith("; keep sampler=DistributedSampler as in your code")


def test_of_several_loaders_the_one_the_run_spent_most_time_in_is_predicted():
    train = watched(made_up(TRUTH, 0), batches=400)
    val = watched(made_up(TRUTH, 1), name="val", batches=20)
    f = forecast([val, train])
    assert f.source.run == "train" and f.fit.model.trials == 1
    assert any("predicted for train" in n and "val" in n for n in f.choice.notes)
    assert [r.trial for r in loaders([val, train])] == ["train", "val"]


def test_a_run_without_measured_rows_is_one_clear_error(tmp_path):
    failed = dataclasses.replace(watched(made_up(TRUTH, 0)), throughput=None, wait_ratio=None)
    with pytest.raises(ResultsError, match="run.csv: no measured row"):
        forecast_file(write(tmp_path / "run.csv", [failed]))


# --- compare a sweep and a run --------------------------------------------------------------------


def test_a_run_of_a_config_the_sweep_measured_on_a_like_machine_is_set_beside_that_measurement(tmp_path):
    sweep = ranked_sweep()
    same = next(r for r in sweep if r.settings.num_workers == 1 and r.settings.prefetch_factor == 2
                and not r.settings.persistent_workers)
    run = watched(same, throughput=same.throughput * 0.9)
    comparison = compare(load_results([write(tmp_path / "sweep.csv", sweep), write(tmp_path / "run.csv", [run])]))
    (check,) = comparison.checked.runs["run"]
    assert check.figure == MEASURED and check.sweep_trial == same.trial
    assert check.ratio == pytest.approx(0.9, abs=1e-3) and check.agrees
    assert not comparison.changed and comparison.files.run_labels == ("run",) and comparison.reference == "sweep"
    lines = comparison_lines(comparison)
    said = next(line for line in lines if line.startswith("run (the run): train"))
    assert f"sweep (the sweep) measured {same.throughput:.1f}" in said and "run / sweep 0.90" in said
    assert "conclusion" not in lines[-1], "one sweep: no conclusion to hold"
    console = Console(file=io.StringIO(), width=200)
    console.print(run_table(comparison, width=200))
    assert "measured" in console.file.getvalue()
    frame = pd.read_csv(write_aligned(comparison, tmp_path / "aligned.csv"))
    row = frame[frame["trial"] == "train"].iloc[0]
    assert row["sweep_throughput@run"] == pytest.approx(same.throughput) and row["sweep_figure@run"] == MEASURED


def test_a_run_on_another_machine_is_set_beside_the_sweeps_prediction_for_it(tmp_path):
    sweep = ranked_sweep()
    on_four = made_up(dataclasses.replace(TRUTH, cores=2.0, ranks=2), 1).with_columns(cpu_count=4)
    run = [watched(on_four, rank=k, ranks=2) for k in (0, 1)]
    comparison = compare(load_results([write(tmp_path / "sweep.csv", sweep), write(tmp_path / "run.csv", run)]))
    (check,) = comparison.checked.runs["run"]
    assert check.figure == PREDICTED and check.ranks == 2
    assert (check.target.cores, check.target.ranks) == (4.0, 2)
    model = fit_records(sweep)
    expected = model.predict(settings_of(on_four), cores=4.0, ranks=2)
    assert check.sweep_throughput == pytest.approx(expected.throughput)
    assert check.throughput == pytest.approx(on_four.throughput, abs=0.02), "the ranks' rows, summed"
    assert check.pick is not None and check.pick_throughput is not None
    line = next(line for line in comparison_lines(comparison) if line.startswith("run (the run)"))
    assert "(the sweep)'s model predicted" in line and "4 usable cores, 2 ranks" in line


def test_two_sweeps_compare_as_before_and_a_run_beside_them_changes_nothing(tmp_path):
    sweep = write(tmp_path / "a.csv", ranked_sweep())
    other = write(tmp_path / "b.csv", ranked_sweep())
    run = write(tmp_path / "run.csv", [watched(made_up(TRUTH, 0))])
    plain = compare(load_results([sweep, other]))
    assert plain.checked.runs == {} and plain.files.run_labels == ()
    assert comparison_lines(plain)[-1] == "conclusion holds"
    mixed = compare(load_results([sweep, other, run]))
    assert mixed.verdict == plain.verdict and mixed.winners["a"] == plain.winners["a"]
    assert set(mixed.checked.runs) == {"run"} and comparison_lines(mixed)[-1] == "conclusion holds"
    assert not any("status changed" in f for flags in mixed.conclusion.flags.values() for f in flags)
    runs_only = compare(load_results([run, run]))
    assert not runs_only.changed and "Runs only" in comparison_lines(runs_only)[-1]


# --- init --from ------------------------------------------------------------------------------------


def test_init_from_a_run_writes_a_config_with_the_watched_loaders_settings(tmp_path):
    run = watched(made_up(TRUTH, 2, 4, True))
    source = write(tmp_path / "run.csv", [run], {"train": {
        "dataset": "mypkg.data:Photos", "script": "train.py", "argv": [],
        "loader_kwargs": {"batch_size": BATCH, "shuffle": True, "num_workers": 2, "drop_last": True,
                          "multiprocessing_context": "spawn", "timeout": 0.0}}})
    written, name = write_from_run(source, tmp_path / "start.yaml")
    assert name == "train"
    text = written.read_text()
    assert f'factory: "{FACTORY_PLACEHOLDER}"' in text and '# factory: "mypkg.data:Photos"' in text
    written.write_text(text.replace(FACTORY_PLACEHOLDER, "loadtune.demo:synthetic_images"))
    config = load_config(written).config
    assert config.dataset.factory == "loadtune.demo:synthetic_images"
    loader = config.loader
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == \
        (BATCH, 2, 4, True)
    assert (loader.shuffle, loader.drop_last, loader.multiprocessing_context) == (True, True, "spawn")
    assert config.sweep == {k: v for k, v in default_sweep(run).items() if k != "pin_memory"}, \
        "pin_memory is swept only where the run fed an accelerator"
    assert config.step.sleep_s == pytest.approx(run.figures.step_ms / 1e3, abs=1e-4)
    assert config.measure.run_epoch_batches == RUN_EPOCH_BATCHES
    with pytest.raises(LoadtuneError, match="already exists"):
        write_from_run(source, written)


def test_init_from_without_the_loader_file_uses_the_csvs_columns(tmp_path):
    run = watched(made_up(TRUTH, 0), ranks=2, dist_rank=0, trial="train rank 0")
    text, _ = from_run(write(tmp_path / "run.csv", [run, run.with_columns(dist_rank=1,
                                                                              trial="train rank 1")]))
    assert "loadtune sweep THIS_FILE --ranks 2" in text and "num_workers: 0" in text
    assert "shuffle" not in text.split("loader:")[1].split("sweep:")[0]


@pytest.mark.parametrize("content, message", [
    ("a,b\n1,2\n", "not a loadtune results CSV"),
    (None, "no watched row"),
])
def test_init_from_refuses_a_file_without_a_watched_row_naming_it(tmp_path, content, message):
    path = tmp_path / "in.csv"
    if content is None:
        write(path, ranked_sweep())
    else:
        path.write_text(content)
    with pytest.raises(LoadtuneError, match=rf"in\.csv: .*{message}"):
        from_run(path)


# --- report -----------------------------------------------------------------------------------------


def test_report_shows_each_rank_their_sum_and_the_next_command(tmp_path):
    whole = made_up(TRUTH, 1)
    rows = [watched(whole, rank=k, ranks=2, verdict="data-bound: io", advice="add workers") for k in (0, 1)]
    console = Console(file=io.StringIO(), width=200)
    console.print(watched_table(rows, title="run"))
    table = console.file.getvalue()
    assert "train" in table and " all " in table and f"{whole.throughput:.1f}" in table
    lines = watched_lines(rows, "run.csv")
    assert lines[0] == "Bottleneck (train, every rank): data-bound: io; add workers"
    assert lines[1].startswith("Watched train (num_workers=1, prefetch_factor=2, persistent_workers=false")
    assert "2 ranks" in lines[1] and "samples/s in all" in lines[1]
    assert lines[-1].startswith("Next: loadtune predict run.csv") and "loadtune init --from run.csv" in lines[-1]
    assert not any("Recommended" in line for line in lines)


# --- the command line, in process -------------------------------------------------------------------


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_the_commands_read_a_run(tmp_path):
    run = write(tmp_path / "run.csv", [watched(made_up(TRUTH, 0), reason="the script raised ValueError")])
    sweep = write(tmp_path / "sweep.csv", ranked_sweep())
    code, out = _cli("report", str(run))
    assert code == 0, out
    assert "(a watched run)" in out and "Next: loadtune predict" in out and "Recommended" not in out
    assert "the script raised ValueError" in out and "rank: 1 = best" not in out
    code, out = _cli("predict", str(run), "--json")
    assert code == 0, out
    data = json.loads(out[out.index("{\n"):])
    assert data["source"]["run"] == "train" and data["neutral"] and data["recommended"]
    code, out = _cli("compare", str(sweep), str(run))
    assert code == 0, out
    assert "run (the run): train" in out and "conclusion" not in out
    code, out = _cli("init", str(tmp_path / "start.yaml"), "--from", str(run))
    assert code == 0 and "fill in its dataset.factory" in out, out
    code, out = _cli("init", str(tmp_path / "again.yaml"), "--from", str(sweep))
    assert code == 1 and "sweep.csv: no watched row" in out
    code, out = _cli("watch", "--help")
    assert code == 0 and "SCRIPT [ARGS]..." in out and "--every" in out


@pytest.mark.slow
def test_watch_passes_the_scripts_arguments_and_exit_status_through(tmp_path):
    pytest.importorskip("loadtune.training_process.script")
    from tests.conftest import run_cli

    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\nsys.exit(3)\n")
    done = run_cli("watch", "--out", str(tmp_path / "w.csv"), str(script), "--out", "x", "-m", "y", "--every", "2",
                   cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "argv ['--out', 'x', '-m', 'y', '--every', '2']" in done.stdout
    refused = run_cli("watch", "--every", "0", str(script), cwd=tmp_path)
    assert refused.returncode == 2 and "--every" in refused.stderr


def test_report_of_a_run_that_measured_nothing_says_so():
    empty = dataclasses.replace(watched(made_up(TRUTH, 0)), throughput=None, wait_ratio=None,
                                reason="the script raised ValueError")
    lines = watched_lines([empty], "run.csv")
    assert lines == ["No watched loader was measured: the script raised ValueError. A run needs a few batches past "
                     "the first ones, which are dropped as its warm-up."]
