"""A finished sweep, as `loadtune sweep` and `loadtune.sweep()` both return it: its rows, how
sure the pick is, and the summary; the CSV, the `--json` summary, the table and the chart are
all rendered from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from loadtune.decide.decision import Decision, ModelTie
from loadtune.record.findings import Finding
from loadtune.record.record import Record, to_frame

if TYPE_CHECKING:
    import pandas

    from loadtune.asked.trials import Trial
    from loadtune.present.summary import Summary

# Decision and ModelTie (decide.decision) are also found here, beside the result that holds them.
__all__ = ["Decision", "ModelTie", "SweepResult"]


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its rows (best first), the summary (the recommendation, what to change,
    how sure, the findings) and the trials as asked, by name."""

    out_path: Path
    records: tuple[Record, ...]
    summary: "Summary"
    trials: Mapping[str, Trial] = field(default_factory=dict)  # by name

    @property
    def rows(self) -> tuple[Record, ...]:
        return self.records

    @property
    def recommended(self) -> Record | None:
        return self.summary.standing.recommended

    @property
    def loader_kwargs(self) -> dict[str, Any] | None:
        """The recommended trial's DataLoader settings (threads: see summary.pick.dataloader)."""
        return self.summary.pick.loader_kwargs

    @property
    def change(self) -> dict[str, Any] | None:
        """The recommended settings that differ from the baseline's."""
        return self.summary.pick.change

    @property
    def decided(self) -> bool | None:
        return self.summary.decided

    @property
    def decision(self) -> Decision | None:
        return self.summary.decision

    @property
    def device(self) -> str:
        return self.summary.labels.device

    @property
    def warnings(self) -> tuple[Finding | str, ...]:
        return self.summary.found.warnings

    @property
    def notes(self) -> tuple[Finding | str, ...]:
        return self.summary.found.notes

    @property
    def frame(self) -> "pandas.DataFrame":
        """The rows as a pandas DataFrame, typed by the results' column table."""
        return to_frame(self.records)
