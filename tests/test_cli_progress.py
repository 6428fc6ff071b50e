"""What `loadtune sweep` shows while it measures and how long it took: the progress lines in a
pipe, the bar with its estimate on a terminal, the wall time on the last line. On a fake clock
and fed events: exact numbers, nothing timed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadtune import progress
from loadtune.asked.trials import Trial
from loadtune.cli import app
from loadtune.core.duration import duration_text
from loadtune.present.view import Prose, Shown, Warned, started_lines, trial_line
from loadtune.progress import ESTIMATING, EtaColumn, RunTally, SweepView, eta_text
from loadtune.sweep_process import events
from loadtune.sweep_process.launch import Outcome
from tests.conftest import tiny_config
from tests.test_one_voice import items, sweep_result

WIDE = 1000  # nothing wraps
TRIAL_A = Trial("num_workers=2", "num_workers", 2, (("num_workers", 2),))
TRIAL_B = Trial("baseline", "", None, ())


class FakeClock:
    """Seconds that move only when the test moves them."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def finished(trial: Trial, wall_s: float) -> events.RunFinished:
    return events.RunFinished(trial, Outcome("ok", "", None, wall_s))


def started(out: Path) -> events.SweepStarted:
    return events.SweepStarted("model", "cpu", 1000, out, resumed=0)


@pytest.mark.parametrize(("seconds", "said"), [
    (0.0, "0 s"), (0.4, "0 s"), (31.2, "31 s"), (99.4, "99 s"), (99.6, "1 min 40 s"), (125.0, "2 min 5 s"),
    (3599.0, "59 min 59 s"), (3900.0, "1 h 5 min"), (-2.0, "0 s"),
])
def test_durations_are_whole_seconds_under_100_then_minutes(seconds, said):
    assert duration_text(seconds) == said


def test_the_estimate_is_the_mean_repeat_times_the_repeats_left():
    tally = RunTally().after(events.RunsPlanned(4), 0.0)
    assert tally.left_s(0.0) is None, "no repeat finished: nothing to go by"
    tally = tally.after(events.RunStarted(TRIAL_A, 1, 3), 0.0).after(finished(TRIAL_A, 50.0), 50.0)
    assert tally.left_s(50.0) == 150.0
    tally = tally.after(events.RunStarted(TRIAL_B, 1, 3), 52.0)
    assert tally.left_s(72.0) == 130.0, "the running repeat has had 20 s of its 50"
    assert tally.left_s(500.0) == 100.0, "a repeat running long takes no more than its share off"
    tally = tally.after(finished(TRIAL_B, 70.0), 122.0)
    assert tally.left_s(122.0) == 120.0, "two left at a mean of 60 s"
    assert tally.after(events.RunsPlanned(7), 122.0).left_s(122.0) == 300.0, "racing asked for three more"
    assert tally.after(events.RunsPlanned(2), 122.0).left_s(122.0) == 0.0


def test_on_a_terminal_the_bar_shows_about_how_long_is_left(tmp_path):
    clock = FakeClock()
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    shown: list[Shown] = []
    view = SweepView(console, lambda _, pieces: shown.extend(pieces), True, clock)
    eta = next(column for column in view.progress.columns if isinstance(column, EtaColumn))
    task = view.progress.tasks[0]

    view(started(tmp_path / "s.csv"))
    assert view.progress.live.is_started
    view(events.RunsPlanned(4))
    view(events.RunStarted(TRIAL_A, 1, 3))
    assert eta.render(task).plain == ESTIMATING
    clock.now_s = 50.0
    view(finished(TRIAL_A, 50.0))
    assert eta.render(task).plain == "about 2 min 30 s left"
    clock.now_s = 52.0
    view(events.RunStarted(TRIAL_B, 1, 3))
    clock.now_s = 72.0
    assert view.left_s() == 130.0 and eta.render(task).plain == "about 2 min 10 s left"
    assert task.description == "[bold]baseline[/] (repeat 1/3)" and task.total == 4 and task.completed == 1
    assert task.elapsed == 72.0, "the bar's elapsed time is read from the same clock"
    clock.now_s = 122.0
    view(finished(TRIAL_B, 70.0))
    assert eta.render(task).plain == "about 2 min 0 s left"
    view(events.SweepFinished(()))
    assert not view.progress.live.is_started, "the bar goes when the sweep ends"
    assert shown == [Prose(tuple(started_lines("model", "cpu", 1000, tmp_path / "s.csv", 0, 0)))]


