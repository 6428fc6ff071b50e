"""The column table of the results records: each column's kind and, for floats, the digits it
is rounded to, given by the metadata of a record type's fields, and the block of figures every
record type shares (Figures) with the helpers those types have in common (RecordTable).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from loadtune.results.interval import Interval

INT, FLOAT, BOOL, TEXT = "int", "float", "bool", "text"
TRUE_TEXT = frozenset({"true", "yes", "1"})
FALSE_TEXT = frozenset({"false", "no", "0"})


def column_field(kind: str, digits: int | None = None) -> Any:
    # Any, as dataclasses.field() is typed: each field has its annotation's type.
    return field(default=None, metadata={"kind": kind, "digits": digits})


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    digits: int | None = None


@dataclass(frozen=True)
class Figures:
    """The figures a trial's measurements give (or one rank's): defined here once, the columns
    both record types share, in this order."""

    wait_ratio: float | None = column_field(FLOAT, 4)
    wait_ratio_lo: float | None = column_field(FLOAT, 4)
    wait_ratio_hi: float | None = column_field(FLOAT, 4)
    throughput: float | None = column_field(FLOAT, 2)
    throughput_lo: float | None = column_field(FLOAT, 2)
    throughput_hi: float | None = column_field(FLOAT, 2)
    wait_ms: float | None = column_field(FLOAT, 3)
    wait_p95_ms: float | None = column_field(FLOAT, 3)
    h2d_ms: float | None = column_field(FLOAT, 3)
    step_ms: float | None = column_field(FLOAT, 3)
    first_batch_s: float | None = column_field(FLOAT, 3)
    epoch_start_ms: float | None = column_field(FLOAT, 3)
    h2d_gb_per_s: float | None = column_field(FLOAT, 3)

    @property
    def throughput_interval(self) -> Interval | None:
        return _interval(self.throughput, self.throughput_lo, self.throughput_hi)

    @property
    def wait_ratio_interval(self) -> Interval | None:
        return _interval(self.wait_ratio, self.wait_ratio_lo, self.wait_ratio_hi)


FIGURES = tuple(f.name for f in dataclasses.fields(Figures))


@dataclass(frozen=True)
class RecordTable(Figures):
    """Helpers shared by the record types: the column table and rounding. The shared figures
    (Figures) sit in the columns where FIGURES_AT says, `h2d_gb_per_s` where H2D_AT says."""

    FIGURES_AT: ClassVar[str] = ""  # the column the figures follow
    H2D_AT: ClassVar[str] = ""  # the column h2d_gb_per_s follows

    @classmethod
    def columns(cls) -> tuple[Column, ...]:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        own = [name for name in fields if name not in FIGURES]
        order: list[str] = []
        for name in own:
            order.append(name)
            if name == cls.FIGURES_AT:
                order.extend(n for n in FIGURES if n != "h2d_gb_per_s")
            if name == cls.H2D_AT:
                order.append("h2d_gb_per_s")
        return tuple(Column(n, fields[n].metadata["kind"], fields[n].metadata["digits"]) for n in order)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(c.name for c in cls.columns())

    @classmethod
    def rounded(cls: type[R], **values: Any) -> R:
        """A record with each float rounded to its column's digits; NaN and infinities become None."""
        digits = {c.name: c.digits for c in cls.columns() if c.kind == FLOAT}
        for name, value in values.items():
            if name in digits and value is not None:
                value = float(value)
                values[name] = None if not math.isfinite(value) else (
                    round(value, digits[name]) if digits[name] is not None else value)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The values in column order."""
        return {name: getattr(self, name) for name in self.names()}


R = TypeVar("R", bound=RecordTable)


def _interval(mean: float | None, lo: float | None, hi: float | None) -> Interval | None:
    if mean is None:
        return None
    return Interval(mean, mean if lo is None else lo, mean if hi is None else hi)
