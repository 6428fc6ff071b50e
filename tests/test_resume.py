"""--resume is the normal path with some trials done: the raw samples kept beside the CSV are
taken up again, so an interrupted sweep ends with the rows, figures and decision of one that was
not interrupted, given the same measurements; a kept trial can be raced further; a CSV without
its samples file still resumes, its rows kept as recorded."""

from __future__ import annotations

import dataclasses

import pytest

from loadtune.kinds import Status
from loadtune.options import SweepOptions
from loadtune.results.record import read_records
from loadtune.results.samples import samples_file
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
    return [dataclasses.replace(r, format_version=None) for r in result.records]


@pytest.mark.parametrize("stop_after", [3, 8, 12, 14])
def test_an_interrupted_sweep_resumed_ends_as_one_that_was_not_interrupted(write_config, tmp_path, stop_after):
    config = write_config(CONFIG)
    whole = SameMeasurements()
    expected = sweep(config, tmp_path / "whole.csv", whole)
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
    assert {r.repeats for r in before.values() if r.ran} == {1, 2}, "the ideal once, the rest at repeats=2"
    more = SameMeasurements()
    more.calls = dict(first.calls)  # the same machine: the next repeat is the third
    # More repeats and a smaller tolerance race the kept contenders on.
    resumed = sweep(config, tmp_path / "out.csv", more, resume=True, repeats=4, tolerance=0.002)
    assert resumed.decision.repeats == 4
    after = {r.trial: r for r in resumed.records}
    raced = [name for name, r in after.items() if r.ran and before[name].ran and r.repeats > before[name].repeats]
    assert raced, "racing gave kept contenders more repeats"
    for name in raced:
        assert more.calls[name] == after[name].repeats, "each repeat measured once, over both sweeps"


def test_a_csv_without_its_samples_file_resumes_with_rows_as_recorded(write_config, tmp_path):
    config = write_config(CONFIG)
    first = SameMeasurements()
    before = {r.trial: r for r in sweep(config, tmp_path / "out.csv", first).records}
    samples_file(tmp_path / "out.csv").unlink()  # as a file written before the samples were kept
    again = SameMeasurements()
    after = {r.trial: r for r in sweep(config, tmp_path / "out.csv", again, resume=True).records}
    assert again.calls == {}, "every trial kept: nothing measured again"
    for name, row in before.items():
        if row.ran:
            assert (after[name].throughput, after[name].repeats) == (row.throughput, row.repeats)


def test_report_verbose_shows_each_repeat_from_the_raw_samples(write_config, tmp_path):
    from loadtune.results.record import load_records
    from loadtune.results.report import repeat_lines

    config = write_config(CONFIG)
    result = sweep(config, tmp_path / "out.csv", SameMeasurements())
    rows = load_records(tmp_path / "out.csv")
    lines = repeat_lines(tmp_path / "out.csv", rows)
    assert lines[0] == "Each repeat's samples/s (out.samples.json.gz):"
    baseline = next(r for r in result.records if r.trial == "baseline")
    shown = next(line for line in lines if line.startswith("  baseline: "))
    figures = [float(x) for x in shown.split(": ")[1].split(", ")]
    assert len(figures) == baseline.repeats and min(figures) < baseline.throughput < max(figures)
    samples_file(tmp_path / "out.csv").unlink()
    assert repeat_lines(tmp_path / "out.csv", rows) == [], "a file from before the samples were kept"


def test_an_existing_output_is_refused_unless_resumed_or_overwritten(tmp_path, write_config):
    """The pipeline itself (so the CLI and loadtune.sweep() alike) never replaces a result unasked."""
    from loadtune.errors import OutputExists

    path, out = write_config(CONFIG), tmp_path / "s.csv"
    first = sweep(path, out, SameMeasurements())
    before = out.read_bytes()
    with pytest.raises(OutputExists, match=r"s\.csv already exists: add --resume .* or --overwrite"):
        sweep(path, out, SameMeasurements())
    assert out.read_bytes() == before
    assert rows(sweep(path, out, SameMeasurements(), resume=True)) == rows(first)
    assert rows(sweep(path, out, SameMeasurements(), overwrite=True)) == rows(first)
