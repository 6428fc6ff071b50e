"""What the commands show, built as pieces (tables, prose, warnings) in order, for the CLI to
print as they come: `loadtune sweep`'s progress lines and result, `loadtune report`'s files and
their JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rich.table import Table

from loadtune.core.duration import duration_text
from loadtune.core.errors import ResultsError
from loadtune.core.kinds import Status
from loadtune.decide.choice import picked
from loadtune.decide.decision import read_decision
from loadtune.model.predict import settings_of, travel
from loadtune.present.answer import travel_lines
from loadtune.present.report import (
    LEGEND,
    finding_lines,
    flagged_lines,
    not_run_lines,
    predicted_lines,
    repeat_lines,
    report_title,
    results_table,
)
from loadtune.present.summary import Summary, brief, detail_lines, file_summary, noise_warnings, summary_lines
from loadtune.present.sweep import SweepResult
from loadtune.present.watched_run import WATCHED_LEGEND, watched_lines, watched_table
from loadtune.record.record import Record
from loadtune.record.watched import read_loader_info


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


def started_lines(strategy: str, device: str, dataset_len: int | None, out_path: Path, resumed: int,
                  older: int) -> list[str]:
    """What a sweep says as it starts: where, on what, and what it keeps of an earlier run."""
    lines = [f"Sweeping ({strategy}) on {device}, dataset length {dataset_len}; rows go to {out_path}"]
    if resumed:
        lines.append(f"Resuming: {resumed} trials kept from that file")
    if older:
        lines.append(f"Resuming: {older} rows of that file measured again: an older loadtune wrote them, weighing "
                     "epoch starts by its windows, not the run's epochs")
    return lines


def trial_line(r: Record, resumed: bool) -> str:
    """A trial's line as the sweep finishes it: its figures and how many repeats (kept: from an
    earlier run), or why it did not run."""
    if r.status != Status.OK:
        return f"  {r.trial}: {r.status}: {r.reason}"
    how = " (kept)" if resumed else f" ({r.measuring.repeats} repeat{'s' if r.measuring.repeats != 1 else ''}"
    how += "" if resumed else (", stopped: clearly behind)" if r.measuring.stopped_early else ")")
    return f"  {r.trial}: {r.throughput:.1f} samples/s, wait ratio {r.wait_ratio:.3f}{how}"


def sweep_shown(result: SweepResult, verbose: bool, width: int | None) -> list[Shown]:
    """A finished sweep's ranked table and what did not run (with `verbose`: also what was only
    predicted, what was not ranked, and the details of the answer)."""
    info, records = result.summary, result.records
    labels = info.labels
    on_ranks = f", {info.on_ranks.ranks} ranks" if info.on_ranks.ranks > 1 else ""
    title = (f"{labels.config} (scale x{labels.scale:g}, {labels.device}{on_ranks}, {labels.strategy}, "
             f"ranked by {labels.rank_by})")
    lines = [f"  {line}" for line in not_run_lines(records, skipped=verbose)]
    if verbose:
        lines += [f"  {line}" for line in predicted_lines(records)]
        lines += [f"  not ranked: {line}" for line in flagged_lines(records)]
        lines += detail_lines(info)
    return [results_table(records, title=title, width=width), Prose(tuple(lines))]


def files_line(result: SweepResult, plot: Path | None, verbose: bool, wall_s: float | None = None) -> str:
    """The files a sweep wrote: its CSV, the per-rank CSV, the chart (`plot`, where drawn), and
    without `verbose` where the details are; then the sweep's wall time, where given ("in 31 s")."""
    per_rank_csv = result.summary.on_ranks.per_rank_csv
    files = [str(result.out_path)] + ([f"{per_rank_csv} (per rank)"] if per_rank_csv else [])
    files += [f"{plot} (chart)"] if plot is not None else []
    took = "" if wall_s is None else f"; in {duration_text(wall_s)}"
    more = "" if verbose else "; --verbose for details"
    return f"Files: {', '.join(files)}{more}{took}"


def written_line(written: Path, loader: str | None, source: Path | None) -> str:
    """What `loadtune init` wrote, and what to do next: a config from a watched run (`loader`,
    watched in `source`) needs its dataset factory."""
    if loader is not None:
        return (f"Wrote {written} with the settings of {loader!r}, watched in {source}; fill in its "
                f"dataset.factory, then run: loadtune sweep {written}")
    return f"Wrote {written}; edit it, then run: loadtune sweep {written}"


def file_summary_of(rows: list[Record], path: Path) -> Summary | None:
    """A file's summary rebuilt from its rows, with where its pick moves, the trials' loader
    settings beside it (NAME.loader.json) and what the sweep concluded (NAME.decision.json: how
    sure, where the CSV is still the one it wrote), as the sweep said them."""
    stored = read_decision(path)
    chosen = picked(rows, stored.recommended if stored is not None else None)
    moved, same = travel(rows, settings_of(chosen)) if chosen is not None else ([], [])
    try:
        loaders = {trial: info.loader_kwargs for trial, info in read_loader_info(path).items()}
    except ResultsError:  # unreadable: the paste line holds the swept settings, and says so
        loaders = {}
    return file_summary(rows, str(path), moved, same, loaders, stored)


def watched_json(record: Record) -> dict[str, Any]:
    """A watched row as `loadtune report --json` gives it."""
    return {**(brief(record) or {}), "dist_rank": record.measuring.dist_rank, "reason": record.reason or None}


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
    if info is not None:  # where the pick moves on another machine, before the answer
        shown.append(Prose(tuple(travel_lines(info.elsewhere, str(path)) if info.elsewhere.moved else ())))
    if verbose:  # as the sweep shows them: notes of --verbose, not warnings
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
