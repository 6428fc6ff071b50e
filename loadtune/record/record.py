"""The results record (docs/reference.md, "The CSV"): one typed record per CSV row, one column table that
drives the writer, the single reader, the required-column checks and the pandas dtypes.

`Record` is a row of a sweep's CSV, `RankRecord` a row of the per-rank file beside it. Each
lists its columns in CSV order (COLUMN_ORDER) and holds them in its fields or in named groups of
fields (Settings, Figures, Measuring, Resources, Assessment, Run with its Machine); each field's
metadata gives its kind and, for floats, the digits it is rounded to when a record is built
(`rounded`), as record/columns defines them. A record is built from flat column values (`of`,
`rounded`) and gives them back flat (`to_dict`, `column`).
Every file carries the format version it was written with; files written before the version
column (version 1) still load.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence, overload

from loadtune.core.errors import ResultsError
from loadtune.core.kinds import Status
from loadtune.record.columns import (
    BOOL,
    FALSE_TEXT,
    FIGURES,
    FLOAT,
    INT,
    TEXT,
    TRUE_TEXT,
    Column,
    R,
    RecordTable,
    column_field as _col,
    group_field as _group,
)
from loadtune.record.interval import Interval

if TYPE_CHECKING:
    import pandas

# 1: before this column existed (migrated below); 2: before the predicted columns and rows; 3: before
# throughput and wait_ratio were the training run's (epoch starts weighed by run_epoch_batches); 4: before
# watched rows (status watched, dist_rank); 5: before the pick came first of the rows tied with the best.
FORMAT_VERSION = PICK_FIRST_FORMAT = 6
RUN_FIGURES_FORMAT = 4  # the first version whose figures are the training run's: what a sweep may resume
ENCODING = "utf-8"
# The data_check column: whether a trial delivered the baseline's samples. Trials that did not
# (DATA_FLAGGED) keep their figures but are never ranked or recommended.
DATA_SAME, DATA_DUPLICATES, DATA_DIFFERENT = "same", "duplicates", "different"
DATA_CHECKS = (DATA_SAME, DATA_DUPLICATES, DATA_DIFFERENT)
DATA_FLAGGED = frozenset({DATA_DUPLICATES, DATA_DIFFERENT})
# Rows whose figures were measured: a sweep's trial that ran, or a real training run watched.
MEASURED_STATUSES = frozenset({Status.OK, Status.WATCHED, Status.TUNED})


@dataclass(frozen=True)
class Measured:
    """A row that ran, as a type: its two figures, each with its interval, never missing."""

    trial: str
    throughput: Interval
    wait_ratio: Interval


@dataclass(frozen=True)
class Settings:
    """The DataLoader settings a trial ran with, and the one change from the baseline it made."""

    changed: str | None = _col(TEXT)
    value: str | None = _col(TEXT)
    num_workers: int | None = _col(INT)
    prefetch_factor: int | None = _col(INT)
    persistent_workers: bool | None = _col(BOOL)
    pin_memory: bool | None = _col(BOOL)
    batch_size: int | None = _col(INT)
    main_threads: int | None = _col(INT)  # torch intra-op threads of the training process (empty: unchanged)
    worker_threads: int | None = _col(INT)  # threads in each worker (empty: unchanged)


@dataclass(frozen=True)
class Measuring:
    """How a trial was measured: its repeats and batches, how long it took, its ranks and data check."""

    repeats: int | None = _col(INT)
    batches: int | None = _col(INT)
    trial_wall_s: float | None = _col(FLOAT, 2)
    stopped_early: bool | None = _col(BOOL)  # racing stopped it after fewer repeats: clearly behind
    disturbed_repeats: int | None = _col(INT)  # repeats measured again: other processes used the cores
    ranks: int | None = _col(INT)
    wait_ratio_max_rank: float | None = _col(FLOAT, 4)
    # A watched row's rank in its job's process group (0 without one); empty on a sweep's rows.
    dist_rank: int | None = _col(INT)
    # samples/s over the counted batches as measured (each epoch start weighed by the windows' own
    # epochs); throughput is the run's: each start weighed by run_epoch_batches, the run's epoch.
    window_throughput: float | None = _col(FLOAT, 2)
    run_epoch_batches: int | None = _col(INT)
    data_check: str | None = _col(TEXT)  # same, duplicates, different (DATA_CHECKS); empty: not checked


@dataclass(frozen=True)
class Resources:
    """The CPU and memory a trial used, and the reads it made."""

    cpu_util: float | None = _col(FLOAT, 3)
    main_cpu_util: float | None = _col(FLOAT, 3)
    workers_cpu_util: float | None = _col(FLOAT, 3)
    outside_cpu: float | None = _col(FLOAT, 3)  # share of the usable cores other processes used (largest window)
    peak_pss_mb: float | None = _col(FLOAT, 1)
    worker_pss_mb: float | None = _col(FLOAT, 1)
    pss_growth_mb: float | None = _col(FLOAT, 1)
    read_mb: float | None = _col(FLOAT, 2)
    threads_per_worker: float | None = _col(FLOAT, 1)
    shm_need_mb: float | None = _col(FLOAT, 1)
    memory_metric: str | None = _col(TEXT)


@dataclass(frozen=True)
class Assessment:
    """What was made of a trial: its standing against the best, the model's prediction before it
    ran, the verdict and advice with the loading processes' times behind them, and the trial
    whose advice asked for it."""

    speedup: float | None = _col(FLOAT, 3)
    tied_with_best: bool | None = _col(BOOL)
    pct_of_ideal: float | None = _col(FLOAT, 1)
    # What the pipeline model predicted before the trial ran (empty: no model yet); the only
    # figures of a `predicted` row, a config of the space that was never measured.
    predicted_throughput: float | None = _col(FLOAT, 2)
    predicted_wait_ratio: float | None = _col(FLOAT, 4)
    verdict: str | None = _col(TEXT)
    advice: str | None = _col(TEXT)
    asked_by: str | None = _col(TEXT)  # the trial whose verdict's advice asked for this one
    fetch_ms: float | None = _col(FLOAT, 3)  # wall time per batch fetched in the loading processes
    fetch_cpu_share: float | None = _col(FLOAT, 3)  # CPU / wall inside those fetches
    worker_idle_share: float | None = _col(FLOAT, 3)  # share of a window a worker spent not fetching
    handover_ms: float | None = _col(FLOAT, 3)  # training-thread CPU per batch inside next(), with workers


@dataclass(frozen=True)
class Machine:
    """The machine and software a sweep ran on."""

    host: str | None = _col(TEXT)
    cpu_model: str | None = _col(TEXT)
    cpu_count: int | None = _col(INT)
    cpu_quota: float | None = _col(FLOAT)
    ram_gb: float | None = _col(FLOAT, 1)
    shm_free_gb: float | None = _col(FLOAT, 2)
    gpu: str | None = _col(TEXT)
    device: str | None = _col(TEXT)
    start_method: str | None = _col(TEXT)
    torch_version: str | None = _col(TEXT)
    python_version: str | None = _col(TEXT)
    loadtune_version: str | None = _col(TEXT)


@dataclass(frozen=True)
class Run:
    """The sweep a row came from: its config and data, when and how it ran, on which machine."""

    config_name: str | None = _col(TEXT)
    config_sha: str | None = _col(TEXT)
    dataset_len: int | None = _col(INT)
    scale: float | None = _col(FLOAT)
    started_at: str | None = _col(TEXT)
    strategy: str | None = _col(TEXT)
    round: int | None = _col(INT)
    pinned: bool | None = _col(BOOL)
    format_version: int | None = _col(INT)
    machine: Machine = _group(Machine)


@dataclass(frozen=True)
class Record(RecordTable):
    """One trial of a sweep: its placing and outcome and its two figures at the top; the settings,
    the other figures, how it was measured, the resources, the assessment and the run in groups."""

    COLUMN_ORDER: ClassVar[tuple[str, ...]] = (
        "rank", "trial", "changed", "value", "status", "reason", "num_workers", "prefetch_factor",
        "persistent_workers", "pin_memory", "batch_size", *FIGURES[:-1], "speedup", "tied_with_best",
        "repeats", "batches", "host", "cpu_model", "cpu_count", "cpu_quota", "ram_gb", "shm_free_gb", "gpu",
        "torch_version", "python_version", "loadtune_version", "config_name", "config_sha", "dataset_len",
        "scale", "started_at",
        # Beyond the contract's first columns, never before them.
        "pct_of_ideal", "cpu_util", "main_cpu_util", "workers_cpu_util", "peak_pss_mb", "worker_pss_mb",
        "pss_growth_mb", "read_mb", "threads_per_worker", "shm_need_mb", "memory_metric", "verdict", "advice",
        "strategy", "round", "device", "pinned", "trial_wall_s", "start_method", "ranks", "wait_ratio_max_rank",
        "h2d_gb_per_s", "stopped_early", "fetch_ms", "fetch_cpu_share", "worker_idle_share", "handover_ms",
        "outside_cpu", "asked_by", "main_threads", "worker_threads", "disturbed_repeats", "data_check",
        "predicted_throughput", "predicted_wait_ratio", "window_throughput", "run_epoch_batches", "dist_rank",
        "format_version")

    rank: int | None = _col(INT)  # 1 = best; ties share the lowest rank of their group
    trial: str | None = _col(TEXT)
    status: str | None = _col(TEXT)  # a Status
    reason: str | None = _col(TEXT)
    settings: Settings = _group(Settings)
    measuring: Measuring = _group(Measuring)
    resources: Resources = _group(Resources)
    assessment: Assessment = _group(Assessment)
    run: Run = _group(Run)

    @property
    def ran(self) -> bool:
        """It was measured and has both figures: a sweep's trial that ran (status ok) or a row of a
        real training run (watched, tuned: evidence, never a ranked trial)."""
        return self.status in MEASURED_STATUSES and self.throughput is not None and self.wait_ratio is not None

    @property
    def watched(self) -> bool:
        """Measured in a real training run (loadtune watch; `tuned`: a setting loadtune.tune tried and
        left), not a sweep trial: never ranked, recommended or resumed; its throughput is its own
        rank's (dist_rank) where the run had several."""
        return self.status in (Status.WATCHED, Status.TUNED)

    @property
    def tuned(self) -> bool:
        return self.status == Status.TUNED

    @property
    def predicted_only(self) -> bool:
        """A config the model scored but the sweep did not measure: never ranked or recommended."""
        return self.status == Status.PREDICTED

    @property
    def data_flagged(self) -> bool:
        """It delivered other samples than the baseline (data_check): never ranked or recommended."""
        return self.measuring.data_check in DATA_FLAGGED

    @property
    def measured(self) -> Measured | None:
        """The row's figures when it ran (status ok or watched, both figures there), else None: a
        failed, skipped or predicted row has none, and the type says so."""
        throughput, wait_ratio = self.throughput_interval, self.wait_ratio_interval
        if self.status not in MEASURED_STATUSES or throughput is None or wait_ratio is None:
            return None
        return Measured(self.trial or "", throughput, wait_ratio)


