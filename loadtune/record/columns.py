"""The column table of the results records: each column's kind and, for floats, the digits it
is rounded to, given by the metadata of a record type's fields; the group of fields that holds
each column (a nested frozen dataclass, `group_field`); the figures every record type shares
(Figures); and the helpers those types have in common (RecordTable).

A record type lists its columns in CSV order (COLUMN_ORDER); its fields, and those of its
groups, say where each column is held. The CSV row, `to_dict()` and the constructor from flat
column values (`of`, `rounded`) all go through that one table.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from loadtune.record.interval import Interval

INT, FLOAT, BOOL, TEXT = "int", "float", "bool", "text"
TRUE_TEXT = frozenset({"true", "yes", "1"})
FALSE_TEXT = frozenset({"false", "no", "0"})


def column_field(kind: str, digits: int | None = None) -> Any:
    # Any, as dataclasses.field() is typed: each field has its annotation's type.
    return field(default=None, metadata={"kind": kind, "digits": digits})


def group_field(group: type) -> Any:
    """A field holding a group of columns: a frozen dataclass of column fields (or groups)."""
    return field(default_factory=group, metadata={"group": group})


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    digits: int | None = None


@dataclass(frozen=True)
class Figures:
    """The figures a trial's measurements give (or one rank's) beside its two headline figures
    (throughput and wait_ratio, which every record type holds at its top): their intervals and
    the times per batch, defined here once for both record types."""

    wait_ratio_lo: float | None = column_field(FLOAT, 4)
    wait_ratio_hi: float | None = column_field(FLOAT, 4)
    throughput_lo: float | None = column_field(FLOAT, 2)
    throughput_hi: float | None = column_field(FLOAT, 2)
    wait_ms: float | None = column_field(FLOAT, 3)
    wait_p95_ms: float | None = column_field(FLOAT, 3)
    h2d_ms: float | None = column_field(FLOAT, 3)
    step_ms: float | None = column_field(FLOAT, 3)
    first_batch_s: float | None = column_field(FLOAT, 3)
    epoch_start_ms: float | None = column_field(FLOAT, 3)
    h2d_gb_per_s: float | None = column_field(FLOAT, 3)


# The shared figure columns, in the order both record types write them.
FIGURES = ("wait_ratio", "wait_ratio_lo", "wait_ratio_hi", "throughput", "throughput_lo", "throughput_hi",
           "wait_ms", "wait_p95_ms", "h2d_ms", "step_ms", "first_batch_s", "epoch_start_ms", "h2d_gb_per_s")

Place = tuple[tuple[str, ...], "dataclasses.Field[Any]"]


_PLACES: dict[type, dict[str, Place]] = {}


def places(kind: type) -> dict[str, Place]:
    """Each column of the dataclass `kind`: the path of group fields that holds it, and its field."""
    if kind in _PLACES:
        return _PLACES[kind]
    found: dict[str, Place] = {}
    for f in dataclasses.fields(kind):
        group = f.metadata.get("group")
        if group is None:
            found[f.name] = ((), f)
            continue
        for name, (path, inner) in places(group).items():
            found[name] = ((f.name, *path), inner)
    _PLACES[kind] = found
    return found


def build(kind: type[T], values: dict[str, Any]) -> T:
    """An instance of the dataclass `kind` (and its groups) from flat column values; a column
    not given is None."""
    unknown = set(values) - set(places(kind))
    if unknown:
        raise TypeError(f"{kind.__name__}: unknown columns {', '.join(sorted(unknown))}")
    return _build(kind, values)


def _build(kind: type[T], values: dict[str, Any]) -> T:
    given: dict[str, Any] = {}
    for f in dataclasses.fields(kind):  # type: ignore[arg-type]
        group = f.metadata.get("group")
        if group is not None:
            given[f.name] = _build(group, values)
        elif f.name in values:
            given[f.name] = values[f.name]
    return kind(**given)


@dataclass(frozen=True)
class RecordTable:
    """Helpers shared by the record types: the column table, rounding, and the two headline
    figures with the rest of the figures (Figures) they all hold."""

    COLUMN_ORDER: ClassVar[tuple[str, ...]] = ()  # every column, in CSV order

    throughput: float | None = column_field(FLOAT, 2)
    wait_ratio: float | None = column_field(FLOAT, 4)
    figures: Figures = group_field(Figures)

    @classmethod
    def columns(cls) -> tuple[Column, ...]:
        held = places(cls)
        return tuple(Column(n, held[n][1].metadata["kind"], held[n][1].metadata["digits"])
                     for n in cls.COLUMN_ORDER)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return cls.COLUMN_ORDER

    @classmethod
    def of(cls: type[R], **values: Any) -> R:
        """A record from flat column values (column name -> value), as they are given."""
        return build(cls, values)

    @classmethod
    def rounded(cls: type[R], **values: Any) -> R:
        """A record with each float rounded to its column's digits; NaN and infinities become None."""
        digits = {c.name: c.digits for c in cls.columns() if c.kind == FLOAT}
        for name, value in values.items():
            if name in digits and value is not None:
                value = float(value)
                values[name] = None if not math.isfinite(value) else (
                    round(value, digits[name]) if digits[name] is not None else value)
        return cls.of(**values)

    def column(self, name: str) -> Any:
        """The value of the column `name`, wherever its group holds it."""
        held: Any = self
        for step in places(type(self))[name][0]:
            held = getattr(held, step)
        return getattr(held, name)

    def with_columns(self: R, **values: Any) -> R:
        """A copy with the given columns (column name -> value) set."""
        return type(self).of(**{**self.to_dict(), **values})

    def to_dict(self) -> dict[str, Any]:
        """The values in column order."""
        return {name: self.column(name) for name in self.names()}

    @property
    def throughput_interval(self) -> Interval | None:
        return _interval(self.throughput, self.figures.throughput_lo, self.figures.throughput_hi)

    @property
    def wait_ratio_interval(self) -> Interval | None:
        return _interval(self.wait_ratio, self.figures.wait_ratio_lo, self.figures.wait_ratio_hi)


R = TypeVar("R", bound=RecordTable)
T = TypeVar("T")


def _interval(mean: float | None, lo: float | None, hi: float | None) -> Interval | None:
    if mean is None:
        return None
    return Interval(mean, mean if lo is None else lo, mean if hi is None else hi)
