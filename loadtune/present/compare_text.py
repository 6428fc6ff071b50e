"""`loadtune compare`'s output: the aligned table as a rich table and as CSV, the lines under
it, and the runs' table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
from rich.table import Table
from rich.text import Text

from loadtune.asked.trials import IDEAL
from loadtune.comparison.values import ABSENT, FLAG_CODES, LABEL_SEPARATOR, TRANSFER_COLUMN, Comparison
from loadtune.core.kinds import Status
from loadtune.core.text import STATUS_STYLE, fmt as _fmt
from loadtune.model.predict_values import MEASURED, RUN_AGREES_SHARE, RUN_AGREES_WAIT_RATIO, RunCheck
from loadtune.present.predict_text import target_text
from loadtune.present.report import short_trial
from loadtune.present.table import Cell, Column, fitted_table
from loadtune.record.record import MEASURED_STATUSES


def _csv_cell(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or value is pd.NA:
        return ""
    return value


def aligned_frame(comparison: Comparison) -> pd.DataFrame:
    """The aligned table as written by --out: booleans as true/false, missing cells empty."""
    frame = comparison.table.copy()
    for label in comparison.files.labels:
        name = f"tied_with_best{LABEL_SEPARATOR}{label}"
        frame[name] = frame[name].map(_csv_cell)
    return frame


def write_aligned(comparison: Comparison, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    aligned_frame(comparison).to_csv(path, index=False)
    return path


def _with_interval(row: Mapping[str, Any], metric: str, label: str, digits: int) -> str:
    key = f"{metric}{LABEL_SEPARATOR}{label}"
    lo, hi = row[f"{metric}_lo{LABEL_SEPARATOR}{label}"], row[f"{metric}_hi{LABEL_SEPARATOR}{label}"]
    text = _fmt(row[key], digits)
    if isinstance(lo, float) and isinstance(hi, float) and math.isfinite(lo) and math.isfinite(hi):
        text += f" [{_fmt(lo, digits)}-{_fmt(hi, digits)}]"
    return text


def comparison_table(comparison: Comparison, title: str = "", width: int | None = None) -> Table:
    """Trials as rows; per file its rank (`=`: tied with best), samples/s with its 95% interval
    and what the pipeline model predicted for it, the wait ratio with its interval; rows that
    did not run show their status, a run's rows (watched) their figures; then the trial's flags as
    short codes that never wrap (FLAG_CODES), with a legend of the codes shown under the table.
    Beside a run, the sweeps alone (run_table sets the runs against them). At `width`, the least
    important columns are left out, and trial names shortened, rather than a figure cut."""
    rows = comparison.table.to_dict("records")
    labels = comparison.files.labels
    if comparison.files.run_labels and comparison.files.sweep_labels:
        labels = comparison.files.sweep_labels
        rows = [row for row in rows if any(row[f"status{LABEL_SEPARATOR}{label}"] != ABSENT for label in labels)]
    figures: list[Column] = []
    for label in labels:
        ranks, samples, predicted, waits, transfers = [], [], [], [], []
        for row in rows:
            status = row[f"status{LABEL_SEPARATOR}{label}"]
            predicted.append(_fmt(row[f"predicted_throughput{LABEL_SEPARATOR}{label}"], 1)
                             if status in (Status.OK, Status.PREDICTED) else "")
            transfers.append(_fmt(row[f"{TRANSFER_COLUMN}{LABEL_SEPARATOR}{label}"], 1)
                             if label in comparison.checked.transfers else "")
            if status not in MEASURED_STATUSES:
                ranks.append(Text(status, style=STATUS_STYLE.get(status, "")))
                samples.append("")
                waits.append("")
                continue
            rank = row[f"rank{LABEL_SEPARATOR}{label}"]
            mark = "=" if row[f"tied_with_best{LABEL_SEPARATOR}{label}"] is True else ""
            winner_style = "bold" if comparison.winners.get(label) == row["trial"] else ""
            shown = "ref" if row["trial"] == IDEAL else "run" if status == Status.WATCHED else \
                "-" if rank is None or rank is pd.NA else rank
            ranks.append(Text(f"{mark}{shown}", style=winner_style))
            samples.append(_with_interval(row, "throughput", label, 1))
            waits.append(_with_interval(row, "wait_ratio", label, 3))
        figures += [Column(f"{label}\nrank", tuple(ranks)), Column(f"{label}\nsamples/s [95%]", tuple(samples)),
                    Column(f"{label}\npredicted", tuple(predicted), priority=3),
                    Column(f"{label}\nwait ratio [95%]", tuple(waits), priority=2)]
        if label in comparison.checked.transfers:
            figures.append(Column(f"{label}\nfrom {comparison.files.labels[0]}", tuple(transfers), priority=1))
    shown = comparison.conclusion.flags
    flags = Column(FLAGS_HEADER, tuple(Text(flag_codes(shown.get(str(row["trial"]), [])), style="yellow")
                                       for row in rows), "left", priority=1)
    names = [str(row["trial"]) for row in rows]
    short = [short_trial(n) for n in names]
    versions = [[Column("trial", tuple(n), "left", names=True), *figures, flags] for n in (names, short)]
    table = fitted_table(versions, width, title or None)
    if any(column.header == FLAGS_HEADER for column in table.columns):
        table.caption = flag_legend([f for row in rows for f in shown.get(str(row["trial"]), [])])
        table.caption_justify = "left"
    return table


# The flags column's header: one character, so that the codes fit beside the figures at 80 columns.
FLAGS_HEADER = "Δ"


def flag_codes(flags: list[str]) -> str:
    """A trial's flags as the table shows them: their short codes (FLAG_CODES), on one line."""
    return " ".join(FLAG_CODES.get(f, f) for f in flags)