def test_in_a_pipe_only_the_progress_lines_are_shown(tmp_path):
    record = sweep_result(tmp_path / "s.csv").records[0]
    shown: list[Shown] = []
    view = SweepView(Console(file=io.StringIO()), lambda _, pieces: shown.extend(pieces), False, FakeClock())
    for event in (started(tmp_path / "s.csv"), events.RunsPlanned(1), events.RunStarted(TRIAL_B, 1, 1),
                  finished(TRIAL_B, 5.0), events.TrialFinished(TRIAL_B, record), events.Notice("busy"),
                  events.SweepFinished((record,))):
        view(event)
        assert not view.progress.live.is_started
    assert shown == [Prose(tuple(started_lines("model", "cpu", 1000, tmp_path / "s.csv", 0, 0))),
                     Prose((trial_line(record, False),)), Warned("busy")]
    assert view.left_s() == 0.0 and eta_text(view.left_s()) == "about 0 s left"


@pytest.fixture
def timed_sweep(monkeypatch, tmp_path):
    """`loadtune sweep` through the CLI on a fake clock, its measuring replaced by the events of
    two repeats that take 125 s of that clock in all."""
    from loadtune.sweep_process import pipeline

    clock = FakeClock(1000.0)
    monkeypatch.setattr(progress, "CLOCK", clock)

    def run_sweep(options, *, spec, on_event, **_):
        out = options.out_path(spec)
        result = sweep_result(out)
        on_event(started(out))
        on_event(events.RunsPlanned(2))
        for trial, wall_s in ((TRIAL_B, 60.0), (TRIAL_A, 64.0)):
            on_event(events.RunStarted(trial, 1, 1))
            clock.now_s += wall_s
            on_event(finished(trial, wall_s))
        on_event(events.TrialFinished(TRIAL_A, result.records[0]))
        clock.now_s += 1.0
        on_event(events.SweepFinished(result.records))
        return result

    monkeypatch.setattr(pipeline, "run_sweep", run_sweep)
    config = tmp_path / "tiny.yaml"
    config.write_text(json.dumps(tiny_config()))
    return config


def test_a_piped_sweep_prints_its_progress_lines_and_ends_with_its_wall_time(tmp_path, timed_sweep):
    out = tmp_path / "s.csv"
    done = CliRunner().invoke(app, ["sweep", str(timed_sweep), "--out", str(out)], env={"COLUMNS": str(WIDE)})
    assert done.exit_code == 0, done.output
    progress_lines = items(done.stderr)
    assert progress_lines[0] == f"Sweeping (model) on cpu, dataset length 1000; rows go to {out}"
    assert progress_lines[1] == "  num_workers=2: 325.2 samples/s, wait ratio 0.452 (3 repeats)"
    last = items(done.stdout)[-1]
    assert last.startswith(f"Files: {out}; --verbose for details")
    assert last.endswith("; in 2 min 5 s")


def test_json_holds_the_wall_time_and_the_files_line_says_it(tmp_path, timed_sweep):
    out = tmp_path / "s.csv"
    done = CliRunner().invoke(app, ["sweep", str(timed_sweep), "--out", str(out), "--json", "--verbose"],
                              env={"COLUMNS": str(WIDE)})
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["wall_s"] == 125.0
    assert items(done.stderr)[-1] == f"Files: {out}; in 2 min 5 s"
