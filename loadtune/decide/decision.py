"""How sure a sweep's pick is: what racing decided, and the contenders the pipeline model and
the data tied with the pick; and what the sweep concluded beside its CSV (NAME.decision.json),
for `loadtune report` to end with the sweep's own answer."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from loadtune.core.errors import ResultsError
from loadtune.core.kinds import EndedBy
from loadtune.decide.choice import tied_row
from loadtune.decide.paired import Judged
from loadtune.record.record import Record
from loadtune.record.sidecar import replace_json

# Beside NAME.csv: what the sweep concluded that the CSV does not hold (StoredDecision), with the
# digest of the CSV it concluded: {"format", "csv_sha256", "recommended", "speedup_interval",
# "decision"}.
DECISION_SUFFIX = ".decision.json"
DECISION_FORMAT = 1


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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelTie:
        """A tie as to_json wrote it; ValueError where it is not."""
        return cls(_text(data["pick"]), _text(data["other"]), _number(data["predicted_ratio"]),
                   _number(data["measured_ratio"]), _number(data["spread"]), _text(data["spread_source"]))


@dataclass(frozen=True)
class Resolving:
    """What the sweep could resolve: the spread between processes (log sd of a repeat's
    throughput, or the wait ratio's sd; None before it was known), measure.repeats, the
    indifference zone the pick was judged at (the tolerance, or the least difference the repeats
    resolve at that spread, the larger: differences inside it are equal, and the cheapest of the
    equals is the pick) and the most any config can beat the pick by (its wait ratio and the
    ideal row bound it; None where unknown)."""

    spread: float | None = None
    repeats: int = 0
    zone: float | None = None
    bound: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Resolving:
        """What the sweep could resolve, as to_json wrote it; ValueError where it is not."""
        repeats = data.get("repeats", 0)
        if isinstance(repeats, bool) or not isinstance(repeats, int):
            raise ValueError(f"repeats: expected a whole number, not {repeats!r}")
        return cls(_maybe_number(data.get("spread")), repeats, _maybe_number(data.get("zone")),
                   _maybe_number(data.get("bound")))


@dataclass(frozen=True)
class Decision:
    """How sure the pick is: decided (every other contender is equal to it within the zone, or
    shown behind, or nothing left can beat it by more than the zone), or not, with the
    contenders still undecided and what may be left on the table."""

    decided: bool
    tolerance: float
    pick: str | None = None  # the cheapest trial within the zone of the best: the recommendation
    undecided: tuple[str, ...] = ()
    gap: float = 0.0  # at most this share of throughput may be lost by the pick
    why: str = ""  # what ended the racing when undecided, in words
    expected: float | None = None  # the pick's largest expected shortfall against the undecided
    ties: tuple[ModelTie, ...] = ()  # contenders the model and the data tied with the pick
    ended_by: EndedBy | None = None  # what ended the racing when undecided
    # The contenders as good as the best within the zone ('=1' in the table, tied_with_best in
    # the CSV), best first, the pick left out: either will do.
    equal: tuple[str, ...] = ()
    resolving: Resolving = Resolving()
    # Close calls measured in adjacent processes, judged at the zone, each with the pick first.
    paired: tuple[Judged, ...] = ()

    @property
    def zone(self) -> float:
        """The indifference zone the pick was judged at (the tolerance where none was recorded)."""
        return self.resolving.zone if self.resolving.zone is not None else self.tolerance

    def to_json(self) -> dict[str, Any]:
        """Every field as plain JSON values (from_json reads it back equal)."""
        return {"decided": self.decided, "tolerance": self.tolerance, "pick": self.pick,
                "undecided": list(self.undecided), "gap": self.gap, "why": self.why, "expected": self.expected,
                "ties": [t.to_json() for t in self.ties],
                "ended_by": str(self.ended_by) if self.ended_by is not None else None,
                "equal": list(self.equal), "resolving": self.resolving.to_json(),
                "paired": [j.to_json() for j in self.paired]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        """A decision as to_json wrote it; ValueError where it is not (a field missing is its default)."""
        decided, ties, resolving = data["decided"], data.get("ties") or [], data.get("resolving") or {}
        paired = data.get("paired") or []
        if not isinstance(decided, bool) or not isinstance(ties, list) or not isinstance(resolving, dict) \
                or not isinstance(paired, list):
            raise ValueError("decided must be true or false, ties and paired lists and resolving an object")
        pick, ended_by = data.get("pick"), data.get("ended_by")
        return cls(decided, _number(data["tolerance"]), None if pick is None else _text(pick),
                   _names(data.get("undecided")), _number(data.get("gap", 0.0)), _text(data.get("why", "")),
                   _maybe_number(data.get("expected")), tuple(ModelTie.from_json(_object(t)) for t in ties),
                   None if ended_by is None else EndedBy(ended_by), _names(data.get("equal")),
                   Resolving.from_json(resolving), tuple(Judged.from_json(_object(j)) for j in paired))


def ended(kept: bool, budget_spent: bool) -> EndedBy:
    """What ended the racing of an undecided pick: a contender kept from the file (never measured
    again), else the time budget, else measure.repeats."""
    return EndedBy.KEPT if kept else EndedBy.BUDGET if budget_spent else EndedBy.REPEATS


def ended_words(ended_by: EndedBy | str | None, repeats: int) -> str:
    """What ended the racing, in words (Decision.why)."""
    if ended_by == EndedBy.KEPT:
        return "trials kept from the file without their raw samples cannot be measured again"
    if ended_by == EndedBy.BUDGET:
        return "the time budget (--budget) ran out"
    return f"measure.repeats={repeats} ran out"


# --- beside the CSV ------------------------------------------------------------------------------


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, not {value!r}")
    return float(value)


def _maybe_number(value: Any) -> float | None:
    return None if value is None else _number(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, not {value!r}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"expected a list of names, not {value!r}")
    return tuple(_text(v) for v in value)


def _object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, not {value!r}")
    return value


@dataclass(frozen=True)
class StoredDecision:
    """What a sweep concluded that its CSV does not hold, kept beside it: racing's decision (None
    where nothing was raced), the trial the sweep recommended, and the 95% interval of its
    speedup over the baseline (from the raw draws; None where they were not at hand)."""

    decision: Decision | None
    recommended: str | None
    speedup_lo: float | None = None
    speedup_hi: float | None = None

    @property
    def speedup(self) -> tuple[float | None, float | None]:
        return self.speedup_lo, self.speedup_hi

    def row(self, records: Sequence[Record]) -> Record | None:
        """The row of the trial the sweep recommended, where the file still has it among the trials
        tied with the best (the sweep's rule for its pick, choice.picked); None where it does not:
        the file is not the one the sweep concluded."""
        return tied_row(records, self.recommended)


def decision_file(csv_path: Path | str) -> Path:
    """Where a sweep's conclusion goes: NAME.decision.json beside NAME.csv."""
    path = Path(csv_path)
    return path.with_name(f"{path.stem}{DECISION_SUFFIX}")


def csv_digest(csv_path: Path | str) -> str:
    """The SHA-256 of the CSV's bytes, CRLF line ends read as LF: the same file on any system."""
    return hashlib.sha256(Path(csv_path).read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def write_decision(csv_path: Path | str, decision: Decision | None, recommended: Record | None,
                   speedup: tuple[float | None, float | None] = (None, None)) -> Path:
    """NAME.decision.json beside the CSV the sweep has just written, tied to it by its digest,
    replaced at once (written beside it, then renamed over it); read_decision reads it back."""
    path = decision_file(csv_path)
    lo, hi = speedup
    data = {"format": DECISION_FORMAT, "recommended": recommended.trial if recommended is not None else None,
            "speedup_interval": [lo, hi] if lo is not None and hi is not None else None,
            "decision": decision.to_json() if decision is not None else None}
    try:
        data["csv_sha256"] = csv_digest(csv_path)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot write how sure the sweep was: {exc.strerror or exc}") from None
    return replace_json(path, data, "how sure the sweep was")


def read_decision(csv_path: Path | str) -> StoredDecision | None:
    """What the sweep that wrote the CSV concluded (NAME.decision.json beside it); None where there
    is no such file (files written before it), where it cannot be read, or where the CSV is no
    longer the one it was written with (edited, or resumed by a run that did not finish)."""
    path = decision_file(csv_path)
    try:
        data = _object(json.loads(path.read_text(encoding="utf-8")))
        if data.get("format") != DECISION_FORMAT or data.get("csv_sha256") != csv_digest(csv_path):
            return None
        decision, speedup = data.get("decision"), data.get("speedup_interval") or [None, None]
        recommended = data.get("recommended")
        if not isinstance(speedup, list) or len(speedup) != 2:
            raise ValueError("speedup_interval: expected [low, high]")
        lo, hi = (_maybe_number(v) for v in speedup)
        return StoredDecision(Decision.from_json(_object(decision)) if decision is not None else None,
                              None if recommended is None else _text(recommended), lo, hi)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):  # json's errors are ValueErrors
        return None
