"""A watched training run as `loadtune report` shows it: its table (each loader, each rank and
the ranks together), the lines under it (bottlenecks, why it ended, what it measured, what next)
and the legend."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rich.table import Table

from loadtune.core.text import fmt
from loadtune.present.table import Cell, Column, fitted_table
from loadtune.record.record import Record
from loadtune.record.settings import config_name, recorded_settings
from loadtune.record.watched import FED_WAIT_RATIO, combine_ranks, loader_name, loaders


def _interval(record: Record, key: str, digits: int) -> str:
    lo, hi = record.column(key + "_lo"), record.column(key + "_hi")
    text = fmt(record.column(key), digits)
    return text + (f" [{fmt(lo, digits)}, {fmt(hi, digits)}]" if lo is not None and hi is not None else "")


# The watched table's columns, and how soon each is left out when the output is narrow (0: never).
WATCHED_COLUMNS = {"loader": 0, "rank": 0, "samples/s [95%]": 0, "wait ratio [95%]": 1, "wait ms": 4,
                   "p95 ms": 6, "step ms": 3, "1st batch s": 7, "epoch start ms": 5, "batches": 2}


def watched_table(records: Sequence[Record], title: str = "", width: int | None = None) -> Table:
    """A run's watched rows: each loader, on several ranks each rank's row (its own figures) and
    the ranks together (`all`: samples/s summed, the wait ratio their mean)."""
    shown: list[tuple[Record, str]] = []
    combined = {r.trial: r for r in combine_ranks(records) if r.watched and r.ran}
    for name in dict.fromkeys(loader_name(r) for r in records if r.watched):
        rows = [r for r in records if r.watched and loader_name(r) == name]
        ranked = len(rows) > 1 or any((r.measuring.ranks or 1) > 1 for r in rows)
        shown += [(r, str(r.measuring.dist_rank) if ranked and r.measuring.dist_rank is not None else "") for r in rows]
        if ranked and name in combined:
            shown.append((combined[name], "all"))
    cells: dict[str, list[Cell]] = {n: [] for n in WATCHED_COLUMNS}
    for r, rank in shown:
        row = {"loader": loader_name(r) if rank else r.trial or "", "rank": rank,
               "samples/s [95%]": _interval(r, "throughput", 1), "wait ratio [95%]": _interval(r, "wait_ratio", 3),
               "wait ms": fmt(r.figures.wait_ms, 1), "p95 ms": fmt(r.figures.wait_p95_ms, 1),
               "step ms": fmt(r.figures.step_ms, 1),
               "1st batch s": fmt(r.figures.first_batch_s, 2), "epoch start ms": fmt(r.figures.epoch_start_ms, 1),
               "batches": fmt(r.measuring.batches)}
        for name in WATCHED_COLUMNS:
            cells[name].append(row[name])
    names = [n for n in WATCHED_COLUMNS if n != "rank" or any(rank for _, rank in shown)]
    columns = [Column(n, tuple(cells[n]), "left" if n == "loader" else "right", WATCHED_COLUMNS[n],
                      names=n == "loader") for n in names]
    styles = ["bold" if rank == "all" else "" for _, rank in shown]
    return fitted_table([columns], width, title or None, styles)


def settings_text(record: Record) -> str:
    """A row's DataLoader settings, named as every command names a config (settings.config_name:
    every setting that is set; those that need workers left out without them)."""
    return config_name(recorded_settings(record))


def _ranks_words(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def watched_lines(records: Sequence[Record], csv_path: Path | str) -> list[str]:
    """What `loadtune report` says under a run's table: each loader's bottleneck (per group of
    ranks that share it), why the run ended early where it did, what the run measured, and the
    command that tunes it next. No ranking: a run measured one config of each loader."""
    combined = loaders(records)
    if not combined:
        reasons = dict.fromkeys(r.reason for r in records if r.watched and r.reason)
        return [f"No watched loader was measured: {'; '.join(str(r) for r in reasons) or 'no batch counted'}. "
                "A run needs a few batches past the first ones, which are dropped as its warm-up."]
    lines: list[str] = []
    for loader in combined:
        name = loader.trial or ""
        rows = [r for r in records if r.watched and loader_name(r) == name]
        verdicts: dict[tuple[str, str], list[int]] = {}
        for r in rows:
            if r.assessment.verdict:
                said = (r.assessment.verdict, r.assessment.advice or "")
                verdicts.setdefault(said, []).append(r.measuring.dist_rank or 0)
        for (verdict, advice), ranks in verdicts.items():
            where = f"{name}, {_ranks_words(ranks)}" if (loader.measuring.ranks or 1) > 1 and len(verdicts) > 1 else \
                f"{name}, every rank" if (loader.measuring.ranks or 1) > 1 else name
            lines.append(f"Bottleneck ({where}): {verdict}; {advice}".rstrip("; "))
        if loader.reason:
            lines.append(f"{name}: {loader.reason} (its figures are those of the batches watched until then)")
        lines.append(run_line(loader))
    path = str(csv_path)
    lines.append(f"Next: loadtune predict {path} (the settings the pipeline model expects to do better, "
                 f"from this run's evidence), or loadtune init --from {path}, then loadtune sweep on the "
                 "config it writes, to measure them.")
    return lines


def run_line(loader: Record) -> str:
    """What the run measured of one (combined) watched loader, in one sentence."""
    assert loader.throughput is not None and loader.wait_ratio is not None  # a loader that ran
    ranks = int(loader.measuring.ranks or 1)
    on = f", {ranks} ranks" if ranks > 1 else ""
    total = " in all" if ranks > 1 else ""
    batches = f", {loader.measuring.batches} batches counted" if loader.measuring.batches else ""
    fed = "fed: little to gain from the loader's settings" if loader.wait_ratio < FED_WAIT_RATIO else \
        f"waiting for data {loader.wait_ratio:.0%} of the time"
    return (f"Watched {loader.trial} ({settings_text(loader)}{on}{batches}): {loader.throughput:.1f} samples/s"
            f"{total}, wait ratio {loader.wait_ratio:.3f}: {fed}.")


WATCHED_LEGEND = (
    "watched: rows measured in a real training run (loadtune watch), one per loader and, with several ranks, one "
    "per rank; 'all' is the ranks together (samples/s summed, the wait ratio their mean). Not ranked: a run "
    "measures the one config it ran.",
    "samples/s, wait ratio: the run's counted batches after the warm-up, each epoch start counted once per epoch; "
    "[95%]: from how much the run's intervals differed.",
    "wait / p95 ms: mean and 95th percentile wait per counted batch; step ms: the loop's own time per batch; "
    "1st batch s: the first batch's wait; epoch start ms: mean wait at each new epoch.",
)
