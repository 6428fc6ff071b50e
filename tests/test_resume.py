"""--resume is the normal path with some trials done: the raw samples kept beside the CSV are
taken up again, so an interrupted sweep ends with the rows, figures and decision of one that was
not interrupted, given the same measurements; a kept trial can be raced further; a CSV without
its samples file still resumes, its rows kept as recorded."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from loadtune.asked.options import SweepOptions
from loadtune.asked.trials import BASELINE, FEED_MEMORY, Trial
from loadtune.core.kinds import EndedBy, Status, Strategy
from loadtune.present.answer import settle
from loadtune.present.sweep import SweepResult
from loadtune.record.record import read_records
from loadtune.record.samples import samples_file
from loadtune.sweep_process.launch import Outcome
from loadtune.sweep_process.pipeline import run_sweep
from tests.conftest import fake_setup, tiny_config
from tests.test_decide import fake_measurement


class SameMeasurements:
    """The k-th repeat of a trial measures the same whichever sweep (or process) runs it: 4% fast
    and 4% slow in turn. With `stop_after`, the sweep is interrupted (as by Ctrl-C) at that run."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.calls: dict[str, int] = {}
        self.stop_after = stop_after

    def __call__(self, job, timeout_s):
        if self.stop_after is not None and sum(self.calls.values()) >= self.stop_after:
            raise KeyboardInterrupt
        name = job.trial.name
        k = self.calls[name] = self.calls.get(name, 0) + 1
        truth = 1000.0 if job.trial.feed == FEED_MEMORY else self.truth(job.trial)
        return Outcome(Status.OK, "", fake_measurement(truth * (1.04 if k % 2 else 0.96), k, job.measure.batches), 0.5)

    def truth(self, trial: Trial) -> float:
        """The trial's samples/s on this machine, each process's swing aside."""
        kwargs = trial.loader_kwargs
        workers = kwargs.get("num_workers", 0)
        return 100.0 + 150.0 * min(workers, 2) + 4.0 * workers + 3.0 * (kwargs.get("prefetch_factor") or 0)


class OneCloseRival(SameMeasurements):
    """Two workers run 8% faster than the baseline (one worker), every other config far behind:
    at two repeats each, this machine's noise leaves the baseline not shown behind, the rival
    not shown ahead."""

    def truth(self, trial: Trial) -> float:
        workers = trial.loader_kwargs.get("num_workers", 0)
        if trial.name == BASELINE:
            return 400.0
        return 432.0 if trial.name == "num_workers=2" else 300.0 if workers else 100.0


CONFIG = tiny_config(sweep={"num_workers": [0, 2, 3, 4], "prefetch_factor": [4]},
                     measure={"warmup_batches": 1, "batches": 20, "timeout_s": 10, "min_repeats": 2, "repeats": 4})


def sweep(config_path, out, execute, overrides=None, **options):
    """A whole sweep of fake trials; preflight and the machine stand in (fake_setup)."""
    asked = SweepOptions.of(config_path, overrides, out=out, **options)
    spec = asked.spec()
    setup = fake_setup(spec, {"config_sha": spec.sha, "scale": spec.scale, "ranks": 1, "started_at": "then"},
                       dataset_len=400)
    return run_sweep(asked, spec=spec, setup=setup, execute=execute, shm_free_mb=None)


def rows(result):
    return [r.with_columns(format_version=None) for r in result.records]


class Whole(NamedTuple):
    """The sweep of CONFIG that no one interrupted: its folder (the config, the CSV and the files
    beside it), result and repeats measured by trial."""

    folder: Path
    result: SweepResult
    calls: dict[str, int]

    def copy_to(self, folder: Path) -> tuple[Path, Path]:
        """Its files in `folder` (a test may change them): the config's path and the CSV's."""
        shutil.copytree(self.folder, folder, dirs_exist_ok=True)
        return folder / "config.yaml", folder / "whole.csv"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Whole:
    folder = tmp_path_factory.mktemp("whole")
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    measurements = SameMeasurements()
    result = sweep(config, folder / "whole.csv", measurements)
    return Whole(folder, result, dict(measurements.calls))


@pytest.mark.parametrize("stop_after", [3, 8, 12, 14])
def test_an_interrupted_sweep_resumed_ends_as_one_that_was_not_interrupted(whole, tmp_path, stop_after):
    config, _ = whole.copy_to(tmp_path)
    expected = whole.result
    assert sum(whole.calls.values()) > stop_after, "the interruption falls inside the sweep"
    cut = SameMeasurements(stop_after)
    with pytest.raises(KeyboardInterrupt):
        sweep(config, tmp_path / "cut.csv", cut)
    assert samples_file(tmp_path / "cut.csv").exists()
    cut.stop_after = None
    resumed = sweep(config, tmp_path / "cut.csv", cut, resume=True)
    assert cut.calls == whole.calls, "no repeat measured twice, none missing"
    assert rows(resumed) == rows(expected)
    assert resumed.decision == expected.decision
    assert read_records(tmp_path / "cut.csv") == read_records(tmp_path / "whole.csv")