@dataclass(frozen=True)
class RankRecord(RecordTable):
    """One rank of a trial that ran on several (the NAME.ranks.csv beside a sweep's CSV)."""

    COLUMN_ORDER: ClassVar[tuple[str, ...]] = (
        "trial", "dist_rank", *FIGURES[:-1], "pinned", "h2d_gb_per_s", "config_name", "config_sha",
        "started_at", "format_version")

    trial: str | None = _col(TEXT)
    dist_rank: int | None = _col(INT)
    pinned: bool | None = _col(BOOL)
    config_name: str | None = _col(TEXT)
    config_sha: str | None = _col(TEXT)
    started_at: str | None = _col(TEXT)
    format_version: int | None = _col(INT)


# What a file must have to be shown, compared or resumed: the rest may be missing (older files).
REQUIRED = ("trial", "status", "rank", "throughput", "throughput_lo", "throughput_hi",
            "wait_ratio", "wait_ratio_lo", "wait_ratio_hi", "tied_with_best")
RANK_REQUIRED = ("trial", "dist_rank", "throughput", "wait_ratio")


def rank_file(path: Path | str) -> Path:
    """Where the per-rank rows of the CSV at `path` go: NAME.ranks.csv beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}.ranks{path.suffix or '.csv'}")


# --- writing ---------------------------------------------------------------------------------


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def _cells(record: RecordTable) -> list[str]:
    values = record.to_dict()
    if "format_version" in values:
        values["format_version"] = FORMAT_VERSION
    return [_cell(v) for v in values.values()]


class ResultsFile:
    """A CSV of records that is valid after every row: appended and flushed as trials finish;
    the final ranking is written to a temporary file and renamed over it."""

    def __init__(self, path: Path | str, kind: type[RecordTable] = Record) -> None:
        self.path = Path(path)
        self.kind = kind

    def start(self, kept: Iterable[RecordTable] = ()) -> None:
        """A new file holding the header and any records kept from an earlier run."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.replace(kept)

    def append(self, record: RecordTable) -> None:
        with self.path.open("a", newline="", encoding=ENCODING) as f:
            csv.writer(f).writerow(_cells(record))
            f.flush()
            os.fsync(f.fileno())

    def replace(self, records: Iterable[RecordTable]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w", newline="", encoding=ENCODING) as f:
            writer = csv.writer(f)
            writer.writerow(self.kind.names())
            for record in records:
                writer.writerow(_cells(record))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


# --- reading ---------------------------------------------------------------------------------


class _Bad(ValueError):
    pass


def _parse(column: Column, text: str) -> str | bool | float | int | None:
    text = text.strip()
    if text == "":
        return None
    if column.kind == TEXT:
        return text
    if column.kind == BOOL:
        lowered = text.lower()
        if lowered in TRUE_TEXT:
            return True
        if lowered in FALSE_TEXT:
            return False
        raise _Bad(f"not true or false: {text!r}")
    try:
        number = float(text)
    except ValueError:
        raise _Bad(f"not a number: {text!r}") from None
    if column.kind == FLOAT:
        return number
    if not number.is_integer():
        raise _Bad(f"not a whole number: {text!r}")
    return int(number)


def _migrate(values: dict[str, Any], version: int) -> dict[str, Any]:
    """Values of a row written with an older format version, as the current version has them."""
    if version < 2:
        if "ranks" in values and values["ranks"] is None:
            values["ranks"] = 1  # written before ranks were recorded: one
    values["format_version"] = version  # as written; the writer always writes the current one
    return values


@overload
def read_records(path: Path | str, *, required: Sequence[str] | None = None,
                 missing_ok: bool = True) -> list[Record]: ...


@overload
def read_records(path: Path | str, kind: type[R], *, required: Sequence[str] | None = None,
                 missing_ok: bool = True) -> list[R]: ...


def read_records(path: Path | str, kind: type[RecordTable] = Record, *, required: Sequence[str] | None = None,
                 missing_ok: bool = True) -> list[Any]:
    """The records of a results CSV, typed by the column table.

    A missing file gives none when `missing_ok` (resuming), else a ResultsError; so does a
    file without the `required` columns (default: REQUIRED for records). A value that does not
    fit its column is a ResultsError naming the file, row and column. Columns this version
    does not know are passed over; those it knows and the file lacks are None. A last line cut
    short (a sweep killed while writing) is left out.
    """
    path = Path(path)
    if required is None:
        required = REQUIRED if kind is Record else RANK_REQUIRED
    if not path.exists() and missing_ok:
        return []
    rows = _rows(path)
    header = [cell.strip() for cell in rows[0]]
    missing = [c for c in required if c not in header]
    if missing:
        raise ResultsError(f"{path}: not a loadtune results CSV (missing columns: {', '.join(missing)})")
    columns = {c.name: c for c in kind.columns()}
    known = [(i, columns[name]) for i, name in enumerate(header) if name in columns]
    version_at = header.index("format_version") if "format_version" in header else None
    records: list[RecordTable] = []
    for line, cells in enumerate(rows[1:], start=2):
        if len(cells) != len(header) or not any(c.strip() for c in cells):
            continue  # cut short by a kill, or blank
        values: dict[str, Any] = dict.fromkeys(columns)
        for i, column in known:
            try:
                values[column.name] = _parse(column, cells[i])
            except _Bad as exc:
                raise ResultsError(f"{path}: row {line}, column {column.name}: {exc}") from None
        written = version_at is not None and bool(cells[version_at].strip())
        values = _migrate(values, _version(values, written, path))
        if kind is Record or "trial" in columns:
            if not values.get("trial"):
                raise ResultsError(f"{path}: row {line} has no trial name")
        records.append(kind.of(**values))
    return records


def _rows(path: Path) -> list[list[str]]:
    """The rows of the CSV at `path`, its header first; a ResultsError when it cannot be read or is empty."""
    if path.is_dir():
        raise ResultsError(f"{path}: is a folder, not a results CSV")
    try:
        with path.open(newline="", encoding=ENCODING) as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise ResultsError(f"{path}: results CSV not found") from None
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not a results CSV: not UTF-8 text ({exc.reason})") from None
    except (OSError, csv.Error) as exc:
        raise ResultsError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise ResultsError(f"{path}: the file is empty, not a results CSV")
    return rows


def _version(values: dict[str, Any], written: bool, path: Path) -> int:
    """The format version a row was written with (1 when it has none); a ResultsError for a
    version newer than this one reads."""
    if not written:
        return 1
    version: int = values["format_version"] or 1
    if version > FORMAT_VERSION:
        raise ResultsError(f"{path}: written by a newer loadtune (format {version}; this one reads up "
                           f"to {FORMAT_VERSION}): upgrade loadtune to read it")
    return version


def missing_columns(path: Path | str, names: Sequence[str]) -> list[str]:
    """Which of `names` the header of the CSV at `path` lacks (a file written by an older
    version), in the order given."""
    try:
        with Path(path).open(newline="", encoding=ENCODING) as f:
            header = {cell.strip() for cell in next(csv.reader(f), [])}
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    return [name for name in names if name not in header]


@overload
def load_records(path: Path | str) -> list[Record]: ...


@overload
def load_records(path: Path | str, kind: type[R]) -> list[R]: ...


def load_records(path: Path | str, kind: type[RecordTable] = Record) -> list[Any]:
    """The records of a results CSV to show or compare: a missing, empty or foreign file, or a
    value that does not fit its column, is a ResultsError naming the file."""
    return read_records(path, kind, missing_ok=False)


PANDAS_DTYPES = {INT: "Int64", FLOAT: "float64", BOOL: "boolean", TEXT: "object"}


def to_frame(records: Sequence[RecordTable], kind: type[RecordTable] = Record) -> pandas.DataFrame:
    """Records as a pandas DataFrame, one column per field, typed by the column table."""
    import pandas as pd

    columns = kind.columns()
    data = {c.name: [r.column(c.name) for r in records] for c in columns}
    frame = pd.DataFrame(data, columns=[c.name for c in columns])
    for c in columns:
        frame[c.name] = frame[c.name].astype(PANDAS_DTYPES[c.kind])
    return frame


def plain_frame(records: Sequence[RecordTable], kind: type[RecordTable] = Record) -> pandas.DataFrame:
    """Records as a frame for tables and charts: numbers as floats (NaN when empty), text as
    str ('' when empty), booleans as True / False / None."""
    frame = to_frame(records, kind)
    for column in kind.columns():
        values = frame[column.name]
        if column.kind == TEXT:
            frame[column.name] = values.map(lambda v: "" if v is None else v)
        elif column.kind == BOOL:
            frame[column.name] = values.astype(object).map(lambda v: v if isinstance(v, bool) else None)
        else:
            frame[column.name] = values.astype(float)
    return frame


COLUMNS = Record.names()  # a sweep's CSV header, in order
