"""How long something took, in words a person reads at a glance, and the clock it is read from."""

from __future__ import annotations

from typing import Callable

# A clock: seconds from an arbitrary start (time.monotonic, or a test's).
Clock = Callable[[], float]

SECONDS_ONLY_BELOW_S = 100  # shorter durations in whole seconds ("31 s"), longer ones in minutes too
SECONDS_PER_MINUTE = 60
SECONDS_PER_HOUR = 3600


def duration_text(seconds: float) -> str:
    """`seconds` rounded to whole seconds, in words: "31 s" under SECONDS_ONLY_BELOW_S, then
    "2 min 5 s", and from an hour on "1 h 5 min"."""
    whole = max(0, round(seconds))
    if whole < SECONDS_ONLY_BELOW_S:
        return f"{whole} s"
    if whole < SECONDS_PER_HOUR:
        minutes, rest_s = divmod(whole, SECONDS_PER_MINUTE)
        return f"{minutes} min {rest_s} s"
    hours, rest_s = divmod(whole, SECONDS_PER_HOUR)
    return f"{hours} h {rest_s // SECONDS_PER_MINUTE} min"
