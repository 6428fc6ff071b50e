"""The values of `loadtune compare`: the files compared, the flags and verdicts it words, and
the comparison itself with its JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from loadtune.core.kinds import Status
from loadtune.model.predict_values import RunCheck, TransferCheck
from loadtune.record.record import Record
from loadtune.record.watched import is_run

MACHINE = ("host", "cpu_model", "cpu_count", "cpu_quota", "ram_gb", "shm_free_gb", "gpu", "torch_version",
           "python_version", "loadtune_version")

ABSENT = "absent"  # status shown for a trial that has no row in a file
LABEL_SEPARATOR = "@"  # flat column names: `throughput@<label>`

CONFIG_COLUMNS = ("config_name", "config_sha")
# What may differ between files without refusing them: the machine (loadtune_version aside), scale
# and the number of ranks.
DIFFERENCE_COLUMNS = (*(c for c in MACHINE if c != "loadtune_version"), "start_method", "scale", "ranks",
                      *CONFIG_COLUMNS)

# Per file, in this order, in the aligned table (`<metric>@<label>`).
PER_FILE_COLUMNS = ("status", "rank", "tied_with_best",
                    "throughput", "throughput_lo", "throughput_hi", "predicted_throughput",
                    "wait_ratio", "wait_ratio_lo", "wait_ratio_hi",
                    "speedup", "reason")
FLAGS_COLUMN = "flags"
# Per file after the first, on another machine: what the first file's model predicted there.
TRANSFER_COLUMN = "predicted_from_first"
# Per file of a run, on its watched loaders' rows: what the first sweep said of their configs
# (column -> RunCheck attribute).
RUN_COLUMNS = {"sweep_throughput": "sweep_throughput", "sweep_wait_ratio": "sweep_wait_ratio",
               "sweep_figure": "figure"}
FLAG_SEPARATOR = "; "

WINNER_CHANGED = "winner changed"
# Another winner, but each file's winner is tied with the best (tied_with_best) in the other file:
# the same conclusion.
WINNER_WITHIN_NOISE = "winners tied in both"
HELPS_TO_HURTS = "helps → hurts"
HURTS_TO_HELPS = "hurts → helps"
TIE_GROUP_CHANGED = "tie group changed"
STATUS_CHANGED = "status changed"
# A file's winner the other file never measured (no row, skipped, only predicted): no change can
# be told from it.
WINNER_NOT_MEASURED = "winner not measured in both"
# Flags that mean the conclusion changed (`Comparison.changed`, `--fail-on-flip`).
CONCLUSION_FLAGS = (WINNER_CHANGED, HELPS_TO_HURTS, HURTS_TO_HELPS)
# Each flag as the table shows it: a short code that never wraps, read by the legend under the table.
FLAG_CODES = {WINNER_CHANGED: "W", WINNER_WITHIN_NOISE: "W=", WINNER_NOT_MEASURED: "W?", HELPS_TO_HURTS: "+→-",
              HURTS_TO_HELPS: "-→+", TIE_GROUP_CHANGED: "T", STATUS_CHANGED: "S"}
# Statuses of a trial a file measured, or tried to (a winner that fails elsewhere is a change).
TRIED_STATUSES = frozenset({Status.OK, Status.FAILED, Status.TIMEOUT})

VERDICT_HOLDS = "conclusion holds"
VERDICT_CHANGED = "conclusion changed"
VERDICT_CANNOT_TELL = "cannot tell"
# Another file's winner differs, but the two winners were each tied with the best in both files.
VERDICT_TIED = "same conclusion: the winners were tied in both"

# A file-level column's value (numbers are floats in a plain frame; several values joined by ',').
FileValue = str | float | bool | None


@dataclass(frozen=True, eq=False)
class ResultSet:
    """One results CSV: its path, a short label unique among the compared files, its rows."""
    path: Path
    label: str
    frame: pd.DataFrame  # of a run, its loaders' ranks combined
    records: tuple[Record, ...] = ()  # the rows as read

    @property
    def run(self) -> bool:
        """A real training run's rows (status watched), not a sweep's."""
        return is_run(self.records)


@dataclass(frozen=True)
class Files:
    """The files compared, in the order given, and the file-level columns that differ between them."""

    labels: tuple[str, ...]
    paths: tuple[Path, ...]
    # the labels of the files of a real run: the conclusion is the sweeps'
    run_labels: tuple[str, ...] = ()
    differences: dict[str, dict[str, FileValue]] = field(default_factory=dict)  # column -> label -> value

    @property
    def sweep_labels(self) -> tuple[str, ...]:
        return tuple(label for label in self.labels if label not in self.run_labels)


@dataclass(frozen=True)
class Conclusion:
    """Whether the first sweep's conclusion holds in the other sweeps, and why not."""

    winners: dict[str, str | None]  # label -> trial (None: nothing ranked in that file)
    tau: dict[str, float | None]  # label -> Kendall tau-b against the first file's ranking
    flags: dict[str, list[str]]  # trial -> flags, only trials with at least one
    verdict: str
    changed: bool
    # what cannot be told: a file's winner the other file did not measure ("b did not measure X")
    unknown: tuple[str, ...] = ()
    # the winners that differ but were tied in both files ("X in a, Y in b"): the same conclusion
    tied: tuple[str, ...] = ()


