"""The offline readers say what the sweep says, the same way: `loadtune predict`'s paste line
carries the loader's settings the sweep's own paste line does (one builder, settings.dataloader_line);
the Python API's loader_kwargs are DataLoader's keywords only; the model's error is one figure,
worded alike; predict recommends within the tolerance of its table's best; compare cannot tell,
rather than call changed, where a file never measured the other's winner; and a config has one name
everywhere (settings.config_name, the sweep's trial names). Made-up rows drawn from a known model:
exact, whatever the machine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from loadtune.asked.config import config_from_data
from loadtune.asked.trials import BASELINE, cost_of
from loadtune.cli import app
from loadtune.comparison.checks import transfer_check
from loadtune.comparison.files import compare, load_results
from loadtune.comparison.values import VERDICT_CANNOT_TELL, VERDICT_HOLDS, WINNER_CHANGED, WINNER_NOT_MEASURED
from loadtune.model.model import ModelReport, prediction_error
from loadtune.model.predict import Target, forecast, forecast_file, settings_key, settings_of
from loadtune.present.compare_text import comparison_lines
from loadtune.present.predict_text import forecast_lines
from loadtune.present.summary import summarize_sweep
from loadtune.present.sweep import SweepResult
from loadtune.present.watched_run import run_line
from loadtune.record.findings import MODEL_FIT_ERROR, CheaperWaitsMore, ModelError, ModelFellBack
from loadtune.record.record import Record, ResultsFile
from loadtune.record.settings import config_name, dataloader_line, loader_keywords, paste_settings, thread_settings
from loadtune.record.watched import LoaderInfo, plain_settings, write_loader_info
from tests.conftest import tiny_config
from tests.test_model import BATCH, TRUTH, first_round, made_up, varied
from tests.test_watched_readers import watched

FIXTURES = Path(__file__).parent / "fixtures" / "compare"
# The sweep's loader block: its baseline, with settings no column holds (shuffle, drop_last).
LOADER = {"batch_size": BATCH, "shuffle": True, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": False,
          "pin_memory": False, "drop_last": True, "timeout": 0.0, "collate_fn": None, "worker_init_fn": None,
          "multiprocessing_context": None, "in_order": True, "main_threads": None, "worker_threads": None}
SWEPT = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")


def trial_kwargs(record: Record) -> dict:
    """A trial's loader settings as the sweep holds them: the loader block with the row's settings."""
    kwargs = {**LOADER, **{k: record.column(k) for k in SWEPT}}
    if not kwargs["num_workers"]:
        kwargs.update(prefetch_factor=None, persistent_workers=False)
    return kwargs


def as_swept(records: list[Record], pick_settings: dict | None = None) -> list[Record]:
    """Rows as a sweep of LOADER writes them: the baseline named so, every other trial by what it
    changes, ranked by throughput; the row of `pick_settings` (else the fastest) its pick."""
    rows = sorted(records, key=lambda r: -r.throughput)
    pick = next((r for r in rows if pick_settings is not None and settings_key(settings_of(r)) ==
                 settings_key(pick_settings)), rows[0])
    out = []
    for i, r in enumerate(rows):
        name = config_name(trial_kwargs(r), LOADER)
        changed = BASELINE if name == BASELINE else "+".join(part.partition("=")[0] for part in name.split(", "))
        out.append(r.with_columns(trial=name, changed=changed, rank=i + 1, tied_with_best=r is pick,
                                       host="box", device="cpu", config_name="demo", config_sha="abc", scale=1.0,
                                       round=1, ranks=1))
    return out


def write_sweep(path: Path, records: list[Record], loader_file: bool = True) -> Path:
    """The CSV and, as a sweep writes it beside the CSV, each trial's loader settings."""
    ResultsFile(path).start(records)
    if loader_file:
        write_loader_info(path, {r.trial: LoaderInfo(loader_kwargs=plain_settings(trial_kwargs(r))) for r in records})
    return path


