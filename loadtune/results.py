"""The results CSV (SPEC §4): one row per trial, appended as trials finish, ranked at the end."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from loadtune.diagnose import COLUMNS as DIAGNOSIS
from loadtune.errors import ResultsError
from loadtune.measure import Measurement
from loadtune.plan import Trial
from loadtune.rank import Placing
from loadtune.run import Outcome
from loadtune.stats import TrialStats

SETTINGS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size")
MACHINE = ("host", "cpu_model", "cpu_count", "cpu_quota", "ram_gb", "shm_free_gb", "gpu",
           "torch_version", "python_version", "loadtune_version")
RUN = ("config_name", "config_sha", "dataset_len", "scale", "started_at")
COLUMNS = (
    "rank", "trial", "changed", "value", "status", "reason",
    *SETTINGS,
    "wait_ratio", "wait_ratio_lo", "wait_ratio_hi",
    "throughput", "throughput_lo", "throughput_hi",
    "wait_ms", "wait_p95_ms", "h2d_ms", "step_ms",
    "first_batch_s", "epoch_start_ms",
    "speedup", "tied_with_best",
    "repeats", "batches",
    *MACHINE,
    *RUN,
    # Beyond SPEC §4's columns, never before them.
    "pct_of_ideal", *DIAGNOSIS, "strategy", "round", "device", "pinned", "trial_wall_s", "start_method",
    "ranks", "wait_ratio_max_rank", "h2d_gb_per_s",
)
DEFAULT_PREFETCH = 2
BOOL_COLUMNS = ("persistent_workers", "pin_memory", "tied_with_best", "pinned")
TEXT_COLUMNS = ("trial", "changed", "value", "status", "reason", *MACHINE, "config_name", "config_sha",
                "started_at", "strategy", "device", "start_method", "memory_metric", "verdict", "advice")


# The per-rank file beside a sweep's CSV when ranks > 1: one row per trial and rank.
RANK_FILE_COLUMNS = ("trial", "dist_rank", "wait_ratio", "wait_ratio_lo", "wait_ratio_hi",
                     "throughput", "throughput_lo", "throughput_hi", "wait_ms", "wait_p95_ms", "h2d_ms", "step_ms",
                     "first_batch_s", "epoch_start_ms", "pinned", "h2d_gb_per_s", "config_name", "config_sha",
                     "started_at")


def rank_file(path: Path | str) -> Path:
    """Where the per-rank rows of the CSV at `path` go: NAME.ranks.csv beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}.ranks{path.suffix or '.csv'}")


