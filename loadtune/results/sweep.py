"""A finished sweep, as `loadtune sweep` and `loadtune.sweep()` both return it: its rows, how
sure the pick is, and the summary; the CSV, the `--json` summary, the table and the chart are
all rendered from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from loadtune.kinds import EndedBy
from loadtune.results.findings import Finding
from loadtune.results.record import Record, to_frame

if TYPE_CHECKING:
    import pandas

    from loadtune.results.report import Summary


@dataclass(frozen=True)
class ModelTie:
    """Two trials the pipeline model explains as equal whose measurements agree within the
    spread between processes: tied, the cheaper picked, neither raced further."""

    pick: str
    other: str
    predicted_ratio: float  # predicted throughput of other / pick
    measured_ratio: float  # measured throughput of other / pick
    spread: float  # the spread between processes it was judged against (log sd)
    spread_source: str  # "processes" (repeats of the same trials) or "model" (the fit's residuals)

    def facing(self, pick: str) -> "ModelTie":
        """The tie as seen from `pick`: the other trial's predicted and measured ratios to it."""
        if self.pick == pick:
            return self
        return ModelTie(pick, self.pick, 1 / self.predicted_ratio, 1 / self.measured_ratio, self.spread,
                        self.spread_source)


@dataclass(frozen=True)
class Decision:
    """How sure the pick is: decided (shown as good as every other contender, within the
    tolerance), or not, with the contenders still undecided and what may be left on the table."""

    decided: bool
    tolerance: float
    pick: str | None = None  # the cheapest trial shown as good as the best: the recommendation
    undecided: tuple[str, ...] = ()
    gap: float = 0.0  # at most this share of throughput may be lost by the pick
    why: str = ""  # what ended the racing when undecided, in words
    expected: float | None = None  # the pick's largest expected shortfall against the undecided
    remedy: str = "rerun with more --repeats (or a larger --budget) to settle it"
    ties: tuple[ModelTie, ...] = ()  # contenders the model and the data tied with the pick
    ended_by: EndedBy | None = None  # what ended the racing when undecided
    spread: float | None = None  # the spread between processes (log sd of a repeat's throughput)
    repeats: int = 0  # measure.repeats


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its rows (best first), the summary (the recommendation, what to change,
    how sure, the findings) and the trials as asked, by name."""

    out_path: Path
    records: tuple[Record, ...]
    summary: "Summary"
    trials: Mapping[str, Any] = field(default_factory=dict)  # loadtune.trials.Trial by name

    @property
    def rows(self) -> tuple[Record, ...]:
        return self.records

    @property
    def recommended(self) -> Record | None:
        return self.summary.recommended

    @property
    def loader_kwargs(self) -> dict[str, Any] | None:
        """The recommended trial's DataLoader settings (threads: see summary.dataloader)."""
        return self.summary.loader_kwargs

    @property
    def change(self) -> dict[str, Any] | None:
        """The recommended settings that differ from the baseline's."""
        return self.summary.change

    @property
    def decided(self) -> bool | None:
        return self.summary.decided

    @property
    def decision(self) -> Decision | None:
        decision: Decision | None = self.summary.decision
        return decision

    @property
    def device(self) -> str:
        return self.summary.device

    @property
    def warnings(self) -> tuple[Finding | str, ...]:
        return self.summary.warnings

    @property
    def notes(self) -> tuple[Finding | str, ...]:
        return self.summary.notes

    @property
    def frame(self) -> "pandas.DataFrame":
        """The rows as a pandas DataFrame, typed by the results' column table."""
        frame: pandas.DataFrame = to_frame(self.records)
        return frame