def sweep_with_pick_predict_keeps(target: Target = Target()) -> tuple[list[Record], Record]:
    """TRUTH's first round and the config predict recommends on the same machine, measured: the
    sweep's pick is predict's."""
    rows = first_round(TRUTH)
    chosen = forecast(as_swept(rows), target).recommended
    assert chosen is not None
    measured = {settings_key(settings_of(r)) for r in rows}
    if settings_key(chosen.settings) not in measured:
        s = chosen.settings
        rows.append(made_up(TRUTH, s["num_workers"], s["prefetch_factor"], s["persistent_workers"], name="pick"))
    records = as_swept(rows, chosen.settings)
    return records, next(r for r in records if r.assessment.tied_with_best)


def paste_of(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("Paste"))


# --- 1. one paste line ----------------------------------------------------------------------------


def test_predict_pastes_the_loader_settings_the_sweeps_own_answer_pastes(tmp_path):
    records, pick = sweep_with_pick_predict_keeps()
    path = write_sweep(tmp_path / "sweep.csv", records)
    # The sweep's own paste line for its pick (Summary.dataloader), from the trial's loader settings.
    sweep_line = summarize_sweep(records, pick, trial_kwargs(pick), LOADER, output="o.csv", config="demo", scale=1.0,
                                 scaled=None, device="cpu", ranks=1, rank_by="throughput", strategy="model",
                                 warnings=()).pick.dataloader
    f = forecast_file(path)
    assert f.recommended is not None and f.recommended.settings == settings_of(pick)
    paste = paste_of(forecast_lines(f))
    assert paste == f"Paste (each rank): {dataloader_line(trial_kwargs(pick))}"
    assert "shuffle=True" in paste and "drop_last=True" in paste
    # The same keywords and values as the sweep's line, whatever order its builder gives them.
    assert sorted(paste.removeprefix("Paste (each rank): DataLoader(").rstrip(")").split(", ")) == \
        sorted(sweep_line.removeprefix("DataLoader(").rstrip(")").split(", "))
    # On another machine the config may move; the loader's other settings stay.
    for target in (Target(ranks=2), Target(cores=1)):
        there = forecast_file(path, target)
        kept = paste_settings(there.recommended.settings, {"shuffle": True, "drop_last": True})
        assert paste_of(forecast_lines(there)) == f"Paste (each rank): {dataloader_line(kept)}"


def test_without_the_loader_file_the_paste_line_says_to_keep_the_loaders_other_settings(tmp_path):
    records, _ = sweep_with_pick_predict_keeps()
    path = write_sweep(tmp_path / "old.csv", records, loader_file=False)
    paste = paste_of(forecast_lines(forecast_file(path)))
    assert "shuffle" not in paste.partition(";")[0]
    assert paste.endswith("keep your DataLoader's other settings (shuffle, drop_last, a sampler, ...) as in your "
                          "code: no old.loader.json beside the CSV says them")


def test_the_paste_line_is_one_builder_in_the_loader_blocks_order():
    kwargs = {"shuffle": True, "prefetch_factor": 4, "batch_size": 32, "num_workers": 2, "persistent_workers": True,
              "collate_fn": "my.data:pad", "pin_memory": False, "main_threads": 2}
    line = dataloader_line(kwargs)
    assert line == ("DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2, prefetch_factor=4, "
                    "persistent_workers=True, collate_fn=pad); torch.set_num_threads(2) in the training process")
    assert dataloader_line(dict(reversed(list(kwargs.items())))) == line
    # Without workers, what needs them is left out.
    assert dataloader_line(paste_settings({"num_workers": 0, "batch_size": 8}, {"persistent_workers": True,
                                                                                 "shuffle": True})) == \
        "DataLoader(dataset, batch_size=8, shuffle=True, num_workers=0)"


# --- 2. the API's loader_kwargs -------------------------------------------------------------------