def rank_rows(trial: Trial, per_rank: Sequence[tuple[TrialStats, Measurement]],
              context: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per rank of a trial that ran on several: each rank's own figures."""
    rows = []
    for index, (stats, measurement) in enumerate(per_rank):
        row = {c: context.get(c) for c in RANK_FILE_COLUMNS}
        row.update(trial=trial.name, dist_rank=index, pinned=measurement.pinned,
                   wait_ratio=_round(stats.wait_ratio.mean, 4), wait_ratio_lo=_round(stats.wait_ratio.lo, 4),
                   wait_ratio_hi=_round(stats.wait_ratio.hi, 4), throughput=_round(stats.throughput.mean, 2),
                   throughput_lo=_round(stats.throughput.lo, 2), throughput_hi=_round(stats.throughput.hi, 2),
                   wait_ms=_round(stats.wait_ms, 3), wait_p95_ms=_round(stats.wait_p95_ms, 3),
                   h2d_ms=_round(stats.h2d_ms, 3), step_ms=_round(stats.step_ms, 3),
                   first_batch_s=_round(stats.first_batch_s, 3), epoch_start_ms=_round(stats.epoch_start_ms, 3),
                   h2d_gb_per_s=_round(stats.copy_gb_per_s, 3))
        rows.append(row)
    return rows


def effective_settings(trial: Trial) -> dict[str, Any]:
    """The swept settings as DataLoader applies them (prefetch_factor 2 when workers use the default)."""
    kw = trial.loader_kwargs
    workers = kw.get("num_workers", 0)
    prefetch = kw.get("prefetch_factor")
    if workers > 0 and prefetch is None:
        prefetch = DEFAULT_PREFETCH
    return {
        "num_workers": workers,
        "prefetch_factor": prefetch if workers > 0 else None,
        "persistent_workers": kw.get("persistent_workers", False),
        "pin_memory": kw.get("pin_memory", False),
        "batch_size": kw.get("batch_size"),
    }


def _round(value: float | None, digits: int) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return round(value, digits)


def make_row(trial: Trial, outcome: Outcome | None, stats: TrialStats | None, context: Mapping[str, Any],
             measurement: Measurement | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One CSV row for a trial; `context` holds the machine and run columns and `device`;
    `extra` more columns of COLUMNS (the resource figures and verdict)."""
    if outcome is None:  # planned but refused before it ran
        status, reason = "skipped", trial.skip_reason or ""
    else:
        status, reason = outcome.status, outcome.reason
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row.update(
        trial=trial.name,
        changed=trial.changed,
        value=trial.value_text,
        status=status,
        reason=reason,
        **effective_settings(trial),
    )
    row.update({k: context.get(k) for k in (*MACHINE, *RUN, "device", "strategy", "round", "start_method", "ranks")})
    if outcome is not None:
        row["trial_wall_s"] = _round(outcome.wall_s, 2)
    if measurement is not None:
        row["pinned"] = measurement.pinned
    if extra:
        row.update({k: v for k, v in extra.items() if k in row})
    if stats is not None:
        row.update(
            wait_ratio=_round(stats.wait_ratio.mean, 4),
            wait_ratio_lo=_round(stats.wait_ratio.lo, 4),
            wait_ratio_hi=_round(stats.wait_ratio.hi, 4),
            throughput=_round(stats.throughput.mean, 2),
            throughput_lo=_round(stats.throughput.lo, 2),
            throughput_hi=_round(stats.throughput.hi, 2),
            wait_ms=_round(stats.wait_ms, 3),
            wait_p95_ms=_round(stats.wait_p95_ms, 3),
            h2d_ms=_round(stats.h2d_ms, 3),
            step_ms=_round(stats.step_ms, 3),
            first_batch_s=_round(stats.first_batch_s, 3),
            epoch_start_ms=_round(stats.epoch_start_ms, 3),
            repeats=stats.repeats,
            batches=stats.batches,
            ranks=stats.ranks,
            wait_ratio_max_rank=_round(stats.wait_ratio_max_rank, 4),
            h2d_gb_per_s=_round(stats.copy_gb_per_s, 3),
        )
    return row


def apply_ranking(rows: Sequence[dict[str, Any]], placings: Mapping[str, Placing],
                  baseline_throughput: float | None, ideal_throughput: float | None = None,
                  ) -> list[dict[str, Any]]:
    """Rows with rank, tied_with_best, speedup and pct_of_ideal filled in: ranked rows best
    first, then the unranked reference rows that ran (the ideal), then rows that did not run."""
    out = []
    for row in rows:
        row = dict(row)
        placing = placings.get(row["trial"])
        row["rank"] = placing.rank if placing else None
        row["tied_with_best"] = placing.tied_with_best if placing else None
        if row["throughput"] is not None:
            if baseline_throughput:
                row["speedup"] = round(row["throughput"] / baseline_throughput, 3)
            if ideal_throughput:
                row["pct_of_ideal"] = round(100 * row["throughput"] / ideal_throughput, 1)
        out.append(row)
    ranked = sorted((r for r in out if r["rank"] is not None),
                    key=lambda r: (r["rank"], -(r["throughput"] or 0)))
    reference = [r for r in out if r["rank"] is None and r["status"] == "ok"]
    return ranked + reference + [r for r in out if r["rank"] is None and r["status"] != "ok"]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return str(value)


class ResultsFile:
    """A CSV that is valid after every row: appended and flushed as trials finish; the final
    ranking is written to a temporary file and renamed over it."""

    def __init__(self, path: Path | str, columns: Sequence[str] = COLUMNS) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)

    def start(self, kept: Iterable[Mapping[str, Any]] = ()) -> None:
        """A new file holding the header and any rows kept from an earlier run."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.replace(kept)

    def append(self, row: Mapping[str, Any]) -> None:
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow([_cell(row.get(c)) for c in self.columns])
            f.flush()
            os.fsync(f.fileno())

    def replace(self, rows: Iterable[Mapping[str, Any]]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(self.columns)
            for row in rows:
                writer.writerow([_cell(row.get(c)) for c in self.columns])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def _parse(column: str, text: str) -> Any:
    if text == "":
        return None
    if column in BOOL_COLUMNS:
        return {"true": True, "false": False}.get(text.lower())
    if column in TEXT_COLUMNS:
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    """Rows of a results CSV as written by this module, typed; a missing file gives none, and a
    last line cut short (a sweep killed while writing) is left out."""
    path = Path(path)
    if not path.exists():
        return []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            return []
        return [{c: _parse(c, v) for c, v in zip(header, values)} for values in reader if len(values) == len(header)]


REQUIRED_FOR_REPORT = ("trial", "status", "reason", "rank", "throughput", "throughput_lo", "throughput_hi",
                       "wait_ratio", "wait_ratio_lo", "wait_ratio_hi", "tied_with_best")


def load_rows(path: Path | str) -> list[dict[str, Any]]:
    """Rows of a results CSV to show or compare; a missing, empty or foreign file is a ResultsError."""
    path = Path(path)
    if not path.is_file():
        raise ResultsError(f"{path}: results CSV not found")
    try:
        with path.open(newline="") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    missing = [c for c in REQUIRED_FOR_REPORT if c not in header]
    if missing:
        raise ResultsError(f"{path}: not a loadtune results CSV (missing columns: {', '.join(missing)})")
    return read_rows(path)


def read_frame(path: Path | str, required: Sequence[str], **read_csv: Any) -> Any:
    """A results CSV as a pandas DataFrame (`read_csv` passed to pandas.read_csv); a missing,
    unreadable or empty file, or one without the `required` columns, is a ResultsError."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path, **read_csv)
    except FileNotFoundError:
        raise ResultsError(f"{path}: results CSV not found") from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: is a folder, not a results CSV") from None
    except pd.errors.EmptyDataError:
        raise ResultsError(f"{path}: the file is empty, not a results CSV") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ResultsError(f"{path}: cannot parse as CSV: {first}") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ResultsError(f"{path}: not a loadtune results CSV: missing column(s) {', '.join(missing)}")
    return frame
