"""What the user reads of a results file: the ranked table, the rows that gave no figures, the
legend, the findings under a file's table and each trial's repeats. Builds renderables and plain
lines; printing is the CLI's job. The summary (the answer, --json) is present.summary's."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rich.table import Table
from rich.text import Text

from loadtune.asked.trials import BASELINE, IDEAL
from loadtune.core.kinds import Status
from loadtune.core.text import STATUS_STYLE, fmt as _fmt
from loadtune.decide.choice import recommended
from loadtune.model.model import prediction_error
from loadtune.present.table import Cell, Column, fitted_table
from loadtune.record.findings import ModelError
from loadtune.record.record import MEASURED_STATUSES, Record


def _interval(record: Record, key: str, digits: int) -> str:
    lo, hi = record.column(key + "_lo"), record.column(key + "_hi")
    return f"{_fmt(record.column(key), digits)} [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


# Shorter words for settings in trial names, where a narrow table needs them.
SHORT_KEYS = {"num_workers": "workers", "prefetch_factor": "prefetch", "persistent_workers": "persistent",
              "pin_memory": "pinned", "in_order": "in-order", "main_threads": "main-threads",
              "worker_threads": "worker-threads", "batch_size": "batch"}


def short_trial(name: str) -> str:
    """A trial's name in fewer characters: `num_workers=2, prefetch_factor=4, persistent_workers=true`
    reads `workers=2 prefetch=4 persistent`."""
    parts = []
    for part in name.split(", "):
        key, eq, value = part.partition("=")
        if not eq:
            return name  # baseline, ideal, or a name of the user's
        word = SHORT_KEYS.get(key, key)
        parts.append(word if value == "true" else f"no-{word}" if value == "false" else f"{word}={value}")
    return " ".join(parts)


# The ranked table's columns, in order, and how soon each is left out when the output is narrow
# (0: never; the CSV holds them all).
RESULT_COLUMNS = {"rank": 0, "trial": 0, "samples/s [95%]": 0, "predicted": 4, "wait ratio [95%]": 1,
                  "speedup": 2, "% of ideal": 3, "wait ms": 5, "p95 ms": 8, "step ms": 6, "1st batch s": 9,
                  "epoch start ms": 7}


def results_table(records: Sequence[Record], title: str = "", width: int | None = None) -> Table:
    """The ranked table: `=` marks trials tied with the best; rows that did not run are dimmed;
    `predicted` is what the pipeline model said before the trial ran. Configs only predicted,
    never measured, are left out (predicted_lines says how many; the CSV holds them), and so are
    a real run's rows (watched.watched_table shows them). At `width`, the least important
    columns are left out, and trial names shortened, rather than a figure cut."""
    records = [r for r in records if not r.predicted_only and not r.watched]
    predicted = any(r.assessment.predicted_throughput is not None for r in records)  # files before the model have none
    cells: dict[str, list[Cell]] = {name: [] for name in RESULT_COLUMNS}
    names, styles = [], []
    for r in records:
        ok = r.status == Status.OK
        note = r.measuring.data_check if ok and r.data_flagged else "stopped" if ok and r.measuring.stopped_early \
            else None
        names.append(f"{r.trial or ''} ({note})" if note else r.trial or "")
        if r.status != Status.OK:
            status = r.status or ""
            row: dict[str, Cell] = {"rank": "-", "samples/s [95%]": Text(status, style=STATUS_STYLE.get(status, ""))}
            styles.append("dim")
        else:
            mark = "=" if r.assessment.tied_with_best else ""
            row = {
                "rank": "-" if r.data_flagged else f"{mark}{_fmt(r.rank)}" if r.rank is not None else "ref",
                "samples/s [95%]": _interval(r, "throughput", 1),
                "predicted": _fmt(r.assessment.predicted_throughput, 1),
                "wait ratio [95%]": _interval(r, "wait_ratio", 3),
                "speedup": _fmt(r.assessment.speedup), "% of ideal": _fmt(r.assessment.pct_of_ideal, 1),
                "wait ms": _fmt(r.figures.wait_ms, 1), "p95 ms": _fmt(r.figures.wait_p95_ms, 1),
                "step ms": _fmt(r.figures.step_ms, 1),
                "1st batch s": _fmt(r.figures.first_batch_s, 2), "epoch start ms": _fmt(r.figures.epoch_start_ms, 1),
            }
            styles.append("bold" if r.rank == 1 else "yellow" if r.data_flagged else "")
        for name in RESULT_COLUMNS:
            if name != "trial":
                cells[name].append(row.get(name, ""))
    shown = [n for n in RESULT_COLUMNS if predicted or n != "predicted"]

    def columns(trial_names: list[str]) -> list[Column]:
        return [Column(n, tuple(trial_names if n == "trial" else cells[n]), "left" if n == "trial" else "right",
                       RESULT_COLUMNS[n], names=n == "trial") for n in shown]

    short = [short_trial(n) for n in names]
    return fitted_table([columns(names)] + ([columns(short)] if short != names else []), width, title or None, styles)


# How each row that gave no figures is listed: those that ran and failed, or ran past their
# time, by what happened; those refused before they ran as not run.
UNRAN_WORDS = {str(Status.FAILED): "failed", str(Status.TIMEOUT): "timeout", str(Status.SKIPPED): "not run"}


def not_run_lines(records: Sequence[Record], skipped: bool = True) -> list[str]:
    """The trials without figures, each with what happened and why: `failed: T: reason` (it ran
    and failed), `timeout: T: reason` (it ran past measure.timeout_s), `not run: T: reason`
    (skipped before it ran); without `skipped`, the first two only."""
    return [f"{UNRAN_WORDS.get(str(r.status), str(r.status))}: {r.trial}: {r.reason or 'no reason given'}"
            for r in records if r.status not in MEASURED_STATUSES and not r.predicted_only
            and (skipped or r.status != Status.SKIPPED)]


def predicted_lines(records: Sequence[Record]) -> list[str]:
    """One line on the configs of the space the model predicted and the sweep did not measure."""
    only = [r for r in records if r.predicted_only and r.assessment.predicted_throughput is not None]
    if not only:
        return []
    best = max(only, key=lambda r: r.assessment.predicted_throughput or 0.0)
    what = "1 more config of the space was" if len(only) == 1 else f"{len(only)} more configs of the space were"
    return [f"{what} predicted, not measured (status predicted in the CSV); the best of them: {best.trial}, "
            f"{best.assessment.predicted_throughput:.1f} samples/s predicted."]


def flagged_lines(records: Sequence[Record]) -> list[str]:
    """The trials the data check kept out of the ranking, with what is wrong."""
    return [f"{r.trial}: {r.reason or 'data_check ' + str(r.measuring.data_check)}" for r in records
            if r.status == Status.OK and r.data_flagged]


LEGEND = (
    "rank: 1 = best by throughput; '=' marks trials as good as the best (shown within the tolerance, default "
    "3%, or costing at most half of it on average); 'ref' is the ideal (the step fed from memory), not a "
    "setting; '-' with (duplicates) or (different): the trial delivered other samples than the baseline "
    "(data_check), so it is not ranked.",
    "samples/s, wait ratio: the training run's, each epoch start weighed by the run's epoch (in files before "
    "format 4, the windows' own); [95%]: where a rerun of the sweep on this machine lands, 95% of the time.",
    "predicted: the pipeline model's throughput for the trial, made before it ran.",
    "wait ratio: share of the loop spent waiting for data and copying it to the device; "
    "speedup: throughput / baseline; % of ideal: throughput / the ideal's.",
    "wait / p95 ms: mean and 95th percentile wait per counted batch; 1st batch s: worker start-up; "
    "epoch start ms: mean wait at each new epoch (persistent_workers lowers it).",
)


def finding_lines(records: Sequence[Record], every_trial: bool = False) -> list[str]:
    """What `loadtune report` says under a file's table, before the answer (file_summary): the
    baseline's bottleneck where it is not the recommendation (whose bottleneck the answer gives;
    every trial's with `every_trial`), what the data check found, how well the model predicted
    the trials before they ran, and the scale measured at."""
    chosen = recommended(records)
    ran = [r for r in records if r.status == Status.OK and r.trial != IDEAL and r.assessment.verdict]
    # The recommendation's own is in the answer (summary_lines: "Bottleneck now").
    shown = ran if every_trial else [r for r in ran if r.trial == BASELINE and r is not chosen]
    lines = []
    for r in shown:
        label = "recommended, " if r is chosen else ""
        lines.append(f"Bottleneck ({label}{r.trial}): {r.assessment.verdict}; {r.assessment.advice or ''}".rstrip("; "))
    checks: dict[str, int] = {}
    for r in records:
        if r.status == Status.OK and r.trial != IDEAL:
            checks[r.measuring.data_check or "not checked"] = checks.get(r.measuring.data_check or "not checked", 0) + 1
    if checks:
        lines.append("Data check: " + ", ".join(f"{n} {what}" for what, n in checks.items()))
    error, checked = prediction_error(records)
    if error is not None:
        lines.append(str(ModelError(error, checked)))
    first = next((r for r in records if r.run.scale is not None), None)
    if first is not None:
        lines.append(f"Measured at scale x{first.run.scale:g}: the bottleneck moves with data, ranks and machine; "
                     "rerun with --scale, or on the target machine (loadtune predict says what to expect there).")
    return lines


def repeat_lines(csv_path: Path, records: Sequence[Record]) -> list[str]:
    """Each trial's repeats as measured (samples/s, each repeat a process of its own), from the
    raw samples beside the CSV; nothing where there are none (a file from before they were kept)."""
    from loadtune.record.samples import read_samples, repeat_throughputs, samples_file

    stored = read_samples(samples_file(csv_path))
    if stored is None:
        return []
    lines = []
    for r in records:
        kept = stored.trials.get(r.trial or "")
        if kept is None or not r.ran or r.watched or len(kept.measurements) != r.measuring.repeats:
            continue
        figures = ", ".join(f"{t:.1f}" for t in repeat_throughputs(kept, r.measuring.run_epoch_batches))
        lines.append(f"  {r.trial}: {figures}")
    return [f"Each repeat's samples/s ({samples_file(csv_path).name}):", *lines] if lines else []


def report_title(records: Sequence[Record], source: str) -> str:
    first = records[0] if records else Record()
    parts = [str(v) for v in (first.run.config_name, first.run.machine.host, first.run.machine.device) if v]
    if first.run.scale is not None:
        parts.append(f"scale x{first.run.scale:g}")
    if (first.measuring.ranks or 1) > 1:
        parts.append(f"{first.measuring.ranks} ranks")
    return f"{source}: " + ", ".join(parts) if parts else source