def flag_legend(flags: list[str]) -> str | None:
    """What each code of `flags` stands for, once each in FLAG_CODES' order; None without flags."""
    used = [f for f in FLAG_CODES if f in flags]
    return f"{FLAGS_HEADER} (flags): " + ", ".join(f"{FLAG_CODES[f]} {f}" for f in used) if used else None


def comparison_tables(comparison: Comparison, width: int | None = None) -> list[Table]:
    """The tables `loadtune compare` shows: the aligned trials (beside a single sweep, only when
    there is no run to set against it) and the runs against the first sweep."""
    tables = []
    if len(comparison.files.sweep_labels) != 1 or not comparison.files.run_labels:
        tables.append(comparison_table(comparison, width=width))
    if comparison.checked.runs:
        tables.append(run_table(comparison, width=width))
    return tables


def comparison_lines(comparison: Comparison) -> list[str]:
    """Plain lines to show under the table: winners, what differs, tau, each run against the
    first sweep, the verdict (last; with fewer than two sweeps there is no conclusion to hold)."""
    sweeps = comparison.files.sweep_labels
    first = sweeps[0] if sweeps else comparison.files.labels[0]
    lines = ["winner: " + ", ".join(f"{label} {comparison.winners[label] or 'none'}" for label in sweeps)] \
        if sweeps else []
    for column, values in comparison.files.differences.items():
        shown = ", ".join(f"{label} {'-' if v is None else format(v, 'g') if isinstance(v, float) else v}"
                          for label, v in values.items())
        lines.append(f"differs: {column}: {shown}")
    if len(sweeps) > 1:
        tau = comparison.conclusion.tau
        taus = [f"{label} {'-' if tau.get(label) is None else format(tau[label], '.2f')}" for label in sweeps[1:]]
        lines.append(f"Kendall tau-b vs {first} (trials ok in both): " + ", ".join(taus))
    for label, check in comparison.checked.transfers.items():
        measured = "not measured there" if check.pick_measured_share is None else \
            f"measured {check.pick_measured_share:.2f} of its best ({check.measured_best})"
        lines.append(f"predicted from {first} for {label} ({target_text(check.target)}): {check.predicted_pick}, "
                     f"{measured}; median |predicted/measured - 1| {check.median_error:.0%} over "
                     f"{check.compared} trials")
    for label, checks in comparison.checked.runs.items():
        lines.extend(run_check_line(c, label, first) for c in checks)
        if not checks:
            lines.append(f"{label}: no watched loader ran: nothing to set against {first}")
    if not sweeps:
        lines.append("Runs only: their figures side by side; no sweep to set them against, and no ranking.")
    if len(sweeps) > 1 or not comparison.files.run_labels:
        lines.append(comparison.verdict)
    return lines