def test_a_kept_trial_is_raced_further_with_more_repeats(write_config, tmp_path):
    config = write_config(CONFIG)
    first = OneCloseRival()
    result = sweep(config, tmp_path / "out.csv", first, repeats=2)
    before = {r.trial: r for r in result.records}
    assert {r.measuring.repeats for r in before.values() if r.ran} == {1, 2}, "the ideal once, the rest at repeats=2"
    assert not result.decision.decided, "two repeats each leave the pick and its rival apart by less than shown"
    more = OneCloseRival()
    more.calls = dict(first.calls)  # the same machine: the next repeat is the third
    # More repeats race the kept contenders on.
    resumed = sweep(config, tmp_path / "out.csv", more, resume=True, repeats=4)
    assert resumed.decision.resolving.repeats == 4
    after = {r.trial: r for r in resumed.records}
    raced = [name for name, r in after.items()
             if r.ran and before[name].ran and r.measuring.repeats > before[name].measuring.repeats]
    assert raced, "racing gave kept contenders more repeats"
    for name in raced:
        assert more.calls[name] == after[name].measuring.repeats, "each repeat measured once, over both sweeps"


def test_a_csv_without_its_samples_file_resumes_with_rows_as_recorded(whole, tmp_path):
    config, out = whole.copy_to(tmp_path)
    before = {r.trial: r for r in whole.result.records}
    samples_file(out).unlink()  # as a file written before the samples were kept
    again = SameMeasurements()
    after = {r.trial: r for r in sweep(config, out, again, resume=True).records}
    assert again.calls == {}, "every trial kept: nothing measured again"
    for name, row in before.items():
        if row.ran:
            assert (after[name].throughput, after[name].measuring.repeats) == (row.throughput, row.measuring.repeats)


def test_report_verbose_shows_each_repeat_from_the_raw_samples(whole, tmp_path):
    from loadtune.present.report import repeat_lines
    from loadtune.record.record import load_records

    _, out = whole.copy_to(tmp_path)
    rows = load_records(out)
    lines = repeat_lines(out, rows)
    assert lines[0] == "Each repeat's samples/s (whole.samples.json.gz):"
    baseline = next(r for r in whole.result.records if r.trial == "baseline")
    shown = next(line for line in lines if line.startswith("  baseline: "))
    figures = [float(x) for x in shown.split(": ")[1].split(", ")]
    assert len(figures) == baseline.measuring.repeats and min(figures) < baseline.throughput < max(figures)
    samples_file(out).unlink()
    assert repeat_lines(out, rows) == [], "a file from before the samples were kept"


def test_an_existing_output_is_refused_unless_resumed_or_overwritten(whole, tmp_path):
    """The pipeline itself (so the CLI and loadtune.sweep() alike) never replaces a result unasked."""
    from loadtune.core.errors import OutputExists

    path, out = whole.copy_to(tmp_path)
    first = whole.result
    before = out.read_bytes()
    with pytest.raises(OutputExists, match=r"whole\.csv already exists: add --resume .* or --overwrite"):
        sweep(path, out, SameMeasurements())
    assert out.read_bytes() == before
    assert rows(sweep(path, out, SameMeasurements(), resume=True)) == rows(first)
    assert rows(sweep(path, out, SameMeasurements(), overwrite=True)) == rows(first)


def measured_since(measurements: SameMeasurements, before: dict[str, int]) -> dict[str, int]:
    """The repeats each trial was measured since `before` (the calls then)."""
    return {name: n - before.get(name, 0) for name, n in measurements.calls.items() if n > before.get(name, 0)}


@pytest.mark.parametrize("strategy", list(Strategy))
@pytest.mark.parametrize("repeats", [1, 2])
def test_the_rerun_the_answer_suggests_measures_what_is_undecided(write_config, tmp_path, strategy, repeats):
    """Issue #45: the rerun an undecided answer suggests, run exactly as it says, measures the
    pick and the contender it could not tell from it again (with the repeats of both sweeps
    measured once each), and its answer is decided or says what is still open."""
    config, out = write_config({**CONFIG, "measure": {**CONFIG["measure"], "min_repeats": 1}}), tmp_path / "out.csv"
    machine = OneCloseRival()
    first = sweep(config, out, machine, repeats=repeats, strategy=strategy).summary.decision
    assert first is not None and not first.decided and first.ended_by == EndedBy.REPEATS
    rerun = settle(first)
    asked = re.fullmatch(r"rerun with --repeats (\d+) --resume", rerun)
    assert asked, rerun
    before = dict(machine.calls)
    result = sweep(config, out, machine, resume=True, repeats=int(asked.group(1)), strategy=strategy)
    measured = measured_since(machine, before)
    assert first.pick in measured and first.undecided[0] in measured, (first, measured)
    rows = {r.trial: r for r in result.records if r.ran}
    assert all(machine.calls[name] == row.measuring.repeats for name, row in rows.items()), \
        "every row holds its repeats of both sweeps, each measured once"
    after = result.summary.decision
    assert after is not None and (after.decided or (after.undecided and settle(after) != rerun))


