"""Advice that agrees with the measurements: a verdict's advice that names a loader setting is
checked against the trials that measured it. A setting measured and not shown to help is cited
with its figures instead of recommended; one that helped is cited beside the advice; one never
measured is said to be untested (with what the model predicts for it, where it did)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from loadtune.decide.choice import beats
from loadtune.record.record import Measured, Record


@dataclass(frozen=True)
class Advised:
    """One setting a trial's advice names, and the trials that would show it: the trial with it
    set on top of the advised one (`exact`), and the one-at-a-time trial from the baseline
    (`alone`), each compared with the trial it changes."""

    setting: str  # as the advice writes it: persistent_workers=True
    exact: str  # the advised trial with the setting
    alone: str  # the baseline with the setting
    baseline: str = "baseline"


@dataclass(frozen=True)
class Weighed:
    """What the measurements say of one advised setting."""

    setting: str
    trial: str | None = None  # the measured trial that holds it, None when none ran
    against: str | None = None  # the trial it is compared with
    throughput: float | None = None
    throughput_lo: float | None = None
    throughput_hi: float | None = None
    against_throughput: float | None = None
    helped: bool = False
    predicted_ratio: float | None = None  # the model's, for the exact trial, when it was only predicted

    @property
    def measured(self) -> bool:
        return self.trial is not None

    def words(self) -> str:
        if not self.measured:
            model = f" (the model predicts {self.predicted_ratio:.2f}x)" if self.predicted_ratio else ""
            return f"{self.setting} is untested here{model}"
        figures = (f"{self.setting} measured {self.throughput:.1f} [{self.throughput_lo:.1f}, "
                   f"{self.throughput_hi:.1f}] samples/s against {self.against_throughput:.1f} ({self.against})")
        if self.helped:
            assert self.throughput is not None and self.against_throughput is not None  # weigh sets both
            return f"{figures}: {self.throughput / self.against_throughput:.2f}x"
        return f"{figures}: not shown to help here"


def _usable(record: Record | None) -> Measured | None:
    """The row's figures when it ran and fed the baseline's samples."""
    return record.measured if record is not None and not record.data_flagged else None


def weigh(advised: Advised, asker: str, by_name: Mapping[str, Record], tolerance: float) -> Weighed:
    """The advised setting against what it changes: on top of the advised trial where that ran,
    else alone against the baseline. Shown to help: faster by more than the tolerance, by
    the point estimate (the ranking's own figure; the interval is cited beside it)."""
    for trial, against in ((advised.exact, asker), (advised.alone, advised.baseline)):
        t, a = _usable(by_name.get(trial)), _usable(by_name.get(against))
        if trial != against and t is not None and a is not None:
            helped = beats(t.throughput.mean, a.throughput.mean, tolerance)
            return Weighed(advised.setting, trial, against, t.throughput.mean, t.throughput.lo, t.throughput.hi,
                           a.throughput.mean, helped)
    exact, base = by_name.get(advised.exact), by_name.get(asker)
    ratio = None
    if exact is not None and exact.predicted_only and exact.assessment.predicted_throughput and base is not None \
            and base.assessment.predicted_throughput:
        ratio = exact.assessment.predicted_throughput / base.assessment.predicted_throughput
    return Weighed(advised.setting, predicted_ratio=ratio)


def evidence_of(advice: str) -> str:
    """The figures of a verdict's advice, without its remedy: verdict sentences read
    "<figures>: <remedy>" (measure.verdict)."""
    return advice.partition(": ")[0]


def checked_advice(advice: str, weighed: Sequence[Weighed]) -> str:
    """The advice as the measurements allow: where any setting it names was measured and not
    shown to help, the figures stay and each setting is cited instead of advised; else the advice
    stays, with what measured its settings or that they are untested."""
    if not weighed:
        return advice
    if any(w.measured and not w.helped for w in weighed):
        # The remedy names a setting the data did not bear out: only the figures stay, and each
        # setting is said with what measured it (or that it is untested).
        return f"{evidence_of(advice)}: " + "; ".join(w.words() for w in weighed) + "."
    return f"{advice.rstrip('.')}. " + "; ".join(w.words() for w in weighed) + "."


def with_checked_advice(records: Sequence[Record], advised: Mapping[str, Sequence[Advised]],
                        tolerance: float) -> list[Record]:
    """Each record whose verdict's advice names settings (`advised`, by trial name), its advice
    rewritten by checked_advice; the others as they are."""
    by_name = {r.trial: r for r in records if r.trial}
    out = []
    for r in records:
        named = advised.get(r.trial or "")
        if named and r.assessment.advice:
            weighed = [weigh(a, r.trial or "", by_name, tolerance) for a in named]
            r = r.with_columns(advice=checked_advice(r.assessment.advice, weighed))
        out.append(r)
    return out
