"""The parts a sweep's summary is made of, each a plain value: what was swept and where, the
rows that answer it, the config to paste, the findings, the ranks, where the pick moves on other
machines, and what the data check found."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from loadtune.asked.trials import BASELINE, IDEAL
from loadtune.core.kinds import Status
from loadtune.model.model import ModelReport
from loadtune.model.predict_values import Travel
from loadtune.record.findings import Finding
from loadtune.record.record import Record
from loadtune.record.settings import dataloader_line


@dataclass(frozen=True)
class Flagged:
    """A trial the data check flagged: it delivered other samples than the baseline."""

    trial: str
    data_check: str  # duplicates or different
    reason: str  # what is wrong
    fixes: tuple[str, ...] = ()  # the cause and its fix, one sentence each


@dataclass(frozen=True)
class DataFindings:
    """What the data check found over a sweep: the trials flagged, and why some were not checked."""

    flagged: tuple[Flagged, ...] = ()
    notes: tuple[Finding, ...] = ()

    def lines(self) -> list[str]:
        lines = []
        if self.flagged:
            named = "; ".join(f"{f.trial} ({f.data_check}: {f.reason})" for f in self.flagged)
            lines.append(f"Not ranked or recommended, by the data check: {named}.")
            for fix in dict.fromkeys(fix for f in self.flagged for fix in f.fixes):
                lines.append(f"  {fix}")
        lines.extend(f"Data check: {note}." for note in self.notes)
        return lines

    def short_line(self) -> str:
        """The flagged trials in one line, with the first fix."""
        named = "; ".join(f"{f.trial} ({f.data_check}: {f.reason})" for f in self.flagged)
        fix = next((fix for f in self.flagged for fix in f.fixes), "")
        return f"Not ranked: {named}. {fix}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {"flagged": [dataclasses.asdict(f) for f in self.flagged], "notes": [str(n) for n in self.notes]}


@dataclass(frozen=True)
class OneRank:
    """The one-rank sweep of the same config, set beside a sweep on several ranks."""

    csv: str
    trial: str | None = None  # its recommendation, when that CSV has one
    throughput: float | None = None


@dataclass(frozen=True)
class Labels:
    """What was swept, and where: the output, the config and its scale, the device, how the
    trials were ranked and searched, and what the dataset factory returned."""

    output: str
    config: str
    scale: float
    scaled: str | None  # the dataset keyword the scale set, as `dataset.kwargs.NAME = VALUE`
    device: str
    rank_by: str
    strategy: str
    source: str = "dataset"  # what the dataset factory returned
    factory: str | None = None


@dataclass(frozen=True)
class Standing:
    """The rows that answer the sweep: every trial's (best first), the baseline's, the best's,
    the recommendation's, and the ideal's throughput."""

    trials: tuple[Record, ...]
    baseline: Record | None
    best: Record | None
    recommended: Record | None
    ideal_throughput: float | None

    @classmethod
    def of(cls, records: Sequence[Record], chosen: Record | None) -> Standing:
        """The standing of ranked rows, `chosen` recommended."""
        return cls(tuple(records), next((r for r in records if r.trial == BASELINE), None),
                   next((r for r in records if r.rank == 1), None), chosen,
                   next((r.throughput for r in records if r.trial == IDEAL and r.status == Status.OK), None))

    @property
    def advice_measured(self) -> list[dict[str, Any]]:
        """Trials a verdict's advice asked for, each against the trial whose verdict asked."""
        by_name = {r.trial: r for r in self.trials}
        out = []
        for r in self.trials:
            asker = by_name.get(r.assessment.asked_by) if r.assessment.asked_by else None
            if asker is not None:
                usable = r.ran and not r.data_flagged  # a flagged trial fed other samples: no gain to speak of
                gain = None
                if usable and r.throughput is not None and asker.ran and asker.throughput:
                    gain = r.throughput / asker.throughput
                out.append({"trial": r.trial, "asked_by": r.assessment.asked_by, "status": r.status,
                            "throughput": r.throughput, "gain": gain, "data_check": r.measuring.data_check})
        return out

    def named(self, names: Sequence[str]) -> list[Record]:
        """The rows of the trials named, in that order (those without a row left out)."""
        by_name = {r.trial: r for r in self.trials}
        return [by_name[name] for name in names if name in by_name]


@dataclass(frozen=True)
class Pick:
    """The recommended config as the user takes it: its settings, those that differ from the
    baseline's, the DataLoader line to paste, and its speedup over the baseline as a 95%
    interval (None where the raw figures were not at hand, as for trials kept by --resume)."""

    loader_kwargs: dict[str, Any] | None = None
    change: dict[str, Any] | None = None
    dataloader: str | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    # Rebuilt from a CSV whose paste line holds the swept settings only (no NAME.loader.json).
    swept_only: bool = False

    @classmethod
    def of(cls, loader_kwargs: Mapping[str, Any] | None, baseline_kwargs: Mapping[str, Any] | None,
           speedup: tuple[float | None, float | None] = (None, None), swept_only: bool = False) -> Pick:
        """The pick with `loader_kwargs` (the chosen trial's full settings; None without one),
        what to change in the user's own code being the difference from `baseline_kwargs`."""
        if loader_kwargs is None:
            return cls(speedup_lo=speedup[0], speedup_hi=speedup[1], swept_only=swept_only)
        change = None
        if baseline_kwargs is not None:
            change = {k: v for k, v in loader_kwargs.items()
                      if k not in baseline_kwargs or type(v) is not type(baseline_kwargs[k]) or v != baseline_kwargs[k]}
        return cls(dict(loader_kwargs), change, dataloader_line(loader_kwargs), speedup[0], speedup[1], swept_only)


@dataclass(frozen=True)
class Findings:
    """What the sweep found beside the pick: warnings (they ask the user to do something), notes
    (they inform: shown with --verbose), the data check, and the pipeline model fitted to the
    measured trials."""

    warnings: tuple[Finding | str, ...] = ()  # worded at output: str(w)
    notes: tuple[Finding | str, ...] = ()
    data: DataFindings | None = None
    model: ModelReport | None = None


@dataclass(frozen=True)
class OnRanks:
    """A sweep on several ranks: how many, the one-rank sweep of the same config, the per-rank
    file, whether the output path was given (so the one-rank sweep's is not known), and whether
    torchrun launched it."""

    ranks: int = 1
    one_rank: OneRank | None = None
    per_rank_csv: str | None = None
    out_given: bool = False
    torchrun: bool = False


@dataclass(frozen=True)
class Elsewhere:
    """Where the pick moves on the common targets (predict.travel): the predicted pick on each
    target where it is another config, and the targets where the pick holds."""

    moved: tuple[Travel, ...] = ()
    same: tuple[str, ...] = ()