def test_the_apis_loader_kwargs_build_a_real_dataloader_and_threads_are_apart(monkeypatch):
    import torch.utils.data

    import loadtune
    import loadtune.sweep_process.pipeline as pipeline

    records = as_swept(first_round(TRUTH))
    chosen = next(r for r in records if r.assessment.tied_with_best)
    kwargs = {**trial_kwargs(chosen), "collate_fn": "torch.utils.data:default_collate", "main_threads": 2,
              "worker_threads": 1}
    summary = summarize_sweep(records, chosen, kwargs, LOADER, output="o.csv", config="demo", scale=1.0, scaled=None,
                              device="cpu", ranks=1, rank_by="throughput", strategy="model", warnings=())
    made = SweepResult(Path("o.csv"), tuple(records), summary)
    monkeypatch.setattr(pipeline, "run_sweep", lambda asked, on_event: made)
    result = loadtune.sweep(tiny_config())
    assert isinstance(result, SweepResult) and result.recommended is chosen
    assert result.thread_settings == {"main_threads": 2, "worker_threads": 1}
    assert not {"main_threads", "worker_threads"} & set(result.loader_kwargs)
    assert result.loader_kwargs["collate_fn"] is torch.utils.data.default_collate
    loader = torch.utils.data.DataLoader(list(range(40)), **result.loader_kwargs)
    assert loader.num_workers == chosen.settings.num_workers and loader.batch_size == BATCH and loader.drop_last
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)  # shuffle=True
    serial = torch.utils.data.DataLoader(list(range(48)), **{**result.loader_kwargs, "num_workers": 0,
                                                              "prefetch_factor": None, "persistent_workers": False})
    assert sorted(int(x) for batch in serial for x in batch) == list(range(48))
    assert not {"main_threads", "worker_threads"} & set(result.change)
    # The CLI's summary keeps every setting; the paste line says the threads as calls.
    assert result.summary.pick.loader_kwargs["main_threads"] == 2
    assert "torch.set_num_threads(2) in the training process" in result.summary.pick.dataloader


def test_thread_settings_and_loader_keywords_split_a_trials_settings():
    settings = {**LOADER, "main_threads": 4, "worker_threads": None}
    assert thread_settings(settings) == {"main_threads": 4}
    assert set(loader_keywords(settings)) == set(LOADER) - {"main_threads", "worker_threads"}


# --- 3. the model's error: one figure, one wording ------------------------------------------------


def predicted_before(records: list[Record]) -> list[Record]:
    """The rows after the first two as the sweep writes them: each with what a model fitted before
    it ran predicted (4% high, 10% low, 2% high, exact, 6% high: a median of 4%)."""
    off = [1.0, 1.0, 1.04, 0.9, 1.02, 1.0, 1.06]
    return [r.with_columns(predicted_throughput=round(r.throughput * k, 2) if i >= 2 else None)
            for i, (r, k) in enumerate(zip(records, off))]


def test_predict_on_a_sweeps_file_reports_the_sweeps_model_error(tmp_path):
    from loadtune.asked.trials import Trial
    from loadtune.sweep_process import events
    from loadtune.sweep_process.modelling import Modelling
    from loadtune.sweep_process.trial_run import TrialRun

    records = as_swept(predicted_before(first_round(TRUTH)))
    path = write_sweep(tmp_path / "sweep.csv", records)
    # The sweep's own figure: what its model report (the summary, --json model.error) says of its trials.
    spec = config_from_data(tiny_config(), tmp_path / "c.yaml")
    runs = {r.trial: TrialRun(Trial(r.trial, r.settings.changed or "", None, ()), 1, record=r) for r in records}
    report = Modelling(runs, spec.config, events.ignore).report()
    assert report is not None and report.error is not None and report.checked == 5
    f = forecast_file(path)
    assert f.to_json()["model"]["error"] == report.to_json()["error"] == pytest.approx(0.04, abs=1e-3)
    assert f.to_json()["model"]["error_trials"] == report.to_json()["error_trials"] == 5
    # Worded the same way wherever it is said.
    words = str(ModelError(report.error, report.checked))
    assert words in forecast_lines(f)
    assert words == str(ModelError(*prediction_error(records)))
    assert words == "Model: its error on this file is 4% (median |predicted/measured - 1| over 5 trials predicted " \
                    "before they ran)."


def test_the_models_error_words_say_when_it_does_not_fit():
    assert "does not fit this pipeline well" in str(ModelError(MODEL_FIT_ERROR + 0.01, 3))
    assert "does not fit" not in str(ModelError(MODEL_FIT_ERROR, 3))
    assert str(ModelError(None, 0)) == "Model: no trial was predicted before it ran, so its error on this file is " \
                                       "not known."
    # The fall-back is another figure (the first round, each trial predicted from the others), named so.
    assert str(ModelFellBack(held_out=0.19)) == (
        "after the first round, the pipeline model fitted to the others predicted each first-round trial 19% off "
        "(median), above the 15% the model strategy allows: the sweep measured as ofat does")
    assert "its error on this file" not in str(ModelFellBack()) and "more than 15% off" in str(ModelFellBack())
    report = ModelReport(TRUTH, 0.123456, 4)
    assert {**ModelError(report.error, report.checked).to_json()} == \
        {k: report.to_json()[k] for k in ("error", "error_trials")}