def test_a_kept_trial_the_strategy_does_not_ask_for_again_is_raced_on_from_its_raw_samples(
        write_config, tmp_path, monkeypatch):
    """A resumed strategy may take another path once the kept trials hold more repeats: a kept
    contender it does not ask for again is still raced further, from its raw samples, its
    repeats of both sweeps in its row."""
    from loadtune.asked.plan import baseline_trial
    from loadtune.sweep_process import pipeline

    config, out = write_config(CONFIG), tmp_path / "out.csv"
    machine = OneCloseRival()
    # ofat: only the model strategy lets the pipeline model tie contenders, and the stand-in below fits none.
    first = sweep(config, out, machine, repeats=2, strategy="ofat").decision
    assert first.pick == BASELINE and first.undecided == ("num_workers=2",)
    kept = {r.trial: r for r in read_records(out) if r.ran}
    monkeypatch.setattr(pipeline, "run_strategy",
                        lambda name, search: search.measure([baseline_trial(search.config)], 1))
    before = dict(machine.calls)
    result = sweep(config, out, machine, resume=True, repeats=5, strategy="ofat")
    assert {BASELINE, "num_workers=2"} <= set(measured_since(machine, before))
    rows = {r.trial: r for r in result.records}
    assert set(rows) >= set(kept), "every kept trial keeps its row"
    for name, row in kept.items():
        assert (rows[name].measuring.repeats, rows[name].run.round) == (machine.calls[name], row.run.round)
    assert result.decision.decided or result.decision.undecided


def test_a_kept_trial_is_known_in_full_again_by_its_name(write_config):
    """What racing a kept trial further needs: its settings in full, from the plans or its row."""
    import dataclasses

    from loadtune.asked.config import load_config
    from loadtune.asked.plan import on_top, trial_for
    from loadtune.asked.trials import COMBINED
    from loadtune.measure.records import trial_record
    from loadtune.sweep_process.trial_run import known_in_full

    config = load_config(write_config(CONFIG)).config
    two = trial_for(config, {"num_workers": 2}, False)
    assert known_in_full(config, False, two.name, None) == two
    # A value only a verdict's advice asked for: from the settings its row records.
    advised = dataclasses.replace(on_top(config, two, {"prefetch_factor": 8}, False), asked_by=two.name)
    assert known_in_full(config, False, advised.name, trial_record(advised, {}, round_no=2)) == advised
    both = trial_for(config, {"num_workers": 3, "prefetch_factor": 4}, False)
    combined = Trial(COMBINED, COMBINED, both.name, both.settings)
    assert known_in_full(config, False, COMBINED, trial_record(combined, {}, round_no=3)) == combined
    # A name this config does not give those settings: as recorded.
    assert known_in_full(config, False, "num_workers=7", trial_record(two, {}, round_no=1)) is None
    assert known_in_full(config, False, "num_workers=7", None) is None


class Swinging(SameMeasurements):
    """Processes 15% fast and 15% slow in turn: every contender's interval is wide."""

    def __call__(self, job, timeout_s):
        name = job.trial.name
        k = self.calls[name] = self.calls.get(name, 0) + 1
        truth = 1000.0 if job.trial.feed == FEED_MEMORY else self.truth(job.trial)
        return Outcome(Status.OK, "", fake_measurement(truth * (1.15 if k % 2 else 0.85), k, job.measure.batches), 0.5)


def test_the_rerun_an_unstable_result_suggests_measures_it_again(write_config, tmp_path):
    """Issue #45: an unstable result's remedy, run exactly as it says, takes each unstable
    contender to more processes, even where the pick was decided (more --repeats alone would
    measure nothing then)."""
    config, out = write_config(CONFIG), tmp_path / "out.csv"
    machine = Swinging()
    first = sweep(config, out, machine)
    notes = [str(n) for n in (*first.summary.found.warnings, *first.summary.found.notes) if "unstable" in str(n)]
    assert notes, "the swing makes some contender's result unstable"
    asked = re.search(r"rerun with --resume --repeats (\d+) --set (measure\.min_repeats=\d+) ", notes[0])
    assert asked, notes[0]
    unstable = {r.trial: r.measuring.repeats for r in first.records if r.trial and r.trial in notes[0]}
    assert unstable and all(int(asked.group(1)) > n for n in unstable.values())
    before = dict(machine.calls)
    sweep(config, out, machine, [asked.group(2)], resume=True, repeats=int(asked.group(1)))
    measured = measured_since(machine, before)
    assert all(name in measured for name in unstable), (unstable, measured)
