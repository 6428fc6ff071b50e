"""--resume is the normal path with some trials done: the raw samples kept beside the CSV are
taken up again, so an interrupted sweep ends with the rows, figures and decision of one that was
not interrupted, given the same measurements; a kept trial can be raced further; a CSV without
its samples file still resumes, its rows kept as recorded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from loadtune.kinds import Status
from loadtune.options import SweepOptions
from loadtune.results.record import read_records
from loadtune.results.samples import samples_file
from loadtune.results.sweep import SweepResult
from loadtune.sweep_process.launch import Outcome
from loadtune.sweep_process.pipeline import run_sweep
from loadtune.trials import FEED_MEMORY
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
        kwargs = job.trial.loader_kwargs
        workers = kwargs.get("num_workers", 0)
        truth = 1000.0 if job.trial.feed == FEED_MEMORY else \
            100.0 + 150.0 * min(workers, 2) + 4.0 * workers + 3.0 * (kwargs.get("prefetch_factor") or 0)
        return Outcome(Status.OK, "", fake_measurement(truth * (1.04 if k % 2 else 0.96), k), 0.5)


CONFIG = tiny_config(sweep={"num_workers": [0, 2, 3, 4], "prefetch_factor": [4]},
                     measure={"warmup_batches": 1, "batches": 20, "timeout_s": 10, "min_repeats": 2, "repeats": 4})


def sweep(config_path, out, execute, **options):
    """A whole sweep of fake trials; preflight and the machine stand in (fake_setup)."""
    asked = SweepOptions.of(config_path, out=out, **options)
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
    first = SameMeasurements()
    result = sweep(config, tmp_path / "out.csv", first, repeats=2)
    before = {r.trial: r for r in result.records}
    assert {r.measuring.repeats for r in before.values() if r.ran} == {1, 2}, "the ideal once, the rest at repeats=2"
    more = SameMeasurements()
    more.calls = dict(first.calls)  # the same machine: the next repeat is the third
    # More repeats and a smaller tolerance race the kept contenders on.
    resumed = sweep(config, tmp_path / "out.csv", more, resume=True, repeats=4, tolerance=0.002)
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
    from loadtune.results.record import load_records
    from loadtune.results.report import repeat_lines

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
    from loadtune.errors import OutputExists

    path, out = whole.copy_to(tmp_path)
    first = whole.result
    before = out.read_bytes()
    with pytest.raises(OutputExists, match=r"whole\.csv already exists: add --resume .* or --overwrite"):
        sweep(path, out, SameMeasurements())
    assert out.read_bytes() == before
    assert rows(sweep(path, out, SameMeasurements(), resume=True)) == rows(first)
    assert rows(sweep(path, out, SameMeasurements(), overwrite=True)) == rows(first)