# --- 4. predict recommends within the tolerance of its table's best --------------------------------


CPU_STEP = varied(
    TRUTH, fetch_cpu_ms_per_sample=0.72, fetch_wait_ms_per_sample=0.0, main_fetch_ms_per_sample=0.72,
    step_ms_per_sample=0.31, step_cpu_ms_per_sample=0.31, handover_ms_per_sample=0.0, worker_put_ms=0.0,
    worker_start_ms=0.0, worker_start_per_worker_ms=0.0, persistent_resume_ms=0.0, fetch_cv=0.0)


@pytest.mark.parametrize("source", ["sweep", "run of a CPU step"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_predict_recommends_the_cheapest_within_the_tolerance_of_its_tables_best(source, ranks):
    records = as_swept(first_round(TRUTH)) if source == "sweep" else [watched(made_up(CPU_STEP, 0))]
    f = forecast(records, Target(ranks=ranks))
    best = max(r.predicted_throughput for r in f.rows)
    pick = f.recommended
    assert pick is not None and pick.predicted_throughput >= (1 - f.choice.tolerance) * best
    tied = [r for r in f.rows if r.predicted_throughput >= (1 - f.choice.tolerance) * best]
    assert cost_of(pick.settings) == min(cost_of(r.settings) for r in tied)
    table_order = [r.predicted_throughput for r in f.rows]
    assert table_order == sorted(table_order, reverse=True)


def test_a_recommendation_that_waits_more_than_one_as_fast_says_why():
    """Two ranks of a CPU step on two cores: the cores set the pace whatever the workers, so a
    config without many workers is as fast while its loop waits for data far more of the time."""
    f = forecast([watched(made_up(CPU_STEP, 0))], Target(ranks=2))
    pick = f.recommended
    best = f.rows[0].predicted_throughput
    lean = min((r for r in f.rows if r.predicted_throughput >= (1 - f.choice.tolerance) * best),
               key=lambda r: r.predicted_wait_ratio)
    assert pick.predicted_wait_ratio - lean.predicted_wait_ratio > 0.1
    said = [line for line in forecast_lines(f) if line.startswith("Wait ratio:")]
    assert said == [str(CheaperWaitsMore(pick.config, pick.predicted_wait_ratio, lean.config, lean.predicted_wait_ratio,
                                         lean.predicted_throughput / pick.predicted_throughput, f.choice.tolerance, 2))]
    assert "waiting for the slowest rank" in said[0] and "Samples/s is what training feels" in said[0]
    # On the sweep's own pipeline the pick waits about as little as the fastest: nothing to say.
    assert not [line for line in forecast_lines(forecast(as_swept(first_round(TRUTH)))) if line.startswith("Wait")]


# --- 5. compare: a winner never measured elsewhere ----------------------------------------------


def without(tmp_path: Path, name: str, trial: str, status: str | None = None) -> Path:
    """base.csv with `trial`'s row dropped (or set to `status`, its figures emptied)."""
    frame = pd.read_csv(FIXTURES / "base.csv", dtype=str, keep_default_na=False)
    if status is None:
        frame = frame[frame["trial"] != trial]
    else:
        row = frame["trial"] == trial
        for column in ("rank", "throughput", "throughput_lo", "throughput_hi", "wait_ratio", "wait_ratio_lo",
                       "wait_ratio_hi", "speedup", "tied_with_best"):
            frame.loc[row, column] = ""
        frame.loc[row, "status"] = status
    frame.to_csv(tmp_path / f"{name}.csv", index=False)
    return tmp_path / f"{name}.csv"


@pytest.mark.parametrize("status", [None, "skipped", "predicted"])
def test_a_file_that_never_measured_the_others_winner_cannot_tell(tmp_path, status):
    """base wins with num_workers=2 (num_workers=4 tied); the other file has no measurement of it."""
    other = without(tmp_path, "other", "num_workers=2", status)
    c = compare(load_results([FIXTURES / "base.csv", other]))
    assert c.winners["other"] == "num_workers=4"
    assert c.changed is False
    assert c.verdict == f"{VERDICT_CANNOT_TELL}: other did not measure num_workers=2"
    assert c.conclusion.unknown == ("other did not measure num_workers=2",)
    assert WINNER_NOT_MEASURED in c.conclusion.flags["num_workers=2"]
    assert WINNER_CHANGED not in c.conclusion.flags.get("num_workers=4", [])
    assert comparison_lines(c)[-1] == c.verdict
    # The other way round: the first file never measured the second's winner.
    back = compare(load_results([other, FIXTURES / "base.csv"]))
    assert back.changed is False and back.verdict == f"{VERDICT_CANNOT_TELL}: other did not measure num_workers=2"
    # --fail-on-flip exits 3 only on a changed conclusion.
    result = CliRunner().invoke(app, ["compare", str(FIXTURES / "base.csv"), str(other), "--fail-on-flip"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"{VERDICT_CANNOT_TELL}: other did not measure num_workers=2" in result.output


def test_a_winner_that_failed_elsewhere_changes_the_conclusion(tmp_path):
    other = without(tmp_path, "crashed", "num_workers=2", "failed")
    c = compare(load_results([FIXTURES / "base.csv", other]))
    assert c.changed is True and c.verdict.startswith("conclusion changed: winner is num_workers=4 in crashed")
    assert c.conclusion.unknown == ()
    result = CliRunner().invoke(app, ["compare", str(FIXTURES / "base.csv"), str(other), "--fail-on-flip"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 3


def test_a_changed_conclusion_still_says_what_cannot_be_told(tmp_path):
    c = compare(load_results([FIXTURES / "base.csv", FIXTURES / "hurts.csv", without(tmp_path, "gone",
                                                                                      "num_workers=2")]))
    assert c.changed is True and c.verdict.startswith("conclusion changed: ")
    assert c.verdict.endswith(f"; {VERDICT_CANNOT_TELL}: gone did not measure num_workers=2")
    same = compare(load_results([FIXTURES / "base.csv", FIXTURES / "same.csv"]))
    assert same.verdict == VERDICT_HOLDS and same.conclusion.unknown == ()


# --- 6. one name for a config ---------------------------------------------------------------------


def test_config_name_is_the_sweeps_trial_name():
    """Each trial a sweep plans one change at a time, and each combination of its values from a
    baseline without workers, is named as config_name names its settings against the baseline
    (from a baseline with workers, plan.trial_for names a combination without them with
    `prefetch_factor=null`, which the one-at-a-time trial of the same config does not)."""
    from loadtune.asked.plan import grid_plan, ofat_plan

    for sweep in ({"num_workers": [0, 2, 4], "prefetch_factor": [1, 4], "persistent_workers": [True]},
                  {"persistent_workers": [True], "num_workers": [0, 3], "shuffle": [False]}):
        for loader in ({"batch_size": 8, "num_workers": 1, "prefetch_factor": 2},
                       {"batch_size": 8, "num_workers": 0, "shuffle": True}):
            spec = config_from_data(tiny_config(loader=loader, sweep=sweep), Path("c.yaml"))
            base = spec.config.loader.model_dump()
            trials = [*ofat_plan(spec.config, False), *(grid_plan(spec.config, False) if not base["num_workers"]
                                                         else ())]
            for trial in (t for t in trials if not t.skipped):  # DataLoader refuses a skipped one
                assert config_name(trial.loader_kwargs, base, order=list(sweep)) == trial.name, (loader, trial)


def test_predict_names_configs_as_the_sweep_does(tmp_path):
    records = as_swept(first_round(TRUTH))
    f = forecast_file(write_sweep(tmp_path / "sweep.csv", records))
    by_settings = {settings_key(r.settings): r.config for r in f.rows}
    for r in records:
        assert by_settings[settings_key(settings_of(r))] == r.trial
    assert by_settings[settings_key(settings_of(records[0]))] != ""
    assert "baseline" in by_settings.values()
    for row in f.rows:  # every other config, as the sweep would name it were it a trial
        assert row.config == config_name({**LOADER, **row.settings}, LOADER)
    assert f.to_json()["source"]["pick"] == next(r.trial for r in records if r.assessment.tied_with_best)


def test_compare_and_the_run_readers_name_configs_as_the_sweep_does(tmp_path):
    records = as_swept(first_round(TRUTH))
    one_core = dataclasses.replace(TRUTH, cores=1.0)
    there = as_swept([r.with_columns(cpu_count=1) for r in
                      [made_up(one_core, w, p, pw) for w, p, pw in [(1, 2, False), (0, None, False), (2, 2, True),
                                                                       (4, 1, False)]]])
    check = transfer_check(records, there)
    assert check is not None
    names = {r.trial for r in there}
    assert check.measured_best in names
    assert check.predicted_pick == config_name({**LOADER, **next(
        r.settings for r in forecast(records, Target(cores=1)).rows if r.config == check.predicted_pick)}, LOADER)
    # A run of the sweep's baseline config is named as the sweep names it.
    run = watched(made_up(TRUTH, 1, 2, False))
    from loadtune.comparison.checks import run_checks

    (said,) = run_checks(records, [run])
    assert said.config == BASELINE
    assert run_line(run).startswith("Watched train (num_workers=1, prefetch_factor=2, persistent_workers=false, "
                                    "pin_memory=false, batch_size=16, ")


def test_compare_aligns_a_combined_trial_by_its_configs_name(tmp_path):
    """`combined` is another config in each file: compare names it as the sweep names that config."""
    frame = pd.read_csv(FIXTURES / "base.csv", dtype=str, keep_default_na=False)
    first = frame.copy()
    first.loc[first["trial"] == "num_workers=4", ["trial", "changed", "value"]] = ["combined", "combined",
                                                                                  "num_workers=4"]
    first.to_csv(tmp_path / "a.csv", index=False)
    frame.to_csv(tmp_path / "b.csv", index=False)
    c = compare(load_results([tmp_path / "a.csv", tmp_path / "b.csv"]))
    assert "combined" not in set(c.table["trial"]) and "num_workers=4" in set(c.table["trial"])
    assert c.table.loc[c.table["trial"] == "num_workers=4", "status@a"].item() == "ok"
    assert c.verdict == VERDICT_HOLDS


def test_the_sweep_file_keeps_each_trials_loader_settings_beside_it(tmp_path):
    from loadtune.record.watched import loader_file, read_loader_info

    records = as_swept(first_round(TRUTH))
    path = write_sweep(tmp_path / "s.csv", records)
    infos = read_loader_info(path)
    assert set(infos) == {r.trial for r in records}
    assert infos[BASELINE].loader_kwargs == LOADER
    assert json.loads(loader_file(path).read_text())[BASELINE]["loader_kwargs"]["shuffle"] is True
    assert not any(name.startswith(".") for name in (p.name for p in tmp_path.iterdir()))


def test_a_sweeps_own_file_lets_predict_paste_the_loaders_other_settings(tmp_path, write_config):
    """A whole sweep (fake trials: the files are what is tested) writes NAME.loader.json beside its
    CSV; `loadtune predict` on it pastes shuffle=True as the sweep's own answer does."""
    from loadtune.record.watched import loader_file
    from tests.test_resume import SameMeasurements, sweep

    config = tiny_config(sweep={"num_workers": [0, 2]}, loader={"batch_size": 8, "shuffle": True},
                         measure={"warmup_batches": 1, "batches": 20, "timeout_s": 10, "repeats": 1})
    out = tmp_path / "s.csv"
    sweep(write_config(config), out, SameMeasurements())
    assert read_loader_info_of(out)[BASELINE]["shuffle"] is True and loader_file(out).exists()
    result = CliRunner().invoke(app, ["predict", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    paste = next(line for line in result.output.splitlines() if line.startswith("Paste"))
    assert "shuffle=True" in paste


def read_loader_info_of(path: Path) -> dict:
    from loadtune.record.watched import read_loader_info

    return {name: info.loader_kwargs for name, info in read_loader_info(path).items()}
