"""What `loadtune report` shows of its files, in order, and each file's JSON: the CLI prints
the pieces (tables, prose, warnings) as they come."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rich.table import Table

from loadtune.errors import ResultsError
from loadtune.results.choice import recommended
from loadtune.results.record import Record
from loadtune.results.report import (
    LEGEND,
    Summary,
    brief,
    file_summary,
    finding_lines,
    flagged_lines,
    noise_warnings,
    not_run_lines,
    predicted_lines,
    repeat_lines,
    report_title,
    results_table,
    summary_lines,
)
from loadtune.results.transfer import settings_of, travel
from loadtune.results.watched import WATCHED_LEGEND, read_loader_info, watched_lines, watched_table


@dataclass(frozen=True)
class Prose:
    """Lines of prose, each wrapped on its own, in `style`."""

    lines: tuple[str, ...]
    style: str = ""


@dataclass(frozen=True)
class Warned:
    """A warning, in its words."""

    text: str


Shown = Table | Prose | Warned


class _Legends:
    """Each legend line once, under the first table of its kind."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, lines: Sequence[str]) -> Prose:
        new = tuple(line for line in lines if line not in self.seen)
        self.seen.extend(new)
        return Prose(new, style="dim")


def file_summary_of(rows: list[Record], path: Path) -> Summary | None:
    """A file's summary rebuilt from its rows, with where its pick moves and the trials' loader
    settings beside it (NAME.loader.json), as the sweep said them."""
    chosen = recommended(rows)
    moved, same = travel(rows, settings_of(chosen)) if chosen is not None else ([], [])
    try:
        loaders = {trial: info.loader_kwargs for trial, info in read_loader_info(path).items()}
    except ResultsError:  # unreadable: the paste line holds the swept settings, and says so
        loaders = {}
    return file_summary(rows, str(path), moved, same, loaders)


def watched_json(record: Record) -> dict[str, Any]:
    """A watched row as `loadtune report --json` gives it."""
    return {**(brief(record) or {}), "dist_rank": record.dist_rank, "reason": record.reason or None}


def _watched_shown(rows: list[Record], path: Path, width: int | None, legend: _Legends) -> list[Shown]:
    title = f"{report_title(rows, path.name)} (a watched run)"
    return [watched_table(rows, title=title, width=width), legend(WATCHED_LEGEND),
            Prose(tuple(watched_lines(rows, path)))]


def _sweep_shown(rows: list[Record], path: Path, info: Summary | None, verbose: bool, width: int | None,
                 legend: _Legends) -> list[Shown]:
    shown: list[Shown] = [
        results_table(rows, title=report_title(rows, path.name), width=width),
        Prose(tuple(f"  {line}" for line in not_run_lines(rows))),
        Prose(tuple(f"  {line}" for line in predicted_lines(rows))),
        Prose(tuple(f"  not ranked: {line}" for line in flagged_lines(rows))),
        legend(LEGEND),
        Prose(tuple(finding_lines(rows, every_trial=verbose))),
    ]
    if verbose:
        shown.append(Prose(tuple(repeat_lines(path, rows))))
    shown += [Warned(str(warning)) for warning in noise_warnings(rows)]
    if info is not None:
        shown.append(Prose(tuple(summary_lines(info))))
    return shown


def report_shown(files: Sequence[tuple[Path, list[Record]]], verbose: bool,
                 width: int | None) -> tuple[list[Shown], list[dict[str, Any]]]:
    """Each file as `loadtune report` shows it: a watched run's table and lines, then the sweep's
    ranked table, what did not run, the legend under the first table of each kind, the findings
    (every trial's with `verbose`, and each repeat's figure), the warnings and the answer; and
    each file's JSON."""
    legend = _Legends()
    shown: list[Shown] = []
    data: list[dict[str, Any]] = []
    for path, all_rows in files:
        run_rows = [r for r in all_rows if r.watched]
        if run_rows:
            shown += _watched_shown(run_rows, path, width, legend)
        rows = [r for r in all_rows if not r.watched]
        info = file_summary_of(rows, path) if rows else None
        data.append({"file": str(path), "summary": info.to_json() if info is not None else None,
                     "watched": [watched_json(r) for r in run_rows]})
        if rows or not run_rows:
            shown += _sweep_shown(rows, path, info, verbose, width, legend)
    return shown, data
