"""A figure with its 95% interval, and the warning when the interval is too wide to trust."""

from __future__ import annotations

from dataclasses import dataclass

from loadtune.record.findings import Unstable

# Half an interval's width above this share of its mean makes a result unstable.
NOISY_RELATIVE_SPREAD = 0.10


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float

    @property
    def relative_spread(self) -> float:
        """Half the interval's width relative to the mean: 0.1 reads as "±10%"."""
        return (self.hi - self.lo) / 2 / abs(self.mean) if self.mean else 0.0


def unstable_note(name: str, throughput: Interval, repeats: int = 1) -> Unstable | None:
    """The finding when a trial's throughput interval (from `repeats` processes) is wider than
    ±NOISY_RELATIVE_SPREAD of its mean, else None."""
    spread = throughput.relative_spread
    return Unstable(name, spread, repeats) if spread > NOISY_RELATIVE_SPREAD else None
