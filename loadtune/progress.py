"""What `loadtune sweep` shows while it measures: its progress lines (where it sweeps, each trial
as it finishes, the notices), and for a person watching on a terminal a bar over the trial
processes with the trial running now, the time so far and about how long the rest takes."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from rich import progress as bar
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from loadtune.core.duration import Clock, duration_text
from loadtune.present.view import Prose, Shown, Warned, started_lines, trial_line
from loadtune.sweep_process import events

# The clock a sweep's wall time and the bar's estimate are read from.
CLOCK: Clock = time.monotonic

# What prints the progress lines on the console (the CLI's).
Show = Callable[[Console, Sequence[Shown]], None]

ESTIMATING = "estimating the time left"


@dataclass(frozen=True)
class RunTally:
    """The sweep's trial processes (one a repeat) so far: how many are planned (every trial the
    strategy has queued, times its repeats), how many finished and their wall time together, and
    when the one running now started (None: none runs)."""

    planned: int = 0
    finished: int = 0
    finished_wall_s: float = 0.0
    running_since_s: float | None = None

    def after(self, event: events.Event, now_s: float) -> RunTally:
        """The tally once `event` happened, at `now_s` on the view's clock."""
        if isinstance(event, events.RunsPlanned):
            return replace(self, planned=event.runs)
        if isinstance(event, events.RunStarted):
            return replace(self, running_since_s=now_s)
        if isinstance(event, events.RunFinished):
            return replace(self, finished=self.finished + 1, finished_wall_s=self.finished_wall_s + event.wall_s,
                           running_since_s=None)
        return self

    def left_s(self, now_s: float) -> float | None:
        """About how long the repeats still planned take: a finished repeat's mean wall time
        times the repeats left, less what the running one has had of its share so far. None
        before a repeat finished. Racing may stop trials early (less left) or ask for more
        repeats (more planned)."""
        if self.finished == 0:
            return None
        mean_s = self.finished_wall_s / self.finished
        left = max(self.planned - self.finished, 0)
        if self.running_since_s is None or left == 0:
            return mean_s * left
        return mean_s * left - min(max(now_s - self.running_since_s, 0.0), mean_s)


def eta_text(left_s: float | None) -> str:
    """The bar's estimate in words: "about 2 min 5 s left"."""
    return ESTIMATING if left_s is None else f"about {duration_text(left_s)} left"


class EtaColumn(bar.ProgressColumn):
    """About how long the sweep's planned repeats still take, read each time the bar is drawn."""

    def __init__(self, left_s: Callable[[], float | None]) -> None:
        super().__init__()
        self.left_s = left_s

    def render(self, task: bar.Task) -> Text:
        return Text(eta_text(self.left_s()), style="progress.remaining")


def shown_for(event: events.Event) -> list[Shown]:
    """The progress lines an event prints: where the sweep runs (and what it keeps of an earlier
    run) as it starts, each trial as it finishes, each notice as a warning."""
    if isinstance(event, events.SweepStarted):
        return [Prose(tuple(started_lines(event.strategy, event.device, event.dataset_len, event.out_path,
                                          event.resumed, event.older)))]
    if isinstance(event, events.TrialFinished):
        return [Prose((trial_line(event.record, event.resumed),))]
    if isinstance(event, events.Notice):
        return [Warned(event.text)]
    return []


class SweepView:
    """Renders a sweep's events on `console`: the progress lines through `show`, and with `live`
    (a terminal) the bar, drawn below them from the sweep's start to its end and gone after."""

    def __init__(self, console: Console, show: Show, live: bool, clock: Clock) -> None:
        self.console, self.show, self.live, self.clock = console, show, live, clock
        self.tally = RunTally()
        self.progress = bar.Progress(bar.SpinnerColumn(), bar.TextColumn("{task.description}"), bar.BarColumn(),
                                     bar.MofNCompleteColumn(), bar.TimeElapsedColumn(), EtaColumn(self.left_s),
                                     console=console, transient=True, get_time=clock)
        self.task = self.progress.add_task("starting", total=None)

    def left_s(self) -> float | None:
        """About how long the repeats planned so far still take (RunTally.left_s), now."""
        return self.tally.left_s(self.clock())

    def __call__(self, event: events.Event) -> None:
        self.tally = self.tally.after(event, self.clock())
        self.show(self.console, shown_for(event))
        if isinstance(event, events.SweepStarted) and self.live:
            self.progress.start()
        elif isinstance(event, events.RunsPlanned):
            self.progress.update(self.task, total=event.runs)
        elif isinstance(event, events.RunStarted):
            self.progress.update(self.task, description=f"[bold]{escape(event.trial.name)}[/] "
                                                        f"(repeat {event.repeat}/{event.repeats})")
        elif isinstance(event, events.RunFinished):
            self.progress.advance(self.task)
        elif isinstance(event, events.SweepFinished):
            self.stop()

    def stop(self) -> None:
        """The bar gone, where it was drawn (the sweep ended, failed or was interrupted)."""
        if self.progress.live.is_started:
            self.progress.stop()
