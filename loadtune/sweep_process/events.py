"""What a sweep tells whoever watches it (the CLI's progress view), as typed events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from loadtune.asked.trials import Trial
from loadtune.record.record import Record


@dataclass(frozen=True)
class SweepStarted:
    strategy: str
    device: str
    dataset_len: int | None
    out_path: Path
    resumed: int  # trials kept from an earlier run of the same sweep
    older: int = 0  # rows of that run written by an older results format: measured again


@dataclass(frozen=True)
class RunsPlanned:
    runs: int  # trial processes planned so far, all trials together


@dataclass(frozen=True)
class RunStarted:
    trial: Trial
    repeat: int
    repeats: int  # the most this trial may get


@dataclass(frozen=True)
class RunFinished:
    trial: Trial
    outcome: Any  # launch.Outcome

    @property
    def wall_s(self) -> float:
        """How long the trial process ran, from its start to its result (or to why none came)."""
        return float(self.outcome.wall_s)


@dataclass(frozen=True)
class TrialFinished:
    trial: Trial
    record: Record
    resumed: bool = False  # kept from an earlier run, not measured now


@dataclass(frozen=True)
class Notice:
    """Something the user should know now, with its remedy (a busy machine, say)."""

    text: str


@dataclass(frozen=True)
class SweepFinished:
    records: tuple[Record, ...]


Event = SweepStarted | RunsPlanned | RunStarted | RunFinished | TrialFinished | Notice | SweepFinished
OnEvent = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The watcher of a sweep nobody watches."""