@dataclass(frozen=True)
class Checked:
    """The first sweep set against the other files' machines."""

    # label -> what the first file's pipeline model predicted for that file's machine (other
    # cores, ranks or step), against what it measured
    transfers: dict[str, TransferCheck] = field(default_factory=dict)
    # per file of a run: what the first sweep said of each watched loader's config beside what
    # the run measured
    runs: dict[str, tuple[RunCheck, ...]] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Comparison:
    """The files aligned by trial, whether the conclusion holds, and the first sweep against the others."""

    files: Files
    table: pd.DataFrame  # one row per trial: `trial`, `<metric>@<label>` per file, `flags`
    conclusion: Conclusion
    checked: Checked = field(default_factory=Checked)

    @property
    def verdict(self) -> str:
        return self.conclusion.verdict

    @property
    def changed(self) -> bool:
        return self.conclusion.changed

    @property
    def winners(self) -> dict[str, str | None]:
        return self.conclusion.winners

    @property
    def reference(self) -> str | None:
        """The sweep the runs are set against: the first."""
        sweeps = self.files.sweep_labels
        return sweeps[0] if sweeps else None

    def to_json(self, summary: Sequence[str] = (), out: Path | None = None) -> dict[str, Any]:
        """What `loadtune compare --json` prints (docs/reference.md): the files, each one's winner,
        the verdict, the aligned rows, and the summary's lines."""

        def plain(value: Any) -> Any:
            return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) \
                else value

        def cell(value: Any) -> Any:
            if value is None or (not isinstance(value, (list, tuple, dict)) and pd.isna(value)):
                return None
            return value.item() if hasattr(value, "item") else value

        rows = [{k: cell(v) for k, v in row.items()} for row in self.table.astype(object).to_dict("records")]
        files, conclusion = self.files, self.conclusion
        return {
            "files": [{"label": label, "path": str(path), "run": label in files.run_labels}
                      for label, path in zip(files.labels, files.paths)],
            "reference": files.labels[0] if files.labels else None,
            "winners": conclusion.winners,
            "differences": files.differences,
            "tau": conclusion.tau,
            "flags": conclusion.flags,
            "changed": conclusion.changed,
            "verdict": conclusion.verdict,
            "transfers": {label: plain(check) for label, check in self.checked.transfers.items()},
            "runs": {label: [plain(check) for check in checks] for label, checks in self.checked.runs.items()},
            "rows": rows,
            "summary": list(summary),
            "out": str(out) if out is not None else None,
        }