def run_check_line(check: RunCheck, run: str, sweep: str) -> str:
    """One watched loader against what the sweep said of its config, saying which figure is whose."""
    ranks = f", {check.ranks} ranks" if check.ranks > 1 else ""
    measured = f"{run} (the run): {check.trial} ({check.config}{ranks}) ran {check.throughput:.1f} samples/s, " \
               f"wait ratio {check.wait_ratio:.3f}"
    if check.sweep_throughput is None or check.ratio is None:
        return f"{measured}; {sweep} (the sweep) cannot say what this config does there (no model, or nothing " \
               "measured)."
    if check.figure == MEASURED:
        said = f"{sweep} (the sweep) measured {check.sweep_throughput:.1f}, wait ratio {check.sweep_wait_ratio:.3f} " \
               f"(its trial {check.sweep_trial}, on a machine like the run's)"
    else:
        where = target_text(check.target) if check.target is not None else "the run's machine"
        said = f"{sweep} (the sweep)'s model predicted {check.sweep_throughput:.1f}, wait ratio " \
               f"{check.sweep_wait_ratio:.3f} for it on the run's machine ({where})"
    agrees = "" if check.agrees is None else \
        f": within {RUN_AGREES_SHARE:.0%} and {RUN_AGREES_WAIT_RATIO:g} of the wait ratio, the sweep holds in the run" \
        if check.agrees else f": more than {RUN_AGREES_SHARE:.0%} or {RUN_AGREES_WAIT_RATIO:g} of the wait ratio " \
        "apart, so the sweep's stand-in (its step, its data, its machine) is not the run"
    pick = "" if check.pick is None or check.pick_throughput is None else \
        f". For that machine the sweep's model recommends {check.pick}: {check.pick_throughput:.1f} samples/s " \
        f"predicted, {check.pick_throughput / check.throughput:.2f}x what the run measured"
    return f"{measured}; {said}; run / sweep {check.ratio:.2f}{agrees}{pick}."


def run_table(comparison: Comparison, width: int | None = None) -> Table:
    """Each run's watched loaders (ranks combined) beside what the first sweep said of their configs."""
    rows = [(label, c) for label, checks in comparison.checked.runs.items() for c in checks]
    sweep = comparison.reference or ""

    def cells(get: Any) -> tuple[Cell, ...]:
        return tuple(get(label, c) for label, c in rows)

    columns = [
        Column("run", cells(lambda label, c: label), "left", names=True),
        Column("loader", cells(lambda label, c: c.trial), "left", names=True),
        Column("config", cells(lambda label, c: c.config), "left", priority=3, wrap=True),
        Column("run samples/s", cells(lambda label, c: _fmt(c.throughput, 1))),
        Column(f"{sweep} samples/s", cells(lambda label, c: _fmt(c.sweep_throughput, 1))),
        Column("run / sweep", cells(lambda label, c: _fmt(c.ratio, 2))),
        Column("run wait ratio", cells(lambda label, c: _fmt(c.wait_ratio, 3)), priority=1),
        Column(f"{sweep} wait ratio", cells(lambda label, c: _fmt(c.sweep_wait_ratio, 3)), priority=1),
        Column("sweep's figure", cells(lambda label, c: c.figure or "-"), "left", priority=2),
    ]
    return fitted_table([columns], width, f"Runs against {sweep}: measured in the run, and what {sweep} said")
